"""The fleetwatch metrics vLLM does not export, on vLLM's own /metrics.

- ``fleetwatch_requests_total{status, finish_reason}``: finished requests by outcome, every
  outcome exported at 0 from start (a rate over the first error then sees it) and admission
  rejections counted as ``rejected``;
- ``fleetwatch_goodput_requests_total``: finished ok requests that met both the TTFT and the TPOT
  target (only when targets are configured);
- ``fleetwatch_telemetry_dropped_total{stage}``: records and spans dropped instead of slowing
  vLLM down.

Names come from the ``fleetwatch`` profile; labels are vLLM's (``model_name``, ``engine``) so the
series join vLLM's own. Prometheus adds ``instance``, which the ``vllm`` profile uses as replica.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Final

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetwatch.core.profiles import FLEETWATCH, Signal
from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.metrics.serving import DROP_STAGES, INITIAL_OUTCOMES

__all__ = ["OUTCOMES_NAME", "OutcomeMetrics"]

OUTCOMES_NAME: Final = FLEETWATCH.outcomes.total.name
GOODPUT_NAME: Final = FLEETWATCH.metric(Signal.GOODPUT).name
DROPS_NAME: Final = FLEETWATCH.metric(Signal.TELEMETRY_DROPS).name
_STAGES: Final = (*DROP_STAGES, "records")


class OutcomeMetrics(Collector):
    """Outcome and goodput counters per vLLM engine; ``count`` is the hot path (dict updates).

    >>> from prometheus_client import CollectorRegistry
    >>> reg = CollectorRegistry()
    >>> m = OutcomeMetrics("tiny", [0], goodput=True)
    >>> reg.register(m)
    >>> m.count(0, "ok", "length", good=True)
    >>> reg.get_sample_value("fleetwatch_goodput_requests_total", {"model_name": "tiny", "engine": "0"})
    1.0
    """

    def __init__(
        self,
        model: str,
        engines: Sequence[int],
        *,
        goodput: bool = False,
        drops: DropCounter | None = None,
    ) -> None:
        self.model = model
        self.goodput_enabled = goodput
        self.drops = drops if drops is not None else DropCounter()
        self._lock = threading.Lock()
        self._outcomes: dict[int, dict[tuple[str, str], int]] = {}
        self._good: dict[int, int] = {}
        for e in engines:
            self._engine(e)

    def _engine(self, engine: int) -> dict[tuple[str, str], int]:
        found = self._outcomes.get(engine)
        if found is None:
            with self._lock:
                found = self._outcomes.setdefault(engine, dict.fromkeys(INITIAL_OUTCOMES, 0))
                self._good.setdefault(engine, 0)
        return found

    def count(self, engine: int, status: str, finish_reason: str, *, good: bool) -> None:
        """One finished request of ``engine``; ``good``: it met the goodput targets."""
        outcomes = self._engine(engine)
        key = (status, finish_reason)
        outcomes[key] = outcomes.get(key, 0) + 1
        if good:
            self._good[engine] += 1

    def describe(self) -> Iterable[Metric]:
        return list(self.collect())

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            engines = sorted((e, dict(o)) for e, o in self._outcomes.items())
            good = dict(self._good)
        labels = ["model_name", "engine"]
        outcome = CounterMetricFamily(
            OUTCOMES_NAME,
            "Finished requests by status (ok, error, aborted, rejected) and finish reason.",
            labels=[*labels, "status", "finish_reason"],
        )
        for e, counts in engines:
            for (status, reason), n in sorted(counts.items()):
                outcome.add_metric([self.model, str(e), status, reason], n)
        yield outcome
        if self.goodput_enabled:
            fam = CounterMetricFamily(
                GOODPUT_NAME,
                "Finished ok requests meeting both the TTFT and the TPOT goodput target.",
                labels=labels,
            )
            for e, _ in engines:
                fam.add_metric([self.model, str(e)], good.get(e, 0))
            yield fam
        dropped = CounterMetricFamily(
            DROPS_NAME,
            "Telemetry items dropped (queue full or exporter failure) by stage.",
            labels=["model_name", "stage"],
        )
        stages = dict.fromkeys(_STAGES, 0) | dict(self.drops.snapshot())
        for stage, n in sorted(stages.items()):
            dropped.add_metric([self.model, stage], n)
        yield dropped
