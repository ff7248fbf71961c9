"""Backoff with jitter: pure functions of (random source, attempt, previous sleep) and the
tenacity wait strategies built on them.

Formulas from Brooker, "Exponential Backoff And Jitter" (AWS, 2015); all values in seconds:

- none:          ``min(cap, base · 2^(n-1))``
- full:          ``uniform(0, min(cap, base · 2^(n-1)))``   (the default)
- decorrelated:  ``min(cap, uniform(base, 3 · previous))`` with ``previous = base`` at first.

tenacity's ``wait_random_exponential`` is full jitter; it has no decorrelated jitter, so it is here.
"""

from __future__ import annotations

import enum
import random

import tenacity
from tenacity.wait import wait_base

from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = [
    "Jitter",
    "backoff_s",
    "decorrelated_jitter_s",
    "full_jitter_s",
    "no_jitter_s",
    "wait_decorrelated_jitter",
    "wait_full_jitter",
    "wait_no_jitter",
]


class Jitter(enum.Enum):
    NONE = "none"
    FULL = "full"
    DECORRELATED = "decorrelated"


def _check(base_s: float, cap_s: float) -> None:
    if not base_s > 0.0:
        raise ResilienceConfigError(f"backoff: base must be > 0 seconds, got {base_s}")
    if not cap_s >= base_s:
        raise ResilienceConfigError(f"backoff: cap ({cap_s} s) must be >= base ({base_s} s)")


def no_jitter_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Sleep after failed attempt ``attempt`` (1-based) with plain exponential backoff."""
    return min(cap_s, base_s * 2.0 ** min(attempt - 1, 62))


def full_jitter_s(rng: random.Random, attempt: int, base_s: float, cap_s: float) -> float:
    return rng.uniform(0.0, no_jitter_s(attempt, base_s, cap_s))


def decorrelated_jitter_s(
    rng: random.Random, previous_s: float, base_s: float, cap_s: float
) -> float:
    """``previous_s`` is the last sleep (0 or less before the first retry: treated as ``base_s``)."""
    previous = max(previous_s, base_s)
    return min(cap_s, rng.uniform(base_s, previous * 3.0))


def backoff_s(
    kind: Jitter, rng: random.Random, attempt: int, previous_s: float, base_s: float, cap_s: float
) -> float:
    """One sleep of the given kind; what the simulator and the wait strategies share."""
    if kind is Jitter.FULL:
        return full_jitter_s(rng, attempt, base_s, cap_s)
    if kind is Jitter.DECORRELATED:
        return decorrelated_jitter_s(rng, previous_s, base_s, cap_s)
    return no_jitter_s(attempt, base_s, cap_s)


class _JitterWait(wait_base):
    kind = Jitter.NONE

    def __init__(
        self, base_s: float = 0.5, cap_s: float = 8.0, rng: random.Random | None = None
    ) -> None:
        _check(base_s, cap_s)
        self.base_s = base_s
        self.cap_s = cap_s
        self.rng = rng if rng is not None else random.Random()

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        # upcoming_sleep still holds the previous sleep when tenacity asks for the next one.
        return backoff_s(
            self.kind,
            self.rng,
            retry_state.attempt_number,
            retry_state.upcoming_sleep,
            self.base_s,
            self.cap_s,
        )


class wait_no_jitter(_JitterWait):
    """Plain exponential backoff (for comparison: it synchronises clients into waves)."""

    kind = Jitter.NONE


class wait_full_jitter(_JitterWait):
    """Full jitter with an injectable random source (tenacity's uses the global one)."""

    kind = Jitter.FULL


class wait_decorrelated_jitter(_JitterWait):
    """Decorrelated jitter; the previous sleep comes from the call's own RetryCallState."""

    kind = Jitter.DECORRELATED
