"""The vLLM adapter's settings, read from ``FLEETWATCH_VLLM_*`` environment variables.

vLLM builds stat loggers itself (no arguments of ours reach them), so the environment of the
``vllm serve`` process is the configuration. Nothing set means the plugin stays off:

=================================  ==========================================================
variable                           meaning
=================================  ==========================================================
``FLEETWATCH_VLLM``                ``1`` turns the plugin on with defaults (metrics only);
                                   ``0`` turns it off whatever else is set
``FLEETWATCH_VLLM_RECORDS``        directory for request-record files (rotating, atomic)
``FLEETWATCH_VLLM_RECORDS_FORMAT`` ``jsonl`` (default) or ``parquet``
``FLEETWATCH_VLLM_RECORDS_FLUSH_S`` seal a record file when its oldest record is this old (10)
``FLEETWATCH_VLLM_SPAN_FILE``      JSON-lines file for spans (``OTEL_EXPORTER_OTLP_*`` also
                                   sends them over OTLP/HTTP while the plugin is on)
``FLEETWATCH_VLLM_GOODPUT``        ``TTFT_S,TPOT_S`` targets for the goodput counter
``FLEETWATCH_VLLM_REPLICA``        the ``replica`` of records and spans (default: in a pod,
                                   ``POD_NAMESPACE/POD_NAME`` from the downward API, the
                                   key ``core.identity`` builds; else the host name)
``FLEETWATCH_VLLM_TRAFFIC_CLASS``  the ``traffic_class`` of records and spans (``default``)
``FLEETWATCH_VLLM_METRICS``        ``0`` keeps fleetwatch's metrics off /metrics
=================================  ==========================================================
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from fleetwatch.core.identity import from_environment

__all__ = ["PREFIX", "AdapterSettings", "SettingsError"]

PREFIX: Final = "FLEETWATCH_VLLM"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


class SettingsError(ValueError):
    """A ``FLEETWATCH_VLLM_*`` variable has a value the adapter cannot use; names the variable."""


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r}: expected 1 or 0")


def _goodput(raw: str | None) -> tuple[float, float] | None:
    if raw is None or raw.strip() == "":
        return None
    parts = raw.split(",")
    try:
        ttft, tpot = (float(p) for p in parts)
    except ValueError:
        raise SettingsError(
            f"{PREFIX}_GOODPUT={raw!r}: expected 'TTFT_S,TPOT_S', e.g. 0.5,0.05"
        ) from None
    if not (math.isfinite(ttft) and math.isfinite(tpot) and ttft > 0 and tpot > 0):
        raise SettingsError(f"{PREFIX}_GOODPUT={raw!r}: both targets must be > 0 seconds")
    return ttft, tpot


@dataclass(frozen=True, slots=True)
class AdapterSettings:
    """What the plugin does; ``enabled`` False means ``record`` returns at once."""

    enabled: bool = False
    records_dir: str | None = None
    records_format: Literal["jsonl", "parquet"] = "jsonl"
    records_max_age_s: float = 10.0
    """A partly filled record file is written once its oldest record is this old (seconds)."""
    span_file: str | None = None
    goodput: tuple[float, float] | None = None
    """(TTFT target s, TPOT target s)."""
    replica: str = "vllm"
    traffic_class: str = "default"
    metrics: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdapterSettings:
        """Read the settings; ``SettingsError`` names a malformed variable.

        >>> AdapterSettings.from_env({}).enabled
        False
        >>> s = AdapterSettings.from_env({"FLEETWATCH_VLLM_GOODPUT": "0.5,0.05"})
        >>> s.enabled, s.goodput
        (True, (0.5, 0.05))
        """
        master = _flag(env, PREFIX)
        configured = any(k.startswith(PREFIX + "_") and v.strip() for k, v in env.items())
        enabled = master if master is not None else configured
        if not enabled:
            return cls()
        fmt = env.get(f"{PREFIX}_RECORDS_FORMAT", "").strip().lower() or "jsonl"
        if fmt not in ("jsonl", "parquet"):
            raise SettingsError(f"{PREFIX}_RECORDS_FORMAT={fmt!r}: expected jsonl or parquet")
        metrics = _flag(env, f"{PREFIX}_METRICS")
        flush_raw = env.get(f"{PREFIX}_RECORDS_FLUSH_S", "").strip() or "10"
        try:
            flush_s = float(flush_raw)
        except ValueError:
            flush_s = -1.0
        if not (math.isfinite(flush_s) and flush_s > 0):
            raise SettingsError(f"{PREFIX}_RECORDS_FLUSH_S={flush_raw!r}: expected seconds > 0")
        return cls(
            enabled=True,
            records_dir=env.get(f"{PREFIX}_RECORDS") or None,
            records_format="parquet" if fmt == "parquet" else "jsonl",
            records_max_age_s=flush_s,
            span_file=env.get(f"{PREFIX}_SPAN_FILE") or None,
            goodput=_goodput(env.get(f"{PREFIX}_GOODPUT")),
            replica=env.get(f"{PREFIX}_REPLICA")
            or from_environment(env)
            or socket.gethostname()
            or "vllm",
            traffic_class=env.get(f"{PREFIX}_TRAFFIC_CLASS") or "default",
            metrics=True if metrics is None else metrics,
        )

    def replica_for(self, engine_idx: int, engines: int) -> str:
        """The replica name of one data-parallel engine: the replica itself when it has one
        engine, else ``<replica>/dp<engine_idx>`` (each DP engine schedules on its own)."""
        return self.replica if engines <= 1 else f"{self.replica}/dp{engine_idx}"
