"""Robust statistics for comparing each replica with its fleet, and cutoffs with a stated level.

The fleet median is the reference and the median absolute deviation (MAD) the spread, because a
mean and standard deviation let two bad replicas hide each other: Envoy's success-rate rule
(eject below mean − 1.9·σ) on success rates [50, 50, 100, 100, 100] puts the threshold near 33 %,
so neither 50 % host is ejected. The median (100) and MAD (0) are untouched by the two.

The statistic, per signal (column) of n replicas::

    z = (x − median) / (1.4826 · b(n) · MAD)

``1.4826 · MAD`` estimates σ for normal data (the modified z-score of Iglewicz and Hoaglin);
``b(n)`` is Croux and Rousseeuw's small-sample correction. Where MAD = 0 (more than half the
replicas report the same value) every other value is infinitely many MADs away: z = ±inf, and
only the spread floor below decides.

The false-alarm rate. The family is every (signal, replica) cell a report judges, in all its
passes (see ``detect``). Its level ``alpha`` (``DetectorConfig.alpha``, 1 %) is family-wise: the
chance that a healthy fleet, whose replicas differ only by independent noise, gets any finding
from this test. Which noise: ``noise_shape="any"`` (the detector's default), at most ``alpha``
whether the noise is normal, Student-t₆ or two clusters (two hardware batches; ``shapetable``), the
cutoff being the largest of the three references' (one number per replica cannot tell them apart;
it costs power in small fleets); ``noise_shape="normal"`` (these functions' default: the
reference the others build on), normal noise of any mean and spread.

- Across replicas, exact per reference: a signal's cutoff is the (1 − α_s) quantile of the
  *largest* z among n healthy replicas (their z share the median and MAD). For signals bad
  either way (``worse="both"``) it is the largest |z| (two-sided), else the largest z in the bad
  direction (one-sided).
- Across signals and passes, Bonferroni: ``α_s = alpha / (k · m)`` for k signals judged (at
  least three values, not all equal) and m passes that can run on a healthy fleet (the whole
  fleet, plus peers with like traffic when the traffic differs, known before any judging). The
  passes that set blamed replicas aside run only after a finding; each re-tests the rest at the
  same level, a step-down as in Holm's procedure, measured to stay near ``alpha``.

The normal null of the largest z depends only on n: n = 3 in closed form (the deviations of three
normals form an isotropic 2-D vector, so the ratio R of the larger gap between sorted values to the
smaller has ``P(R > r) = (6/π) · arctan((√3/2) / (r + 1/2))``: Grubbs' test; at α_s = 0.1 % the
one-sided cutoff is 373); 4 ≤ n ≤ 300 the seeded Monte Carlo table in ``nulltable`` (monotone
cubic in log level, linear in 1/n between sizes, a power-law tail below 10⁻⁵); n > 300
asymptotic, ``P(max z > c) = E[1 − Φ(m + c·e^d)^n]`` over the median's error m ~ N(0, π/2n) and
the MAD's log error d ~ N(0, 1.3605/n), by Gauss–Hermite quadrature, tending to Bonferroni over
replicas. The t₆ and cluster references come from ``shapetable``.

Second conditions, each documented where it lives; each only removes findings:

- spread floor: ``|x − median| ≥ FLOOR_CUTOFF · floor``, the floor a share of the median
  (``rel_floor``) or an absolute amount (``abs_floor``). It decides where MAD = 0.
- own sampling error: ``|x − median| / stderr ≥ OWN_CUTOFF`` (``z_own``) where the source knows a
  replica's own standard error, so a noisy median of 40 requests is not judged on the fleet's
  spread alone.
- effect size: ``signals.SignalSpec.min_effect``.

Measured (``tests/fleet/test_calibration.py``, fleets of 3, 5, 10, 30 and 1,000 replicas × 10
signals): with ``"normal"`` the test alone holds ``alpha`` within a factor 1.5 on normal noise;
with ``"any"``, at most 1.5 × ``alpha`` on normal, lognormal, two-cluster and t₆ noise. With the
floors and gates, no healthy fleet out of 200 per size and shape gets a finding. The price of the
level is power in tiny fleets: three replicas expose a fault only when the other two agree far
more closely than the fault is large. Where every request is known (records, histograms), latency
is judged by each replica's requests against the rest's instead (``ranks``), which has that power
whatever the shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import numpy as np
from scipy import optimize as _opt
from scipy import special as _sp

from fleetwatch.fleet.outliers.stats.cells import Cells, ratio_at, z_floor_at, z_own_at
from fleetwatch.fleet.outliers.stats.nulltable import (
    GAUSS_NODES as _NODES,
)
from fleetwatch.fleet.outliers.stats.nulltable import (
    GAUSS_WEIGHTS as _WEIGHTS,
)
from fleetwatch.fleet.outliers.stats.nulltable import (
    LEVELS,
    QuantileRows,
    table_rows,
)
from fleetwatch.fleet.outliers.stats.shapetable import SHAPES, shape_isf, shape_sf

__all__ = [
    "FLOOR_CUTOFF",
    "IGLEWICZ_HOAGLIN_CUTOFF",
    "MAD_TO_SIGMA",
    "OWN_CUTOFF",
    "RobustColumns",
    "envoy_success_rate_threshold",
    "mad_small_sample_factor",
    "max_z_sf",
    "n_aware_cutoff",
    "robust_columns",
    "signal_level",
]

Array = np.ndarray[Any, np.dtype[np.float64]]

MAD_TO_SIGMA = 1.4826
"""σ ≈ 1.4826·MAD for normal data (1 / 0.6745)."""
IGLEWICZ_HOAGLIN_CUTOFF = 3.5
"""|modified z| above 3.5 is an outlier (Iglewicz and Hoaglin, 1993)."""
FLOOR_CUTOFF = IGLEWICZ_HOAGLIN_CUTOFF
"""A finding must lie at least this many spread floors from the median."""
OWN_CUTOFF = 2.5
"""A replica's value must differ from the fleet median by at least this many of its own standard
errors (about 99 % two-sided) before the fleet test counts."""

# Croux & Rousseeuw (1992) small-sample correction factors for the MAD, n = 2..9.
_MAD_BN = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}
_MAD_VAR = 1.3605
"""n · Var(1.4826·MAD / σ) for large normal samples (the MAD's efficiency is 37 %)."""


def mad_small_sample_factor(n: Array) -> Array:
    """Factor ``b(n)`` that makes 1.4826·MAD unbiased for σ at small n (1 for large n)."""
    n = np.asarray(n, dtype=np.float64)
    out = np.where(n > 9, n / np.maximum(n - 0.8, 1.0), 1.0)
    for k, v in _MAD_BN.items():
        out = np.where(n == k, v, out)
    return out


def _sf_three(t: Array, two_sided: bool) -> Array:
    p = (6.0 / math.pi) * np.arctan((math.sqrt(3.0) / 2.0) / (np.maximum(t, 1.0) + 0.5))
    return np.asarray(p if two_sided else p / 2.0)


def _isf_three(p: float, two_sided: bool) -> float:
    q = min(p if two_sided else 2.0 * p, 1.0)
    return max((math.sqrt(3.0) / 2.0) / math.tan(math.pi * q / 6.0) - 0.5, 1.0)


def _asymptotic_sf(c: float, n: int, two_sided: bool) -> float:
    """P(max z > c) for large n (c in σ units), by quadrature over the median's and MAD's error."""
    m = _NODES[:, None] * math.sqrt(math.pi / (2.0 * n))
    t = c * np.exp(_NODES[None, :] * math.sqrt(_MAD_VAR / n))
    if two_sided:
        inside = _sp.ndtr(m + t) - _sp.ndtr(m - t)
        log_in = np.log(np.maximum(inside, 1e-300))
    else:
        log_in = _sp.log_ndtr(m + t)
    w = _WEIGHTS[:, None] * _WEIGHTS[None, :]
    return float((w * -np.expm1(n * log_in)).sum())


def _asymptotic_sf_many(c: Array, n: int, two_sided: bool) -> Array:
    """``_asymptotic_sf`` for every value of ``c`` at once."""
    m = (_NODES[:, None] * math.sqrt(math.pi / (2.0 * n)))[None]
    t = c[:, None, None] * np.exp(_NODES[None, :] * math.sqrt(_MAD_VAR / n))[None]
    if two_sided:
        inside = _sp.ndtr(m + t) - _sp.ndtr(m - t)
        log_in = np.log(np.maximum(inside, 1e-300))
    else:
        log_in = _sp.log_ndtr(m + t)
    w = (_WEIGHTS[:, None] * _WEIGHTS[None, :])[None]
    return np.asarray((w * -np.expm1(n * log_in)).sum(axis=(1, 2)))


_NORMAL = {side: QuantileRows(*table_rows(side), LEVELS) for side in (False, True)}
"""The normal table (``nulltable``), one-sided and two-sided."""


_TABLE_MAX = int(table_rows(False)[0][-1])


@lru_cache(maxsize=4096)
def _cutoff(n: int, level: float, two_sided: bool, noise_shape: str = "normal") -> float:
    """Robust-z cutoff (σ units) that the largest z of n healthy replicas exceeds with
    probability ``level`` (at most that under each reference, for ``noise_shape="any"``)."""
    if n < 3 or not 0.0 < level < 1.0:
        return math.inf
    scale = MAD_TO_SIGMA * float(mad_small_sample_factor(np.array(n)))
    if n == 3:
        normal = _isf_three(level, two_sided) / scale
    elif n <= _TABLE_MAX:
        normal = _NORMAL[two_sided].isf(level, n) / scale
    else:
        normal = float(
            _opt.brentq(lambda c: _asymptotic_sf(c, n, two_sided) - level, 0.5, 40.0, xtol=1e-6)
        )
    if noise_shape == "normal":
        return normal
    return max(normal, *(shape_isf(s, level, n, two_sided) / scale for s in SHAPES))


def n_aware_cutoff(
    n: Array, alpha: float = 0.01, two_sided: bool | Array = False, noise_shape: str = "normal"
) -> Array:
    """Robust-z cutoff per fleet size: a healthy fleet of ``n`` has any replica beyond it (one
    signal; the bad direction, or either way when ``two_sided``) with probability ``alpha`` (at
    most ``alpha`` for normal, t₆ and two-cluster noise when ``noise_shape="any"``).

    ``inf`` for fleets under three. Examples at alpha 0.001, one-sided: n=3 → 373, n=5 → 36.5,
    n=10 → 9.4, n=30 → 5.6, n=1,000 → 4.8 (``"any"``: 870, 84, 18.9, 10.4, 16.8).
    """
    n = np.asarray(n, dtype=np.float64)
    two = np.broadcast_to(np.asarray(two_sided, dtype=bool), n.shape)
    out = np.full(n.shape, np.inf)
    for idx in np.ndindex(n.shape):
        if math.isfinite(n[idx]):
            out[idx] = _cutoff(int(n[idx]), float(alpha), bool(two[idx]), noise_shape)
    return out


def signal_level(alpha: float, signals: int, passes: int = 1) -> float:
    """Per-signal level of the statistical test: family-wise ``alpha``, Bonferroni over
    ``signals`` × ``passes``."""
    return alpha / (max(signals, 1) * max(passes, 1))


def max_z_sf(
    z: float | Array, n: int, two_sided: bool = False, noise_shape: str = "normal"
) -> Array:
    """P-value of a largest robust z of ``z`` among ``n`` healthy replicas (one signal), for
    each value of ``z``: the chance that a healthy fleet's largest z is at least that large (the
    largest over the references for ``noise_shape="any"``). Tables resolve p ≤ 0.2; larger
    p-values read 1."""
    z = np.asarray(z, dtype=np.float64)
    if n < 3:
        return np.full(z.shape, np.nan)
    t = np.maximum(z, 1e-12) * MAD_TO_SIGMA * float(mad_small_sample_factor(np.array(n)))
    if noise_shape != "normal":
        p = max_z_sf(z, n, two_sided)
        for s in SHAPES:
            p = np.fmax(p, np.where(z <= 0, 1.0, shape_sf(s, t, n, two_sided)))
        return np.asarray(np.where(np.isnan(z), np.nan, np.where(z == np.inf, 0.0, p)))
    if n == 3:
        p = _sf_three(t, two_sided)
    elif n <= _TABLE_MAX:
        p = np.minimum(_NORMAL[two_sided].sf(t, n), 1.0)
    else:
        p = _asymptotic_sf_many(np.where(np.isfinite(z), z, 0.0).reshape(-1), n, two_sided)
        p = p.reshape(z.shape)
    p = np.where(z <= 0, 1.0, np.where(np.isinf(z), 0.0, p))
    return np.asarray(np.where(np.isnan(z), np.nan, p))


@dataclass(frozen=True, slots=True)
class RobustColumns:
    """Per-column fleet statistics and per-cell scores (rows replicas, columns signals).

    ``z`` is signed (x − median)/scale_mad (±inf where MAD = 0, 0 at the median); ``z_floor`` is
    (x − median)/floor; ``z_own`` is (x − median)/stderr (infinite where no stderr is known);
    ``ratio`` is x/median (NaN where the median is 0); the last three are ``Cells``, computed for
    the cells asked for. ``floored`` marks columns whose MAD-based
    spread is below the floor. ``cutoff`` is per column (see ``n_aware_cutoff``).
    """

    median: Array
    mad: Array
    n: Array
    scale_mad: Array
    floor: Array
    floored: np.ndarray[Any, np.dtype[np.bool_]]
    cutoff: Array
    z: Array
    z_floor: Cells
    z_own: Cells
    ratio: Cells
    rank_p: Array | None = None
    """Per cell, the p-value of the replica's requests against the rest's (``ranks``); NaN or
    None where the source has no per-request samples."""
    rank_level: Array | None = None
    """Per column, the level each cell's ``rank_p`` is held to (NaN where not tested)."""


def _median(a: Array, has_nan: bool = True, scratch: bool = False) -> Array:
    """Column medians; without NaN, ``np.median``'s own selection and mean of the middle two,
    without its NaN check. ``scratch``: ``a`` may be reordered (no copy)."""
    if has_nan and np.isnan(a).any():
        return np.asarray(np.nanmedian(a, axis=0))
    k, odd = divmod(a.shape[0], 2)
    if not a.shape[0]:
        return np.asarray(np.median(a, axis=0))
    kth = k if odd else [k - 1, k]
    if scratch:
        a.partition(kth, axis=0)
        part = a
    else:
        part = np.partition(a, kth, axis=0)
    return np.asarray(part[k] if odd else (part[k - 1] + part[k]) / 2.0)


def robust_columns(
    x: Array,
    *,
    rel_floor: Array,
    abs_floor: Array,
    stderr: Array | None = None,
    alpha: float = 0.01,
    two_sided: Array | bool = False,
    noise_shape: str = "normal",
) -> RobustColumns:
    """Robust z-scores for every cell of ``x`` (replicas × signals, NaN = missing).

    ``alpha`` is the level per column (see ``n_aware_cutoff``, and ``noise_shape``). Vectorised over the whole
    matrix: 10,000 replicas × 10 signals take milliseconds.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError("x must be 2-D (replicas × signals)")
    k = x.shape[1]
    missing = np.isnan(x)
    has_nan = bool(missing.any())
    n = (
        (x.shape[0] - missing.sum(axis=0)).astype(np.float64)
        if has_nan
        else np.full(k, x.shape[0], float)
    )
    empty = n == 0
    with np.errstate(all="ignore"):
        if x.shape[0]:
            med = _median(np.where(empty, 0.0, x) if empty.any() else x, has_nan)
            med = np.where(empty, np.nan, med)
            dev = x - med
            absdev = np.abs(dev)  # reordered below (scratch)
            mad = _median(np.where(empty, 0.0, absdev) if empty.any() else absdev, has_nan, True)
            mad = np.where(empty, np.nan, mad)
            # Rounding noise (1e-13 s between identical step times) is no spread at all.
            mad = np.where(mad <= 1e-9 * np.abs(med), 0.0, mad)
        else:
            med = np.full(k, np.nan)
            mad = np.full(k, np.nan)
            dev = x - med
        scale_mad = MAD_TO_SIGMA * mad_small_sample_factor(n) * mad
        floor = np.maximum(np.asarray(rel_floor, dtype=np.float64) * np.abs(med), abs_floor)
        # Division in place, then the exception: 0 at the median, whatever the divisor.
        at_median = dev == 0
        z = dev / scale_mad
        z[at_median] = 0.0
    se = None if stderr is None else np.asarray(stderr, dtype=np.float64)
    return RobustColumns(
        median=med,
        mad=mad,
        n=n,
        scale_mad=scale_mad,
        floor=floor,
        floored=~(scale_mad > floor),
        cutoff=_column_cutoffs(
            n, alpha, np.broadcast_to(np.asarray(two_sided, bool), n.shape), noise_shape
        ),
        z=z,
        z_floor=Cells(partial(z_floor_at, dev, floor)),
        z_own=Cells(partial(z_own_at, dev, se)),
        ratio=Cells(partial(ratio_at, x, med)),
    )


def _column_cutoffs(n: Array, alpha: float, two: np.ndarray[Any, Any], noise_shape: str) -> Array:
    out = np.full(n.shape, np.inf)
    keys = np.stack([n, two.astype(np.float64)])
    uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
    vals = [_cutoff(int(a), float(alpha), bool(b), noise_shape) for a, b in uniq.T]
    out[:] = np.asarray(vals)[inverse.reshape(-1)]
    return out


def envoy_success_rate_threshold(success_rates: Array, factor: float = 1.9) -> float:
    """Envoy's success-rate ejection threshold, mean − factor·σ (population σ), for comparison.

    >>> round(envoy_success_rate_threshold(np.array([50.0, 50, 100, 100, 100])), 1)
    33.5
    """
    v = np.asarray(success_rates, dtype=np.float64)
    return float(v.mean() - factor * v.std())
