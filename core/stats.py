"""The project's one percentile: linear interpolation between closest ranks.

For ``n`` sorted values ``x[0] ≤ … ≤ x[n-1]`` and ``q`` in 0..100, the rank is
``h = (n − 1) · q / 100`` and the percentile is ``x[⌊h⌋] + (h − ⌊h⌋) · (x[⌊h⌋ + 1] − x[⌊h⌋])``:
p0 is the minimum, p100 the maximum, p50 of an even count the mean of the middle two. This is
Hyndman and Fan's definition 7, numpy's default ``method="linear"``, pandas' default for
``Series.quantile``, and what Prometheus' ``quantile()`` and ``quantile_over_time()`` compute.

Why this one: the numbers fleetwatch prints then agree with what an operator gets from the same
samples in a Prometheus query or a pandas notebook, and a percentile moves continuously with
``q`` and with the data instead of jumping from one sample to the next as nearest rank does.

Not covered here: ``histogram_quantile`` (an estimate from bucket counts, interpolated inside a
bucket) and the inverted-CDF quantile ``fleetwatch.fleet.compare`` needs for its exact bootstrap; both are
deliberate and stay with their users.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["percentile", "percentiles"]


def _array(values: Iterable[float] | np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    if isinstance(values, np.ndarray):
        return np.asarray(values, dtype=np.float64).ravel()
    return np.fromiter(values, dtype=np.float64)


def _check(q: float) -> None:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")


def percentile(values: Iterable[float] | np.ndarray[Any, Any], q: float) -> float:
    """The ``q``-th percentile (``q`` in 0..100) of ``values``, interpolated linearly between
    closest ranks; NaN when there are no values. A NaN among the values makes the result NaN:
    drop missing values first."""
    _check(q)
    arr = _array(values)
    if arr.size == 0:
        return float("nan")
    return float(np.percentile(arr, q, method="linear"))


def percentiles(
    values: Iterable[float] | np.ndarray[Any, Any], qs: Iterable[float]
) -> tuple[float, ...]:
    """``percentile(values, q)`` for each ``q`` in ``qs``, sorting the values once."""
    qs = tuple(qs)
    for q in qs:
        _check(q)
    arr = _array(values)
    if arr.size == 0:
        return tuple(float("nan") for _ in qs)
    return tuple(float(x) for x in np.atleast_1d(np.percentile(arr, qs, method="linear")))
