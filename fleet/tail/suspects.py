"""Score each suspect: seconds of the tail's mean excess it explains, with the evidence.

Queueing and preemption are measured directly (the tail's extra queue time and extra stall). The
others come from the service-time fit: each feature explains coefficient × (tail mean − body mean)
seconds, summed over its group's columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from fleetwatch.fleet.tail.model import INTERFERENCE, OUTPUT, PROMPT, REPLICA, Fit
from fleetwatch.fleet.tail.report import Suspect
from fleetwatch.fleet.tail.sums import TailSums

__all__ = [
    "FITTED",
    "bad_replica",
    "output_length",
    "preemption",
    "prefill_interference",
    "prompt_length",
    "queueing",
]


def _suspect(name: str, seconds: float, sums: TailSums, evidence: tuple[str, ...]) -> Suspect:
    excess = _excess(sums)
    share = seconds / excess if excess > 0 else math.nan
    return Suspect(name, seconds, share, evidence)


def _excess(sums: TailSums) -> float:
    tail, body = sums.means(sums.y_tail, sums.y_sum)
    return tail - body


def queueing(sums: TailSums) -> Suspect:
    """The tail's extra queue time; a queue that grows over the run by more than a typical
    request takes means arrivals exceed capacity."""
    q_t, q_b = sums.means(sums.parts_tail["queue"], sums.parts_sum["queue"])
    growth = sums.queue_growth()
    body_mean = sums.means(sums.y_tail, sums.y_sum)[1]
    overload = (
        " (growing by more than a typical request takes: arrivals exceed capacity)"
        if growth > body_mean
        else ""
    )
    return _suspect(
        "queueing",
        q_t - q_b,
        sums,
        (
            f"queue mean {q_t:.4g} s in the tail vs {q_b:.4g} s in the body",
            f"queue time trend over the run: {growth:+.4g} s end to end" + overload,
        ),
    )


def preemption(sums: TailSums) -> Suspect:
    """The tail's extra preemption stall, and how much more often the tail was preempted."""
    s_t, s_b = sums.means(sums.parts_tail["preemption_stall"], sums.parts_sum["preemption_stall"])
    p_t, p_b = sums.means(float(sums.preempted_tail), float(sums.preempted))
    return _suspect(
        "preemption",
        s_t - s_b,
        sums,
        (
            f"stall mean {s_t:.4g} s in the tail vs {s_b:.4g} s in the body",
            f"preempted: {p_t:.1%} of the tail vs {p_b:.1%} of the body",
        ),
    )


def _explained(fit: Fit, name: str, sums: TailSums) -> tuple[float, float, float, float]:
    """Seconds the group ``name`` explains; its first column's coefficient and that column's
    tail and body means."""
    seconds = 0.0
    for j in fit.groups[name]:
        vt, vb = sums.means(float(sums.col_tail[j]), float(sums.col_sum[j]))
        seconds += float(fit.beta[j] * (vt - vb))
    first = fit.groups[name][0]
    vt, vb = sums.means(float(sums.col_tail[first]), float(sums.col_sum[first]))
    return seconds, float(fit.beta[first]), vt, vb


def prompt_length(fit: Fit, sums: TailSums) -> Suspect:
    """Longer uncached prompts in the tail, at the fitted seconds per prompt token."""
    seconds, b, vt, vb = _explained(fit, PROMPT, sums)
    return _suspect(
        PROMPT,
        seconds,
        sums,
        (
            f"uncached prompt tokens: tail mean {vt:.0f} vs body {vb:.0f}; "
            f"{b * 1000:.3g} ms per token",
            f"tail max {sums.tail_max_uncached:.0f} tokens; body p99 "
            f"{sums.body_uncached_percentile(99):.0f}",
        ),
    )


def output_length(fit: Fit, sums: TailSums) -> Suspect:
    """Longer outputs in the tail, at the fitted seconds per output token."""
    seconds, b, vt, vb = _explained(fit, OUTPUT, sums)
    return _suspect(
        OUTPUT,
        seconds,
        sums,
        (f"output tokens: tail mean {vt:.0f} vs body {vb:.0f}; {b * 1000:.3g} ms per token",),
    )


def prefill_interference(fit: Fit, sums: TailSums) -> Suspect:
    """More long prefills in flight beside tail requests on their replica."""
    seconds, b, vt, vb = _explained(fit, INTERFERENCE, sums)
    return _suspect(
        INTERFERENCE,
        seconds,
        sums,
        (
            f"prompt tokens of other long prefills (>= {fit.long_threshold:.0f} uncached tokens) "
            f"in flight on the same replica: tail mean {vt:.0f} vs body {vb:.0f}",
            f"{b * 1e6:.3g} µs of delay per such token",
        ),
    )


def bad_replica(fit: Fit, sums: TailSums) -> Suspect:
    """The replica over-represented in the tail, and how much slower it serves."""
    seconds, _, vt, vb = _explained(fit, REPLICA, sums)
    return _suspect(
        REPLICA,
        seconds,
        sums,
        (f"replica {fit.bad_replica}: {vt:.1%} of the tail vs {vb:.1%} of the body",),
    )


FITTED: Mapping[str, Callable[[Fit, TailSums], Suspect]] = {
    PROMPT: prompt_length,
    OUTPUT: output_length,
    INTERFERENCE: prefill_interference,
    REPLICA: bad_replica,
}
"""The scorer of each suspect the service-time fit explains, by feature group."""
