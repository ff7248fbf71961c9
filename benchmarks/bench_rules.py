"""What the SLO rules cost Prometheus at fleet size: raw samples read per evaluation round of the
vLLM example spec (``slo/examples/vllm.yaml``: four SLOs, 30- and 28-day periods) on 200 vLLM
replicas, for fleetwatch's rules and for Sloth's shape of the same SLOs, side by side.

Run with ``.venv/bin/python -m benchmarks rules``. The cost model is ``benchmarks/rule_cost.py``
(series a selector matches x window / interval), on a 200-replica, one-model vLLM fleet scraped
every 15 s, rules every 30 s (the spec's).

Sloth's shape (``benchmarks/sloth_rules.py``, written by hand from ``slok/sloth``
``examples/_gen/getting-started.yml``): every burn window (5m, 30m, 1h, 2h, 6h, 1d, 3d) a ratio
of raw rates, and the period as ``sum_over_time(slo:sli_error:ratio_rate5m[30d]) /
count_over_time(...[30d])`` (a mean of 5-minute ratios). Both are given the same SLI selectors
(fleetwatch's for this profile).

Rows: fleetwatch today (the 1d and 3d burn windows and the period summed from the shortest
window's recorded counts), fleetwatch with the burn windows raw (before), with the period raw
too (before that), and Sloth. Then a live Prometheus (``benchmarks/rules_live.py``): the samples
each raw-window rule reads, by Prometheus's own query statistics, for a two-day spec (windows
to 1d) on 25 h of 200 replicas' series, and both rule sets' group evaluation time on that
server, side by side.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from benchmarks import rule_cost
from benchmarks.sloth_rules import sloth_raw_exprs
from fleetwatch.core.duration import format_duration
from fleetwatch.core.profiles import get_profile
from fleetwatch.core.rules import RecordingRule
from fleetwatch.slo.load import read_spec
from fleetwatch.slo.rules import generate_rules
from fleetwatch.slo.rules.promql import sli_query

REPLICAS: Final = 200
SCRAPE_S: Final = 15
EVAL_S: Final = 30
SPEC: Final = Path(__file__).resolve().parents[1] / "slo" / "examples" / "vllm.yaml"


def samples(exprs: Iterable[str]) -> int:
    """Samples one round of ``exprs`` reads at this benchmark's fleet size."""
    return rule_cost.samples(exprs, replicas=REPLICAS, scrape_s=SCRAPE_S, eval_s=EVAL_S)


def _fleetwatch(raw: Iterable[str] = ()) -> list[str]:
    """fleetwatch's rule expressions for ``SPEC``; with ``raw`` naming ``"burn"`` and/or
    ``"period"``, those windows read raw as they did before being summed from the recorded
    5-minute counts."""
    spec = read_spec(SPEC)
    profile = get_profile("vllm")
    exprs = []
    for slo, group in zip(spec.slos, generate_rules(spec, profile).groups, strict=True):
        query = sli_query(slo, profile)
        for r in group.rules:
            expr = r.expr
            window = r.labels.get("window", "")
            if isinstance(r, RecordingRule) and "sum_over_time" in expr:
                period = window == format_duration(slo.period_s)
                if ("period" if period else "burn") in raw:
                    expr = (
                        query.error_ratio(window)
                        if r.record.startswith("slo:sli_error:")
                        else query.events(window)
                    )
            exprs.append(expr)
    return exprs


def _sloth() -> list[str]:
    return sloth_raw_exprs(read_spec(SPEC), get_profile("vllm"))


def main() -> None:
    rows = [
        ("fleetwatch (1d, 3d, period: recorded 5m counts)", samples(_fleetwatch())),
        ("fleetwatch, burn windows raw (before)", samples(_fleetwatch({"burn"}))),
        ("fleetwatch, all raw (before that)", samples(_fleetwatch({"burn", "period"}))),
        ("Sloth's shape", samples(_sloth())),
    ]
    sloth = rows[-1][1]
    print(
        f"raw samples read per rule evaluation round: {SPEC.name}, {REPLICAS} vLLM replicas, "
        f"scrape {SCRAPE_S} s, rules every {EVAL_S} s (cost model)"
    )
    print(f"{'rules':<50} {'samples/round':>15} {'vs Sloth':>9}")
    for name, n in rows:
        print(f"{name:<50} {n:>15,} {n / sloth:>8.2f}x")

    from benchmarks.rules_live import measure

    replicas, hours, evaluations, interval = 200, 25, 15, 5
    print(
        f"\nlive: a two-day spec's rules (windows to 1d) on a Prometheus holding {hours} h of "
        f"{replicas} replicas "
        f"(one sample a minute): totalQueryableSamples of one round of the raw-window rules, and "
        f"the rule groups' evaluation time (prometheus_rule_group_last_duration_seconds, sum over "
        f"a rule set's groups, median of {evaluations} rounds every {interval} s, both sets loaded "
        f"in the same server)"
    )
    live = measure(replicas, hours, evaluations, interval)
    print(
        f"{'rules':<14} {'measured':>12} {'model':>12} {'groups':>7} {'eval median':>12} "
        f"{'min':>8} {'max':>8} {'failed':>7}"
    )
    for name, cost in live.items():
        t = cost.times
        assert t is not None
        print(
            f"{name:<14} {cost.measured:>12,} {cost.predicted:>12,} {t.groups:>7} "
            f"{t.median_s * 1000:>10.1f}ms {min(t.rounds) * 1000:>6.1f}ms "
            f"{max(t.rounds) * 1000:>6.1f}ms {t.failures:>7}"
        )
    ours, sloth = (live[n].times for n in ("fleetwatch", "sloth"))
    assert ours is not None and sloth is not None
    ratios = sorted(a / b for a, b in zip(ours.rounds, sloth.rounds, strict=True))
    print(
        f"fleetwatch / Sloth evaluation time: {ours.median_s / sloth.median_s:.2f}x of medians; "
        f"per round {statistics.median(ratios):.2f}x median ({ratios[0]:.2f}-{ratios[-1]:.2f}x)"
    )
