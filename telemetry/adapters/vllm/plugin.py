"""The class vLLM loads from the ``vllm.stat_logger_plugins`` entry point ``fleetwatch``.

This is the only fleetwatch module that imports vLLM, and only vLLM imports it. vLLM builds one
instance per front-end process (an ``AggregateStatLoggerBase`` receives every data-parallel
engine, told apart by ``engine_idx``) and calls ``record`` from its output-handling loop after
every batch of engine outputs. With no ``FLEETWATCH_VLLM_*`` variable set the instance holds
nothing and ``record`` returns at its first test.

Note that vLLM turns its stats path on (``log_stats``) for any installed stat-logger plugin, even
with ``--disable-log-stats``; ``VLLM_PLUGINS`` (an allow-list of plugin names) keeps this one from
loading at all.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

from vllm.v1.metrics.loggers import AggregateStatLoggerBase

from fleetwatch.telemetry.adapters.vllm.exporter import VllmExporter
from fleetwatch.telemetry.adapters.vllm.settings import AdapterSettings

__all__ = ["FleetwatchStatLogger"]

_log = logging.getLogger(__name__)


def _served_model(vllm_config: Any) -> str:
    mc = getattr(vllm_config, "model_config", None)
    name = getattr(mc, "served_model_name", None) or getattr(mc, "model", None) or "unknown"
    if isinstance(name, list | tuple):
        name = name[0] if name else "unknown"
    return str(name)


class FleetwatchStatLogger(AggregateStatLoggerBase):  # type: ignore[misc]
    """fleetwatch records, spans and outcome/goodput metrics for a vLLM server.

    Threading: ``record`` runs on vLLM's asyncio loop; it never blocks (a bounded queue feeds a
    background thread) and never raises into vLLM for a malformed stat.
    """

    def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
        self.engine_indexes = list(engine_indexes or [0])
        self.exporter: VllmExporter | None = None
        settings = AdapterSettings.from_env(os.environ)
        if not settings.enabled:
            return
        self.exporter = VllmExporter(
            settings, model=_served_model(vllm_config), engines=self.engine_indexes
        )
        atexit.register(self.exporter.close, 10.0)
        _log.info(
            "fleetwatch: records=%s spans=%s goodput=%s metrics=%s",
            settings.records_dir,
            settings.span_file,
            settings.goodput,
            settings.metrics,
        )

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        exporter = self.exporter
        if exporter is None or iteration_stats is None:
            return
        finished = iteration_stats.finished_requests
        if finished:
            try:
                exporter.observe(iteration_stats.iteration_timestamp, engine_idx, finished)
            except Exception:
                _log.warning("fleetwatch: a finished request could not be counted", exc_info=True)

    def record_admission_rejection(self, reason: str) -> None:
        if self.exporter is not None:
            self.exporter.rejected()

    def log_engine_initialized(self) -> None:
        return None

    def log(self) -> None:
        return None

    def record_sleep_state(self, *args: Any, **kwargs: Any) -> None:
        return None
