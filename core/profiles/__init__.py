"""Metric profiles: one table from logical signals to each engine's concrete metric names.

Everything in fleetwatch that writes PromQL (SLO rules, outlier rules, dashboards) asks a
``Profile`` for a ``Signal`` instead of spelling metric names itself. A signal an engine does not
export is simply absent from its profile, and asking for it raises ``ProfileError`` saying so.

One module per engine table (``fleetwatch``, ``vllm``, ``sglang``, ``tgi``), their bucket
boundaries in ``buckets`` and the types in ``types``; ``get_profile`` looks a profile up by name.

Sources: vLLM 0.33 ``vllm/v1/metrics/loggers.py``; SGLang 0.5 ``metrics_collector.py``;
TGI ``router/src/server.rs``; OpenTelemetry GenAI server metric conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fleetwatch.core.profiles.fleetwatch import FLEETWATCH
from fleetwatch.core.profiles.sglang import SGLANG
from fleetwatch.core.profiles.tgi import TGI
from fleetwatch.core.profiles.types import (
    MetricRef,
    OutcomeCounter,
    Profile,
    ProfileError,
    Signal,
)
from fleetwatch.core.profiles.vllm import VLLM

__all__ = [
    "FLEETWATCH",
    "PROFILES",
    "SGLANG",
    "TGI",
    "VLLM",
    "MetricRef",
    "OutcomeCounter",
    "Profile",
    "ProfileError",
    "Signal",
    "get_profile",
]

PROFILES: Final[Mapping[str, Profile]] = {p.name: p for p in (FLEETWATCH, VLLM, SGLANG, TGI)}


def get_profile(name: str) -> Profile:
    """Look a profile up by name (``fleetwatch``, ``vllm``, ``sglang``, ``tgi``)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(
            f"unknown metric profile '{name}' (known: {', '.join(PROFILES)})"
        ) from None
