"""The signals a replica is judged on, with the direction that is bad and the smallest effect
worth reporting.

A finding needs the statistical test (robust z beyond the cutoff for the largest z of the fleet,
at a stated family-wise level, one-sided in the ``worse`` direction or two-sided for "both"; see
``stats``) and, as second conditions, practical ones: the deviation is at least 3.5 spread floors
(``rel_floor`` of the median, or ``abs_floor``), and the effect is at least ``min_effect`` (a ratio
to the fleet median for latencies and rates, an absolute difference for shares such as the error
rate). A fleet of near-identical replicas has a tiny MAD, so the practical conditions stop a 3 %
difference from being reported as an outage; they only ever remove findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

__all__ = [
    "ERROR_TYPE_PREFIX",
    "GPU_SIGNALS",
    "LATENCY_SIGNALS",
    "MAX_ERROR_TYPES",
    "OUTCOME_PREFIX",
    "SIGNALS",
    "SignalSpec",
    "signal_spec",
]

Worse = Literal["higher", "lower", "both"]
Gate = Literal["ratio", "absolute"]
Family = Literal["latency", "errors", "output", "throughput", "gpu"]


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """How one per-replica signal is judged.

    ``min_effect``: for ``gate="ratio"`` the ratio to the fleet median (1.25 = 25 % worse); for
    ``gate="absolute"`` the difference from the median in the signal's unit. ``rel_floor`` and
    ``abs_floor`` set the spread floor a finding must clear 3.5 times (see ``stats``).
    """

    name: str
    unit: str
    worse: Worse
    family: Family
    gate: Gate = "ratio"
    min_effect: float = 1.25
    rel_floor: float = 0.05
    abs_floor: float = 0.0
    description: str = ""
    prompt_sensitive: bool = True
    """Latency that grows with prompt length (TTFT, e2e); TPOT barely does, so a raw comparison
    of it is already like-for-like."""

    def ungated(self) -> SignalSpec:
        """This signal judged by the statistical test alone: no spread floor, no minimum effect
        (what the calibration tests and benchmarks measure against the stated level)."""
        return replace(
            self, rel_floor=0.0, abs_floor=0.0, min_effect=0.0 if self.gate == "absolute" else 1.0
        )


SIGNALS: Final[Mapping[str, SignalSpec]] = {
    s.name: s
    for s in (
        SignalSpec("ttft", "s", "higher", "latency", description="time to first token, p50"),
        SignalSpec(
            "tpot",
            "s",
            "higher",
            "latency",
            description="time per output token, p50",
            prompt_sensitive=False,
        ),
        SignalSpec("e2e", "s", "higher", "latency", description="end-to-end latency, p50"),
        SignalSpec(
            "error_rate",
            "ratio",
            "higher",
            "errors",
            gate="absolute",
            min_effect=0.02,
            rel_floor=0.25,
            abs_floor=0.005,
            description="share of requests that ended in error",
        ),
        SignalSpec(
            "truncated_share",
            "ratio",
            "higher",
            "output",
            gate="absolute",
            min_effect=0.05,
            rel_floor=0.25,
            abs_floor=0.01,
            description="share of requests whose answer was cut at max_tokens "
            "(finish_reason length)",
        ),
        SignalSpec(
            "empty_share",
            "ratio",
            "higher",
            "output",
            gate="absolute",
            min_effect=0.02,
            rel_floor=0.25,
            abs_floor=0.005,
            description="share of requests answered with no output token",
        ),
        SignalSpec(
            "throughput",
            "tokens/s",
            "lower",
            "throughput",
            min_effect=1.25,
            description="output tokens per second",
        ),
        SignalSpec(
            "sm_clock_ratio",
            "ratio",
            "lower",
            "gpu",
            min_effect=1.1,
            rel_floor=0.02,
            description="SM clock as a share of its maximum",
        ),
        SignalSpec(
            "clock_event_active",
            "ratio",
            "higher",
            "gpu",
            gate="absolute",
            min_effect=0.5,
            abs_floor=0.05,
            description="share of samples with a throttling clock-event reason set",
        ),
        SignalSpec(
            "dram_bw_ratio",
            "ratio",
            "both",
            "gpu",
            min_effect=1.25,
            description="DRAM bandwidth utilisation",
        ),
        SignalSpec("power_w", "W", "both", "gpu", min_effect=1.2, description="board power draw"),
    )
}

LATENCY_SIGNALS: Final = tuple(n for n, s in SIGNALS.items() if s.family == "latency")
GPU_SIGNALS: Final = tuple(n for n, s in SIGNALS.items() if s.family == "gpu")


ERROR_TYPE_PREFIX = "error_type="
"""A signal named ``error_type=<type>`` is the share of requests that failed with that type,
judged as the error rate is (``sources.records``: the fleet's most common types)."""
OUTCOME_PREFIX = "outcome="
"""A signal named ``outcome=<name>`` is the share of requests that ended with that outcome
beside errors (``aborted``, ``rejected``: a status of its own, not a kind of error), counted by
the profile's outcome counters (``sources.prometheus``, ``sources.snapshots``) and judged as the
error rate is."""
MAX_ERROR_TYPES = 5
"""Error types (or outcomes) judged one by one per fleet, the most common first."""


def most_common(counts: Mapping[str, float]) -> list[str]:
    """The ``MAX_ERROR_TYPES`` names of ``counts`` with the most, a tie going to the name first
    in order, so every source judges the same kinds of the same fleet."""
    return sorted(counts, key=lambda k: (-float(counts[k]), str(k)))[:MAX_ERROR_TYPES]


def signal_spec(name: str) -> SignalSpec:
    """The spec for a signal name; unknown names are judged as 'higher is worse' ratios."""
    if name.startswith(ERROR_TYPE_PREFIX):
        kind = name[len(ERROR_TYPE_PREFIX) :]
        return replace(
            SIGNALS["error_rate"],
            name=name,
            description=f"share of requests that ended in error {kind!r}",
        )
    if name.startswith(OUTCOME_PREFIX):
        outcome = name[len(OUTCOME_PREFIX) :]
        return replace(
            SIGNALS["error_rate"],
            name=name,
            description=f"share of requests that ended as {outcome!r}",
        )
    return SIGNALS.get(name) or SignalSpec(name, "", "higher", "latency")
