"""The rule cost on a live Prometheus: a day of a 200-replica vLLM fleet's series written as a
TSDB block (``promtool tsdb create-blocks-from openmetrics``), a Prometheus on loopback serving
it with fleetwatch's rules and Sloth's (``benchmarks/sloth_rules.py``) for the same SLO spec
(``SPEC``: two days, the Workbook's windows up to the one-day ticket) loaded side by side.

- Samples: each raw-window rule expression queried once at the block's last minute with
  ``stats=all``: ``totalQueryableSamples`` against what the cost model predicts
  (``benchmarks/rule_cost.py``). Expressions over recorded series are left out (the model's
  count for them is W / evaluation interval + 1 per series).
- Time: every group's ``prometheus_rule_group_last_duration_seconds`` at each of its
  evaluations, read from the server's own ``/metrics``; a rule set's round is the sum of its
  groups' durations at their n-th evaluation (the first, cold, left out).

Only the series the SLOs read are written (the request counter by ``finished_reason``; each
histogram's threshold bucket and ``_count``), one sample a minute up to the minute the run
starts, so the rules, which evaluate at the server's 'now' a minute or two later, find samples
in every window (the shortest is 5 minutes). The series the rules record over the period (the
5-minute counts fleetwatch sums, the 5-minute ratio Sloth averages) are in the block too, one a
minute over the whole day, as a server that has run the rules for a day holds them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from benchmarks.sloth_rules import sloth_groups, sloth_raw_exprs
from fleetwatch.core.profiles import get_profile
from fleetwatch.core.rules import RuleFile, RuleGroup, render_yaml
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules
from fleetwatch.slo.spec import SLOSpec

MODEL: Final = "meta-llama/Llama-3.1-8B-Instruct"
SPEC: Final = f"""
service: llama-vllm
evaluation_interval: 60s
slos:
  - name: availability
    objective: 99.9
    period: 2d
    sli: {{kind: availability, bad: [error, aborted]}}
    windows: [{{severity: page, long: 1h, short: 5m, burn: 14.4}},
              {{severity: page, long: 6h, short: 30m, burn: 6}},
              {{severity: ticket, long: 1d, short: 2h, burn: 3}}]
  - name: ttft
    objective: 99
    period: 2d
    selector: {{model: {MODEL}}}
    sli: {{kind: latency, signal: ttft, threshold: 1}}
    windows: [{{severity: page, long: 1h, short: 5m, burn: 14.4}},
              {{severity: page, long: 6h, short: 30m, burn: 6}},
              {{severity: ticket, long: 1d, short: 2h, burn: 3}}]
"""
REASONS: Final = ("stop", "length", "abort", "error")


def _openmetrics(replicas: int, start_s: int, minutes: int) -> Iterator[str]:
    """The fleet's series, one sample a minute, as OpenMetrics text (family by family)."""
    yield "# TYPE vllm:request_success counter\n"
    for r in range(replicas):
        for k, reason in enumerate(REASONS):
            labels = (
                f'instance="r{r}:8000",job="vllm",model_name="{MODEL}",finished_reason="{reason}"'
            )
            per = 100 if reason == "stop" else 1 + k
            for m in range(minutes):
                yield f"vllm:request_success_total{{{labels}}} {per * m} {start_s + 60 * m}\n"
    yield "# TYPE vllm:time_to_first_token_seconds histogram\n"
    for r in range(replicas):
        base = f'instance="r{r}:8000",job="vllm",model_name="{MODEL}"'
        for m in range(minutes):
            t = start_s + 60 * m
            yield f'vllm:time_to_first_token_seconds_bucket{{{base},le="1.0"}} {99 * m} {t}\n'
            yield f'vllm:time_to_first_token_seconds_bucket{{{base},le="+Inf"}} {100 * m} {t}\n'
            yield f"vllm:time_to_first_token_seconds_count{{{base}}} {100 * m} {t}\n"
            yield f"vllm:time_to_first_token_seconds_sum{{{base}}} {50 * m} {t}\n"
    yield from _recorded(replicas, start_s, minutes)
    yield "# EOF\n"


def _recorded(replicas: int, start_s: int, minutes: int) -> Iterator[str]:
    """The 5-minute series each rule set sums over the period, one sample a minute: what the
    rules would have recorded over the day (fleet-wide 5-minute counts and their ratio)."""
    spec = load_spec(SPEC)
    for name, kind in (
        ("slo:sli_bad:increase5m", "bad"),
        ("slo:sli_events:increase5m", "events"),
        ("slo:sli_error:ratio_rate5m", "ratio"),
    ):
        yield f"# TYPE {name} gauge\n"
        for slo in spec.slos:
            if kind == "ratio":
                labels = (
                    f'sloth_id="{spec.service}-{slo.name}",sloth_service="{spec.service}",'
                    f'sloth_slo="{slo.name}",sloth_window="5m"'
                )
            else:
                labels = f'service="{spec.service}",slo="{slo.name}",window="5m"'
            value = {"bad": 5 * replicas, "events": 500 * replicas, "ratio": 0.01}[kind]
            for m in range(minutes):
                yield f"{name}{{{labels}}} {value} {start_s + 60 * m}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _raw(expr: str) -> bool:
    return "slo:" not in expr and "[" in expr


def rule_groups(interval_s: int | None = None) -> dict[str, tuple[RuleGroup, ...]]:
    """fleetwatch's and Sloth's rule groups for ``SPEC`` (every ``interval_s`` when given)."""
    spec = load_spec(SPEC)
    if interval_s is not None:
        spec = dataclasses.replace(spec, evaluation_interval_s=interval_s)
    profile = get_profile("vllm")
    return {
        "fleetwatch": generate_rules(spec, profile).groups,
        "sloth": sloth_groups(spec, profile, windows=None),
    }


def expressions() -> dict[str, list[str]]:
    """The raw-window rule expressions of fleetwatch and of Sloth's shape for ``SPEC``."""
    spec: SLOSpec = load_spec(SPEC)
    ours = [r.expr for g in rule_groups()["fleetwatch"] for r in g.rules]
    sloth = sloth_raw_exprs(spec, get_profile("vllm"), windows=None)
    return {"fleetwatch": [e for e in ours if _raw(e)], "sloth": [e for e in sloth if _raw(e)]}


@dataclass(frozen=True, slots=True)
class Server:
    """A Prometheus on loopback at ``url`` holding the fleet's block up to ``end_s`` (Unix
    seconds), with the rule files ``rules`` (rule set name -> path) loaded."""

    url: str
    end_s: int
    rules: Mapping[str, Path]


@contextmanager
def fleet_prometheus(
    replicas: int, hours: int, groups: Mapping[str, tuple[RuleGroup, ...]] = {}
) -> Iterator[Server]:
    """A real Prometheus serving ``hours`` of ``replicas`` replicas' series, evaluating
    ``groups`` (one rule file per rule set); stopped on exit."""
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if promtool is None or prometheus is None:
        raise RuntimeError("promtool and prometheus are needed (Debian's prometheus package)")
    minutes = hours * 60
    end_s = (int(time.time()) // 60) * 60
    start_s = end_s - 60 * (minutes - 1)
    with tempfile.TemporaryDirectory(prefix="fleetwatch-rule-cost-") as tmp:
        folder = Path(tmp)
        text = folder / "fleet.om"
        with text.open("w") as f:
            f.writelines(_openmetrics(replicas, start_s, minutes))
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(text),
                str(folder / "data"),
            ],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        text.unlink()
        files = {}
        for name, rule_groups_ in groups.items():
            files[name] = folder / f"{name}.rules.yaml"
            files[name].write_text(render_yaml(RuleFile(rule_groups_)))
        config = {"global": {}, "rule_files": [str(p) for p in files.values()]}
        (folder / "prometheus.yml").write_text(json.dumps(config))
        port = _free_port()
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=30d",
                "--log.level=error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"{base}/-/ready", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            yield Server(base, end_s, files)
        finally:
            proc.terminate()
            proc.wait(30)


def samples_read(server: Server, replicas: int) -> dict[str, tuple[int, int]]:
    """(measured, predicted) raw samples a round of each rule set's raw-window expressions
    reads, queried at the block's last minute."""
    from benchmarks.rule_cost import samples

    out = {}
    for name, exprs in expressions().items():
        measured = 0
        for expr in exprs:
            query = urllib.parse.urlencode(
                {"query": expr, "time": str(server.end_s), "stats": "all"}
            )
            with urllib.request.urlopen(f"{server.url}/api/v1/query?{query}", timeout=120) as resp:
                body = json.load(resp)
            measured += int(body["data"]["stats"]["samples"]["totalQueryableSamples"])
        out[name] = (measured, samples(exprs, replicas=replicas, scrape_s=60, eval_s=60))
    return out


def _group_metrics(server: Server) -> dict[str, tuple[float, float, float]]:
    """Per rule group (``file;name``): last evaluation time, its duration (s), and failed
    evaluations so far, from the server's ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    wanted = {
        "prometheus_rule_group_last_evaluation_timestamp_seconds": 0,
        "prometheus_rule_group_last_duration_seconds": 1,
        "prometheus_rule_evaluation_failures": 2,
    }
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        slot = wanted.get(family.name)
        if slot is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out.setdefault(sample.labels["rule_group"], [0.0, 0.0, 0.0])[slot] = sample.value
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


@dataclass(frozen=True, slots=True)
class EvalTimes:
    """A rule set's evaluation rounds: ``rounds`` (s, the sum of its groups' durations at the
    same evaluation, cold first one left out), over ``groups`` groups, and the failed rule
    evaluations the server counted (0 when every rule evaluated)."""

    rounds: tuple[float, ...]
    groups: int
    failures: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.rounds)


def evaluation_times(server: Server, evaluations: int, timeout_s: float) -> dict[str, EvalTimes]:
    """Each rule set's ``evaluations`` rounds after a cold first one, read from
    ``prometheus_rule_group_last_duration_seconds`` as the groups evaluate."""
    seen: dict[str, dict[float, float]] = {}
    deadline = time.monotonic() + timeout_s
    latest: dict[str, tuple[float, float, float]] = {}
    while True:
        latest = _group_metrics(server)
        for group, (at, took, _) in latest.items():
            if at > 0:
                seen.setdefault(group, {}).setdefault(at, took)
        done = [len(seen.get(g, {})) > evaluations for g in latest]
        if latest and all(done):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"rule groups evaluated fewer than {evaluations + 1} times")
        time.sleep(1)
    out = {}
    for name, path in server.rules.items():
        mine = [g for g in seen if g.startswith(f"{path};")]
        per_group = [[seen[g][t] for t in sorted(seen[g])][1 : evaluations + 1] for g in mine]
        rounds = tuple(sum(col) for col in zip(*per_group, strict=True))
        failures = int(sum(latest[g][2] for g in mine))
        out[name] = EvalTimes(rounds, len(mine), failures)
    return out


@dataclass(frozen=True, slots=True)
class LiveCost:
    """One rule set on the live server: raw samples a round (``measured`` by Prometheus,
    ``predicted`` by the model) and its evaluation ``times``."""

    measured: int
    predicted: int
    times: EvalTimes | None


def measure(
    replicas: int = 200, hours: int = 24, evaluations: int = 0, interval_s: int = 10
) -> dict[str, LiveCost]:
    """Both rule sets on one live server: samples each reads, and with ``evaluations`` > 0 the
    rule groups' evaluation time over that many rounds, every ``interval_s``."""
    groups = rule_groups(interval_s) if evaluations > 0 else {}
    with fleet_prometheus(replicas, hours, groups) as server:
        read = samples_read(server, replicas)
        times = (
            evaluation_times(server, evaluations, timeout_s=(evaluations + 3) * interval_s + 60)
            if evaluations > 0
            else {}
        )
    return {name: LiveCost(m, p, times.get(name)) for name, (m, p) in read.items()}
