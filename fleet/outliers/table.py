"""The per-replica table the detector judges, whatever the source (records, Prometheus, /metrics).

A ``FleetTable`` holds one row per replica:

- ``values``: the signals (columns named as in ``signals.SIGNALS``; NaN where unknown);
- ``volume``: requests seen in the window (the minimum-volume gate);
- ``stderr``: a replica's own sampling error per signal, where the source can estimate it;
- ``matched``: like-with-like latency ratios (each replica's per-prompt-length-bucket medians over
  the fleet's, weighted by its requests; NaN where the replica shares too few buckets with its
  peers or the source has no per-request data);
- ``workload``: what the replica was sent (``mean_prompt_tokens``, ``cache_hit_rate``,
  ``request_rate``, ``mean_output_tokens``), so a replica sent long prompts is not blamed;
- ``fingerprint``: configuration strings (engine version, model revision, flags);
- ``host``: the machine each replica runs on, so replicas that slowed together on one host are
  reported as host contention, not blamed one by one;
- ``samples``: one row per ok request, a ``replica`` column and latency signal columns (seconds),
  where the source has every request (records): each replica's requests are then also tested
  against the rest of the fleet's (``ranks``), which gives small fleets their power;
- ``bins``: per latency signal read from histograms, the buckets' upper bounds: a quantile inside
  the fleet median's bucket is not told apart from it (``histogram.resolvable``);
- ``counted``: signals that are a share of the replica's ``volume`` requests (the error rate,
  where the source counts requests): tested by their counts (``shares``), not their spread;
- ``cpu_wait``: the share of wall time (0..1) the replica's process was runnable but waiting for
  a CPU (``/proc/<pid>/schedstat`` run delay, or the cgroup's throttled time, over the window).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.fleet.errors import AnalysisError

__all__ = ["WORKLOAD_COLUMNS", "FleetTable"]

WORKLOAD_COLUMNS = ("mean_prompt_tokens", "cache_hit_rate", "request_rate", "mean_output_tokens")


def _empty(index: pd.Index) -> pd.DataFrame:
    return pd.DataFrame(index=index)


@dataclass(frozen=True)
class FleetTable:
    """Per-replica signals plus the context needed to say why a replica stands out."""

    values: pd.DataFrame
    volume: pd.Series | None = None
    stderr: pd.DataFrame | None = None
    matched: pd.DataFrame | None = None
    workload: pd.DataFrame | None = None
    fingerprint: pd.DataFrame | None = None
    host: pd.Series | None = None
    cpu_wait: pd.Series | None = None
    samples: pd.DataFrame | None = None
    bins: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    counted: frozenset[str] = frozenset()
    source: str = "records"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.values.index.is_unique:
            dup = self.values.index[self.values.index.duplicated()][0]
            raise AnalysisError(f"{self.source}: replica '{dup}' appears twice")

    @property
    def replicas(self) -> pd.Index:
        return self.values.index

    def aligned(self, frame: pd.DataFrame | None) -> pd.DataFrame:
        """``frame`` reindexed to this table's replicas (empty columns when absent)."""
        if frame is None:
            return _empty(self.values.index)
        return frame.reindex(self.values.index)

    def volume_array(self) -> pd.Series:
        """Requests per replica (NaN where the source has no count)."""
        if self.volume is None:
            return pd.Series(float("nan"), index=self.values.index, dtype="float64")
        return self.volume.reindex(self.values.index).astype("float64")

    def only(self, replicas: Collection[str]) -> FleetTable:
        """This table restricted to ``replicas`` (in this table's order), every per-replica frame
        filtered alike, so the detector can re-judge part of a fleet whatever the source was."""
        keep = set(map(str, replicas))
        return self.keep(_rows_in(self.values.index, keep), keep)

    def keep(self, rows: npt.NDArray[np.bool_], names: Collection[str] | None = None) -> FleetTable:
        """This table restricted to the replicas where ``rows`` (one flag per row of ``values``)
        is set. Frames indexed like ``values`` are cut by position and share its new index, so
        aligning them later costs nothing; others are matched by name."""
        own = self.values.index
        values = self.values.iloc[rows]
        index = values.index
        keep: set[str] | None = None if names is None else set(map(str, names))

        def named() -> set[str]:
            nonlocal keep
            if keep is None:
                keep = set(map(str, index.tolist()))
            return keep

        def cut(frame: pd.DataFrame | pd.Series | None) -> pd.DataFrame | pd.Series | None:
            if frame is None:
                return None
            if frame.index is own or frame.index.equals(own):
                return frame.iloc[rows].set_axis(index, axis=0)
            return frame.loc[_rows_in(frame.index, named())]

        parts = {
            "values": values,
            "volume": cut(self.volume),
            "stderr": cut(self.stderr),
            "matched": cut(self.matched),
            "workload": cut(self.workload),
            "fingerprint": cut(self.fingerprint),
            "host": cut(self.host),
            "cpu_wait": cut(self.cpu_wait),
            "samples": None
            if self.samples is None
            else self.samples.loc[self.samples["replica"].astype(str).isin(named()).to_numpy()],
        }
        # Rows of a table with unique replicas are unique: no need to check them again (the
        # check hashes every name, which costs more than the cut itself).
        out = copy.copy(self)
        for name, part in parts.items():
            object.__setattr__(out, name, part)
        return out


def _rows_in(index: pd.Index, keep: set[str]) -> npt.NDArray[np.bool_]:
    # A Python set lookup per row: pandas' isin on Arrow-backed strings is ~40x slower.
    return np.array([str(r) in keep for r in index.tolist()], dtype=bool)
