"""Per-cell scores computed for the cells asked for, not for the whole table (``stats``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Cells", "ratio_at", "z_floor_at", "z_own_at"]

Array = np.ndarray[Any, np.dtype[np.float64]]


class Cells:
    """A per-cell score computed only for the cells asked for (``cells[rows, cols]``, scalars or
    index arrays): the detector reads the floor, own-error and ratio scores of the few cells
    beyond the cutoff, not of all 100,000 cells of a 10,000 × 10 fleet."""

    __slots__ = ("_at",)

    def __init__(self, at: Callable[[Any, Any], Any]) -> None:
        self._at = at

    def __getitem__(self, key: tuple[Any, Any]) -> Any:
        rows, cols = key
        out = self._at(rows, cols)
        return float(out) if np.ndim(out) == 0 else out


def z_floor_at(dev: Array, floor: Array, rows: Any, cols: Any) -> Any:
    """(x − median)/floor; 0 at the median."""
    d = dev[rows, cols]
    with np.errstate(all="ignore"):
        return np.where(d == 0, 0.0, d / floor[cols])


def z_own_at(dev: Array, se: Array | None, rows: Any, cols: Any) -> Any:
    """|x − median|/stderr; infinite where no standard error is known, NaN where x is."""
    d = np.abs(dev[rows, cols])
    if se is None:
        return np.where(np.isnan(d), np.nan, np.inf)
    e = np.broadcast_to(se, dev.shape)[rows, cols]
    with np.errstate(all="ignore"):
        return np.where(e > 0, d / e, np.inf)


def ratio_at(x: Array, med: Array, rows: Any, cols: Any) -> Any:
    """x/median; NaN where the median is 0."""
    m = med[cols]
    with np.errstate(all="ignore"):
        return np.where(m == 0, np.nan, x[rows, cols] / m)
