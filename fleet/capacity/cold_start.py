"""The measured cold start, read from ``fleetwatch_engine_startup_seconds`` in Prometheus text.

A served engine exports one gauge per phase of its last cold start (weights load, KV cache
allocation, warm-up, readiness, …); the phases follow each other, so a start's length is their
sum per (replica, model). The planner takes the slowest start found: a warm pool sized for the
median start is short whenever the slow one is the one asked for. Time outside the process
(scheduling a pod, pulling an image, downloading weights to the node) is not in the gauge: add it
with ``--cold-start`` measured elsewhere if it matters.

The source is a ``/metrics`` URL (one scrape) or a saved exposition file; parsing is
``prometheus_client``'s own text parser.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.fleet.errors import AnalysisError

__all__ = ["STARTUP_METRIC", "MeasuredColdStart", "cold_start_from", "parse_cold_start"]

STARTUP_METRIC: Final = "fleetwatch_engine_startup_seconds"
_MAX_BYTES: Final = 32 << 20


@dataclass(frozen=True, slots=True)
class MeasuredColdStart:
    """The slowest start found: its seconds, whose it is, its phases, and how many were seen."""

    seconds: float
    labels: dict[str, str]
    phases: dict[str, float]
    starts: int

    def render(self, source: str) -> str:
        who = ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        parts = ", ".join(f"{k} {v:.3g} s" for k, v in self.phases.items())
        return (
            f"cold start {self.seconds:.3g} s measured from {source} "
            f"(slowest of {self.starts}: {who or 'unlabelled'}; {parts})"
        )


def parse_cold_start(text: str, source: str) -> MeasuredColdStart:
    """The slowest start in exposition ``text``; ``AnalysisError`` naming ``source`` if none."""
    starts: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != STARTUP_METRIC:
                    continue
                labels = dict(sample.labels)
                phase = labels.pop("phase", "total")
                key = tuple(sorted(labels.items()))
                phases = starts.setdefault(key, {})
                phases[phase] = phases.get(phase, 0.0) + float(sample.value)
    except ValueError as exc:
        raise AnalysisError(f"{source}: not Prometheus text exposition ({exc})") from None
    if not starts:
        raise AnalysisError(f"{source}: no {STARTUP_METRIC} samples (is it a fleetwatch engine?)")
    key, phases = max(starts.items(), key=lambda kv: sum(kv[1].values()))
    total = sum(phases.values())
    if not total > 0:
        raise AnalysisError(f"{source}: {STARTUP_METRIC} sums to {total}, not a cold start")
    return MeasuredColdStart(total, dict(key), phases, len(starts))


def cold_start_from(source: str, timeout_s: float = 10.0) -> MeasuredColdStart:
    """Read ``source`` (``http(s)://`` URL of a ``/metrics`` endpoint, or a file) and parse it."""
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=timeout_s) as resp:
                raw = resp.read(_MAX_BYTES + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise AnalysisError(f"--cold-start-from {source}: cannot scrape ({exc})") from None
    else:
        path = Path(source)
        try:
            with path.open("rb") as f:
                raw = f.read(_MAX_BYTES + 1)
        except OSError as exc:
            msg = exc.strerror or str(exc)
            raise AnalysisError(f"--cold-start-from {source}: cannot read ({msg})") from None
    if len(raw) > _MAX_BYTES:
        raise AnalysisError(f"--cold-start-from {source}: larger than {_MAX_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AnalysisError(f"--cold-start-from {source}: not UTF-8 text") from None
    return parse_cold_start(text, source)
