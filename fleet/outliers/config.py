"""Detector settings, shared by the detector and the traffic comparison it relies on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fleetwatch.fleet.outliers.signals import SignalSpec, signal_spec

__all__ = ["NOISE_SHAPES", "DetectorConfig"]

NOISE_SHAPES = ("normal", "any")


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Detector settings.

    ``min_requests``: requests a replica needs in the window to be judged. ``alpha``: the
    statistical test's family-wise level for a whole report, over signals × replicas × passes: the
    chance that a healthy fleet gets any finding from it (see ``stats``). ``min_fleet``: replicas
    needed for a verdict (3: a median of two cannot outvote either). The workload thresholds decide when a
    replica's traffic differs from the fleet's (ratios to the fleet median of replica means).
    ``noise_shape``: the noise between healthy replicas the level holds for: ``"any"`` (the
    default) of normal, Student-t₆ and two clusters, or ``"normal"`` only (looser cutoffs: more
    power in small fleets of replicas known to be alike; see ``stats``).
    """

    min_requests: int = 50
    alpha: float = 0.01
    min_fleet: int = 3
    signals: Mapping[str, SignalSpec] = field(default_factory=dict)
    prompt_ratio: float = 1.25
    cache_hit_delta: float = 0.10
    request_rate_ratio: float = 1.5
    matched_effect: float = 1.2
    noise_shape: str = "any"

    def __post_init__(self) -> None:
        if self.noise_shape not in NOISE_SHAPES:
            raise ValueError(f"noise_shape must be one of {', '.join(NOISE_SHAPES)}")

    def spec(self, name: str) -> SignalSpec:
        return self.signals.get(name) or signal_spec(name)
