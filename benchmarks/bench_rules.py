"""What the SLO rules cost Prometheus at fleet size: raw samples read per evaluation round of the
vLLM example spec (``slo/examples/vllm.yaml``: four SLOs, 30- and 28-day periods) on 200 vLLM
replicas, for fleetwatch's rules and for Sloth's shape of the same SLOs, side by side.

Run with ``.venv/bin/python -m benchmarks rules``. A cost model: each range selector ``x[W]``
reads (series it matches) x (W / scrape interval + 1) samples (Prometheus 2 includes both ends
of a range), a recorded series' range W / (evaluation interval) + 1, and a subquery ``x[W:S]``
W / S samples per series. ``benchmarks/rules_live.py`` checks it against a live Prometheus.
The series a selector matches are counted on a 200-replica, one-model vLLM fleet: one series per
replica for a bucket (``le="1"``), a ``_count`` or each ``finished_reason`` a matcher names,
four for the bare request counter (stop, length, abort, error). Scrape 15 s, rules every 30 s (the spec's).

Sloth's shape, written by hand from ``slok/sloth`` ``examples/_gen/getting-started.yml``: every
burn window (5m, 30m, 1h, 2h, 6h, 1d, 3d) a ratio of raw rates, and the period as
``sum_over_time(slo:sli_error:ratio_rate5m[30d]) / count_over_time(...[30d])`` (a mean of
5-minute ratios). Both are given the same SLI selectors (fleetwatch's for this profile).

Rows: fleetwatch today (the period from the shortest window's recorded counts), fleetwatch with
the period read raw (as before), and Sloth. Then the model against a live Prometheus
(``benchmarks/rules_live.py``): the samples each raw-window rule reads, by Prometheus's own
query statistics, for a one-day spec on a day of 200 replicas' series.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from fleetwatch.core.duration import format_duration, parse_duration
from fleetwatch.core.profiles import get_profile
from fleetwatch.slo.load import read_spec
from fleetwatch.slo.rules import generate_rules
from fleetwatch.slo.rules.promql import sli_query

REPLICAS: Final = 200
SCRAPE_S: Final = 15
EVAL_S: Final = 30
SPEC: Final = Path(__file__).resolve().parents[1] / "slo" / "examples" / "vllm.yaml"
SLOTH_WINDOWS: Final = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

_RANGE = re.compile(r"([a-zA-Z_:][\w:]*)(\{[^{}]*\})?\[(\w+)(?::(\w+))?\]")


def _series(name: str, matchers: str) -> int:
    """Series a selector matches on the fleet."""
    if name.startswith("slo:"):
        return 1
    if name == "vllm:request_success_total":
        reason = re.search(r'finished_reason(=~|=)"([^"]*)"', matchers)
        return REPLICAS * (4 if reason is None else len(reason.group(2).split("|")))
    return REPLICAS


def samples(exprs: Iterable[str]) -> int:
    """Samples one round of ``exprs`` reads, by the cost model."""
    total = 0
    for expr in exprs:
        for m in _RANGE.finditer(expr):
            name, matchers, window, step = m.group(1), m.group(2) or "", m.group(3), m.group(4)
            w = parse_duration(window)
            if step is not None:
                total += _series(name, matchers) * (w // parse_duration(step))
            elif name.startswith("slo:"):
                total += w // EVAL_S + 1
            else:
                # Prometheus 2's range selectors include both ends: W / interval + 1 samples.
                total += _series(name, matchers) * (w // SCRAPE_S + 1)
    return total


def _fleetwatch(raw_period: bool) -> list[str]:
    spec = read_spec(SPEC)
    profile = get_profile("vllm")
    exprs = [r.expr for g in generate_rules(spec, profile).groups for r in g.rules]
    if raw_period:
        for slo in spec.slos:
            exprs.append(sli_query(slo, profile).error_ratio(format_duration(slo.period_s)))
        exprs = [e for e in exprs if "sum_over_time" not in e]
    return exprs


def _sloth() -> list[str]:
    spec = read_spec(SPEC)
    profile = get_profile("vllm")
    exprs = []
    for slo in spec.slos:
        query = sli_query(slo, profile)
        exprs += [query.error_ratio(w) for w in SLOTH_WINDOWS]
        period = format_duration(slo.period_s)
        ratio = f'slo:sli_error:ratio_rate5m{{sloth_slo="{slo.name}"}}'
        exprs.append(f"sum_over_time({ratio}[{period}]) / count_over_time({ratio}[{period}])")
    return exprs


def main() -> None:
    rows = [
        ("fleetwatch (period from recorded 5m counts)", samples(_fleetwatch(raw_period=False))),
        ("fleetwatch, period read raw (before)", samples(_fleetwatch(raw_period=True))),
        ("Sloth's shape", samples(_sloth())),
    ]
    sloth = rows[-1][1]
    print(
        f"raw samples read per rule evaluation round: {SPEC.name}, {REPLICAS} vLLM replicas, "
        f"scrape {SCRAPE_S} s, rules every {EVAL_S} s (cost model)"
    )
    print(f"{'rules':<46} {'samples/round':>15} {'vs Sloth':>9}")
    for name, n in rows:
        print(f"{name:<46} {n:>15,} {n / sloth:>8.2f}x")

    from benchmarks.rules_live import measure

    replicas, hours = 200, 24
    print(
        f"\nlive: a one-day spec's raw-window rules on a Prometheus holding {hours} h of "
        f"{replicas} replicas (one sample a minute), totalQueryableSamples of one round"
    )
    print(f"{'rules':<14} {'measured':>12} {'model':>12}")
    for name, (measured, model) in measure(replicas, hours).items():
        print(f"{name:<14} {measured:>12,} {model:>12,}")
