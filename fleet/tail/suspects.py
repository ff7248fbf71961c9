"""Score each suspect: seconds of the tail's mean excess it explains, with the evidence.

Queueing and preemption are measured directly (the tail's extra queue time and extra stall). The
others come from the service-time fit: each feature explains coefficient × (tail mean − body mean)
seconds, summed over its group's columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from fleetwatch.fleet.tail.cohorts import F64, Cohorts, Requests
from fleetwatch.fleet.tail.model import INTERFERENCE, OUTPUT, PROMPT, REPLICA, Fit
from fleetwatch.fleet.tail.report import Suspect

__all__ = [
    "FITTED",
    "bad_replica",
    "output_length",
    "preemption",
    "prefill_interference",
    "prompt_length",
    "queueing",
]


def _suspect(name: str, seconds: float, c: Cohorts, evidence: tuple[str, ...]) -> Suspect:
    excess = c.excess_s
    share = seconds / excess if excess > 0 else math.nan
    return Suspect(name, seconds, share, evidence)


def _trend(x: F64, y: F64) -> float:
    """Least-squares slope of ``y`` on ``x`` (0 when ``x`` has no spread)."""
    xc = x - x.mean()
    den = float(np.dot(xc, xc))
    return float(np.dot(xc, y - y.mean()) / den) if den > 0 else 0.0


def queueing(req: Requests, parts: Mapping[str, F64], c: Cohorts) -> Suspect:
    """The tail's extra queue time; a queue that grows over the run by more than a typical
    request takes means arrivals exceed capacity."""
    queue = parts["queue"]
    q_t, q_b = c.means(queue)
    growth = _trend(req.arrival, queue) * float(req.arrival.max() - req.arrival.min())
    overload = (
        " (growing by more than a typical request takes: arrivals exceed capacity)"
        if growth > c.body_mean_s
        else ""
    )
    return _suspect(
        "queueing",
        q_t - q_b,
        c,
        (
            f"queue mean {q_t:.4g} s in the tail vs {q_b:.4g} s in the body",
            f"queue time trend over the run: {growth:+.4g} s end to end" + overload,
        ),
    )


def preemption(req: Requests, parts: Mapping[str, F64], c: Cohorts) -> Suspect:
    """The tail's extra preemption stall, and how much more often the tail was preempted."""
    s_t, s_b = c.means(parts["preemption_stall"])
    p_t, p_b = float(req.preempted[c.tail].mean()), float(req.preempted[c.body].mean())
    return _suspect(
        "preemption",
        s_t - s_b,
        c,
        (
            f"stall mean {s_t:.4g} s in the tail vs {s_b:.4g} s in the body",
            f"preempted: {p_t:.1%} of the tail vs {p_b:.1%} of the body",
        ),
    )


def _explained(fit: Fit, name: str, c: Cohorts) -> tuple[float, F64, float, float, float]:
    """Seconds the group ``name`` explains; its first column with that column's coefficient and
    tail and body means."""
    cols, coefs = fit.group(name)
    seconds = 0.0
    for v, b in zip(cols, coefs, strict=True):
        vt, vb = c.means(v)
        seconds += float(b * (vt - vb))
    vt, vb = c.means(cols[0])
    return seconds, cols[0], float(coefs[0]), vt, vb


def prompt_length(fit: Fit, c: Cohorts) -> Suspect:
    """Longer uncached prompts in the tail, at the fitted seconds per prompt token."""
    seconds, v, b, vt, vb = _explained(fit, PROMPT, c)
    return _suspect(
        PROMPT,
        seconds,
        c,
        (
            f"uncached prompt tokens: tail mean {vt:.0f} vs body {vb:.0f}; "
            f"{b * 1000:.3g} ms per token",
            f"tail max {float(v[c.tail].max()):.0f} tokens; body p99 "
            f"{float(np.percentile(v[c.body], 99)):.0f}",
        ),
    )


def output_length(fit: Fit, c: Cohorts) -> Suspect:
    """Longer outputs in the tail, at the fitted seconds per output token."""
    seconds, _, b, vt, vb = _explained(fit, OUTPUT, c)
    return _suspect(
        OUTPUT,
        seconds,
        c,
        (f"output tokens: tail mean {vt:.0f} vs body {vb:.0f}; {b * 1000:.3g} ms per token",),
    )


def prefill_interference(fit: Fit, c: Cohorts) -> Suspect:
    """More long prefills in flight beside tail requests on their replica."""
    seconds, _, b, vt, vb = _explained(fit, INTERFERENCE, c)
    return _suspect(
        INTERFERENCE,
        seconds,
        c,
        (
            f"prompt tokens of other long prefills (>= {fit.long_threshold:.0f} uncached tokens) "
            f"in flight on the same replica: tail mean {vt:.0f} vs body {vb:.0f}",
            f"{b * 1e6:.3g} µs of delay per such token",
        ),
    )


def bad_replica(fit: Fit, c: Cohorts) -> Suspect:
    """The replica over-represented in the tail, and how much slower it serves."""
    seconds, _, _, vt, vb = _explained(fit, REPLICA, c)
    return _suspect(
        REPLICA,
        seconds,
        c,
        (f"replica {fit.bad_replica}: {vt:.1%} of the tail vs {vb:.1%} of the body",),
    )


FITTED: Mapping[str, Callable[[Fit, Cohorts], Suspect]] = {
    PROMPT: prompt_length,
    OUTPUT: output_length,
    INTERFERENCE: prefill_interference,
    REPLICA: bad_replica,
}
"""The scorer of each suspect the service-time fit explains, by feature group."""
