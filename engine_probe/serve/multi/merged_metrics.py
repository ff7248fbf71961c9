"""One ``/metrics`` body from several registries: the server's own and one per resident model.

Each loaded model keeps its own registry (its engine's serving metrics and HTTP counters), so
loading and evicting a model registers and drops whole registries instead of series one by one.
Families of the same name are merged into one (the exposition format allows a family once);
samples from a model's registry without a ``model`` label get one, so series stay distinct.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["merged_exposition"]


class _Fixed(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def merged_exposition(
    own: CollectorRegistry,
    per_model: Mapping[str, CollectorRegistry],
    encoder: Callable[[CollectorRegistry], bytes] = generate_latest,
) -> bytes:
    """The exposition (``encoder``: Prometheus text by default, or OpenMetrics) of ``own`` and
    every registry in ``per_model`` (keyed by model name)."""
    families: dict[str, Metric] = {}

    def add(family: Metric, model: str | None) -> None:
        merged = families.get(family.name)
        if merged is None:
            merged = Metric(family.name, family.documentation, family.type, family.unit)
            families[family.name] = merged
        for s in family.samples:
            if model is not None and "model" not in s.labels:
                s = s._replace(labels={**s.labels, "model": model})
            merged.samples.append(s)

    for family in own.collect():
        add(family, None)
    for model, registry in per_model.items():
        for family in registry.collect():
            add(family, model)
    out = CollectorRegistry(auto_describe=False)
    out.register(_Fixed(families.values()))
    return encoder(out)
