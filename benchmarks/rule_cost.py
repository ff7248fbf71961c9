"""The rule-cost model: raw samples one evaluation round of rule expressions reads.

Each range selector ``x[W]`` reads (series it matches) x (W / scrape interval + 1) samples
(Prometheus 2 includes both ends of a range), a recorded series' range W / (evaluation interval)
+ 1, and a subquery ``x[W:S]`` W / S samples per series. The series a selector matches are
counted on a fleet of one-model vLLM replicas: one per replica for a bucket, a ``_count`` or
each ``finished_reason`` a matcher names, four for the bare request counter (stop, length,
abort, error); a recorded ``slo:`` series is one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleetwatch.core.duration import parse_duration

__all__ = ["samples"]

_RANGE = re.compile(r"([a-zA-Z_:][\w:]*)(\{[^{}]*\})?\[(\w+)(?::(\w+))?\]")


def _series(name: str, matchers: str, replicas: int) -> int:
    """Series a selector matches on the fleet."""
    if name.startswith("slo:"):
        return 1
    if name == "vllm:request_success_total":
        reason = re.search(r'finished_reason(=~|=)"([^"]*)"', matchers)
        return replicas * (4 if reason is None else len(reason.group(2).split("|")))
    return replicas


def samples(exprs: Iterable[str], *, replicas: int, scrape_s: int, eval_s: int) -> int:
    """Samples one round of ``exprs`` reads, by the model."""
    total = 0
    for expr in exprs:
        for m in _RANGE.finditer(expr):
            name, matchers, window, step = m.group(1), m.group(2) or "", m.group(3), m.group(4)
            w = parse_duration(window)
            if step is not None:
                total += _series(name, matchers, replicas) * (w // parse_duration(step))
            elif name.startswith("slo:"):
                total += w // eval_s + 1
            else:
                total += _series(name, matchers, replicas) * (w // scrape_s + 1)
    return total
