"""Request records to SLI events: for each request an SLO covers, its finish time and whether it
was bad. Requests count at their finish time, as engine counters count them.

Populations, matching what the engines' metrics observe:

- availability: every finished request; bad when its status is one of the SLI's bad outcomes;
- latency: requests for which the signal is defined (TTFT needs a first token, TPOT two output
  tokens); bad when the value is above the threshold (a histogram's ``le`` bucket counts values
  at most the bound). ``itl`` uses each request's largest inter-token gap (``max_itl_s``), a
  per-request stand-in for the per-step ITL histogram the rules read;
- goodput: every finished request; good when it finished ok with TTFT <= a and TPOT <= b (TPOT
  undefined for one-token outputs: judged on TTFT alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from slo.errors import SLOSpecError
from slo.spec import AvailabilitySLI, GoodputSLI, LatencySLI, ServiceLevelObjective

__all__ = ["SIGNAL_COLUMNS", "SLIEvents", "goodput_mask", "sli_events"]

SIGNAL_COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "itl": "max_itl_s"}

FloatArray = np.ndarray[Any, np.dtype[np.float64]]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]


@dataclass(frozen=True, slots=True)
class SLIEvents:
    """Finish times (seconds) and bad flags of the requests one SLO covers."""

    times: FloatArray
    bad: BoolArray

    def __len__(self) -> int:
        return int(self.times.size)


def goodput_mask(frame: pd.DataFrame, ttft_max: float, tpot_max: float) -> BoolArray:
    """Requests that finished ok with TTFT <= ``ttft_max`` and TPOT <= ``tpot_max`` seconds."""
    ttft = frame["ttft_s"].to_numpy(dtype=np.float64)
    tpot = frame["tpot_s"].to_numpy(dtype=np.float64)
    ok = _status_in(frame, ("ok",))
    with np.errstate(invalid="ignore"):
        return np.asarray(ok & (ttft <= ttft_max) & (np.isnan(tpot) | (tpot <= tpot_max)))


def _status_in(frame: pd.DataFrame, values: tuple[str, ...]) -> BoolArray:
    col = frame["status"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray([str(c) in values for c in col.cat.categories] + [False])
        codes = col.cat.codes.to_numpy()
        return np.asarray(cats[codes])
    return np.asarray(col.astype(str).isin(values).to_numpy())


def sli_events(slo: ServiceLevelObjective, frame: pd.DataFrame) -> SLIEvents:
    """The events of ``slo`` in ``frame`` (a records frame with derived columns)."""
    mask = np.ones(len(frame), dtype=bool)
    if slo.selector.traffic_class is not None:
        mask &= frame["traffic_class"].to_numpy() == slo.selector.traffic_class
    if slo.selector.model is not None:
        mask &= frame["model"].to_numpy() == slo.selector.model
    sli = slo.sli
    times = frame["finished_s"].to_numpy(dtype=np.float64)
    if isinstance(sli, AvailabilitySLI):
        bad = _status_in(frame, sli.bad)
    elif isinstance(sli, LatencySLI):
        value = frame[SIGNAL_COLUMNS[sli.signal]].to_numpy(dtype=np.float64)
        mask &= ~np.isnan(value)
        bad = value > sli.threshold_s
    elif isinstance(sli, GoodputSLI):
        bad = ~goodput_mask(frame, sli.ttft_s, sli.tpot_s)
    else:
        raise SLOSpecError(
            "a ratio SLI names raw Prometheus metrics and cannot be evaluated over request "
            "records; evaluate it in Prometheus",
            path=f"{slo.path}.sli",
        )
    if mask.all():
        return SLIEvents(times, np.asarray(bad, dtype=bool))
    return SLIEvents(times[mask], np.asarray(bad[mask], dtype=bool))
