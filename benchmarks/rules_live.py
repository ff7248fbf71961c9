"""The rule-cost model checked on a live Prometheus: a day of a 200-replica vLLM fleet's series
written as a TSDB block (``promtool tsdb create-blocks-from openmetrics``), a Prometheus on
loopback serving it, and each raw-window rule expression of a one-day SLO spec queried once at
the end with ``stats=all``: ``totalQueryableSamples`` against what the cost model
predicts (``benchmarks/rule_cost.py``), for fleetwatch's rules and Sloth's shape of the same SLOs.

Only the series the SLOs read are written (the request counter by ``finished_reason``; each
histogram's threshold bucket and ``_count``), one sample a minute. Expressions over recorded
series (the period's ``sum_over_time`` of the recorded counts, Sloth's of its 5-minute ratio) read series the
block does not hold (no rule ever ran over it); the model's count for them is W / evaluation
interval + 1 per series, and they are left out of the comparison.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from fleetwatch.core.profiles import get_profile
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules
from fleetwatch.slo.rules.promql import sli_query

MODEL: Final = "meta-llama/Llama-3.1-8B-Instruct"
SPEC: Final = f"""
service: llama-vllm
evaluation_interval: 60s
slos:
  - name: availability
    objective: 99.9
    period: 1d
    sli: {{kind: availability, bad: [error, aborted]}}
    windows: [{{severity: page, long: 1h, short: 5m, burn: 14.4}},
              {{severity: ticket, long: 6h, short: 30m, burn: 2}}]
  - name: ttft
    objective: 99
    period: 1d
    selector: {{model: {MODEL}}}
    sli: {{kind: latency, signal: ttft, threshold: 1}}
    windows: [{{severity: page, long: 1h, short: 5m, burn: 14.4}},
              {{severity: ticket, long: 6h, short: 30m, burn: 2}}]
"""
SLOTH_WINDOWS: Final = ("5m", "30m", "1h", "6h")
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
    yield "# EOF\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _raw(expr: str) -> bool:
    return "slo:" not in expr and "[" in expr


def expressions() -> dict[str, list[str]]:
    """The raw-window rule expressions of fleetwatch and of Sloth's shape for ``SPEC``."""
    spec = load_spec(SPEC)
    profile = get_profile("vllm")
    ours = [r.expr for g in generate_rules(spec, profile).groups for r in g.rules]
    sloth = [sli_query(slo, profile).error_ratio(w) for slo in spec.slos for w in SLOTH_WINDOWS]
    return {"fleetwatch": [e for e in ours if _raw(e)], "sloth": sloth}


def measure(replicas: int = 200, hours: int = 24) -> dict[str, tuple[int, int]]:
    """(measured, predicted) raw samples a round, per rule set."""
    from benchmarks.rule_cost import samples

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
        (folder / "prometheus.yml").write_text("global: {}\n")
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
            url = f"http://127.0.0.1:{port}/api/v1/query"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            out = {}
            for name, exprs in expressions().items():
                measured = 0
                for expr in exprs:
                    query = urllib.parse.urlencode(
                        {"query": expr, "time": str(end_s), "stats": "all"}
                    )
                    with urllib.request.urlopen(f"{url}?{query}", timeout=120) as resp:
                        body = json.load(resp)
                    measured += int(body["data"]["stats"]["samples"]["totalQueryableSamples"])
                out[name] = (measured, samples(exprs, replicas=replicas, scrape_s=60, eval_s=60))
            return out
        finally:
            proc.terminate()
            proc.wait(30)
