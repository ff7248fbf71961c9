"""The largest deviation, in MADs, among n healthy replicas whose differences are not normal.

With one number per replica (throughput, a GPU gauge) nothing tells the shape of the noise
between healthy replicas, and the cutoff from normal noise (``nulltable``) is exceeded far more
often when that noise has heavier tails or falls in clusters. With ``noise_shape="any"`` the
detector's cutoff is the largest of three references' (``stats``), each the quantile of
``T = max (x − median) / MAD`` (and of ``max |x − median| / MAD``) at the same level:

- normal noise (``nulltable``);
- ``t6``: Student's t with 6 degrees of freedom (excess kurtosis 3): parts and firmware that
  mostly agree, with an occasional replica well off;
- ``clusters``: two batches of hardware, a fair coin per replica, the batches two spreads apart
  with a quarter of a spread within each (``±1 + N(0, 1/4)``): when most replicas fall in one
  batch, its tight spread makes the few in the other look far out.

T does not depend on location or scale, so ``(n, shape)`` is all a row needs. Rows hold the
quantiles at ``LEVELS`` from a seeded Monte Carlo run of 1,000,000 fleets per n and shape, read
between sizes and levels as the normal table is (``nulltable.QuantileRows``). Beyond the largest
size two clusters have lighter tails than normal noise (they cannot set the cutoff) and t₆ has a
closed form (``_t6_sf``: its tail with the median's and the MAD's errors). Regenerate with::

    python -m fleetwatch.fleet.outliers.stats.shapetable 1000000 > rows.txt   # about 4 minutes on one core

Tests check the rows against fresh simulations with other seeds and the detector's false-alarm
rate on fleets drawn by ``fleetwatch.scenarios.healthy_tables``.
"""

from __future__ import annotations

import math
import sys
from functools import lru_cache, partial
from typing import Any, Final

import numpy as np
from scipy import optimize as _opt
from scipy import special as _sp

from fleetwatch.fleet.outliers.stats.nulltable import (
    GAUSS_NODES as _NODES,
)
from fleetwatch.fleet.outliers.stats.nulltable import (
    GAUSS_WEIGHTS as _WEIGHTS,
)
from fleetwatch.fleet.outliers.stats.nulltable import (
    QuantileRows,
    simulate_max_dev,
)

__all__ = ["LEVELS", "SHAPES", "SIZES", "T_DF", "draw", "shape_isf", "shape_rows", "shape_sf"]

LEVELS: Final = (0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 5e-4, 2e-4, 1e-4)
"""Upper-tail probabilities of the tabulated quantiles, largest first."""
SHAPES: Final = ("t6", "clusters")
T_DF: Final = 6
SIZES: Final = (*range(3, 13), 14, 16, 20, 25, 30, 40, 50, 70, 100, 150, 200, 300)


def draw(shape: str, rng: np.random.Generator, size: tuple[int, int], dtype: Any) -> Any:
    """Noise of ``shape`` (any scale: T does not depend on it)."""
    if shape == "t6":
        return rng.standard_t(T_DF, size).astype(dtype)
    if shape == "clusters":
        side = np.where(rng.random(size) < 0.5, -1.0, 1.0)
        return (side + 0.25 * rng.standard_normal(size)).astype(dtype)
    raise ValueError(f"unknown shape {shape!r}")


# shape, side, n, then the quantile of T at each of LEVELS.
_ROWS = """
t6 one    3 3.6181 7.8586 16.33 41.548 83.607 167.16 430.18 855.91 1724.9 3967.6 7688.4
t6 two    3 7.852 16.305 33.045 83.339 167.01 342.22 846.38 1730.7 3454.6 8882.9 16848
t6 one    4 3.1806 5.0049 7.5398 12.475 18.01 25.631 41.034 58.536 83.953 132.34 188.81
t6 two    4 5.0136 7.5347 11.056 17.996 25.72 36.856 59.122 84.27 118.76 188.81 244.21
t6 one    5 3.982 6.2358 9.3261 15.417 22.186 31.6 51.099 72.066 103.32 169.98 238.48
t6 two    5 5.76 8.7666 12.955 21.192 30.431 43.353 69.306 97.42 139.25 227.82 317.13
t6 one    6 3.7938 5.3676 7.3058 10.58 13.88 17.97 25.061 31.942 41.085 58.605 73.586
t6 two    6 5.1194 7.0511 9.4497 13.517 17.543 22.602 31.306 40.01 51.875 71.009 89.504
t6 one    7 4.113 5.8351 7.939 11.51 14.937 19.289 27.05 34.552 44.48 60.121 74.246
t6 two    7 5.4414 7.5422 10.124 14.478 18.766 24.212 33.67 43.613 55.121 76.462 91.956
t6 one    8 4.0347 5.446 7.0993 9.7203 12.116 14.951 19.588 23.859 28.709 37.088 46.356
t6 two    8 5.1813 6.8619 8.7996 11.872 14.664 18.001 23.409 28.314 33.803 44.832 52.104
t6 one    9 4.2435 5.7274 7.4574 10.231 12.706 15.713 20.527 24.853 30.041 38.949 46.886
t6 two    9 5.3986 7.1477 9.1871 12.364 15.324 18.855 24.44 29.654 36.197 45.565 55.817
t6 one   10 4.2019 5.5104 6.9884 9.2828 11.313 13.659 17.341 20.324 24.1 29.856 34.632
t6 two   10 5.2631 6.7781 8.4887 11.129 13.456 16.225 20.245 24.016 28.073 34.371 40.658
t6 one   11 4.3527 5.7117 7.2531 9.6379 11.738 14.147 17.82 21.22 24.956 30.3 36.128
t6 two   11 5.4239 7.0032 8.7831 11.51 13.927 16.659 20.998 24.674 28.55 35.562 41.681
t6 one   12 4.3331 5.5845 6.9556 9.0127 10.816 12.878 15.852 18.465 21.594 25.983 30.538
t6 two   12 5.3525 6.7788 8.3418 10.687 12.69 14.905 18.256 21.211 24.498 29.492 34.515
t6 one   14 4.4473 5.6538 6.9641 8.9127 10.545 12.382 15.224 17.638 20.244 24.178 27.174
t6 two   14 5.4398 6.8038 8.2685 10.445 12.313 14.413 17.584 20.103 23.053 27.136 30.97
t6 one   16 4.548 5.7121 6.9737 8.8236 10.384 12.165 14.705 16.803 19.254 22.863 25.575
t6 two   16 5.5155 6.8306 8.2467 10.311 12.088 14.003 16.843 19.35 22.238 26.328 29.344
t6 one   20 4.7303 5.858 7.0475 8.7891 10.261 11.892 14.373 16.413 18.795 22.125 25.122
t6 two   20 5.6746 6.9263 8.2512 10.193 11.778 13.579 16.246 18.592 21.304 25.297 28.774
t6 one   25 4.9377 6.0439 7.2211 8.9234 10.362 11.911 14.175 16.159 18.49 21.702 24.483
t6 two   25 5.8727 7.1064 8.4056 10.27 11.818 13.523 16.055 18.383 20.733 24.093 27.641
t6 one   30 5.0803 6.1553 7.2851 8.918 10.307 11.822 14.036 15.892 18.052 21.354 24.418
t6 two   30 6.0013 7.196 8.4455 10.261 11.786 13.44 15.874 18.026 20.417 24.134 26.684
t6 one   40 5.3444 6.4075 7.5222 9.1144 10.462 11.958 14.123 16.039 17.977 21.456 24.668
t6 two   40 6.2739 7.4436 8.6733 10.449 11.959 13.593 16.102 18.078 20.543 24.312 27.801
t6 one   50 5.5618 6.6262 7.7199 9.3257 10.677 12.185 14.359 16.256 18.376 21.322 23.96
t6 two   50 6.4967 7.6601 8.8829 10.667 12.179 13.851 16.29 18.332 20.644 23.986 26.854
t6 one   70 5.929 6.998 8.1096 9.7241 11.09 12.561 14.787 16.788 19.05 22 24.565
t6 two   70 6.8755 8.0462 9.2782 11.076 12.581 14.242 16.756 18.963 21.249 24.481 27.743
t6 one  100 6.3353 7.4301 8.5763 10.246 11.654 13.187 15.547 17.481 19.604 23.23 26.202
t6 two  100 7.3124 8.5096 9.7796 11.638 13.196 14.955 17.602 19.718 22.361 26.377 29.297
t6 one  150 6.83 7.9539 9.1418 10.89 12.376 13.994 16.43 18.716 21.019 24.701 27.738
t6 two  150 7.8442 9.0904 10.416 12.35 13.983 15.822 18.607 20.969 23.696 27.237 30.208
t6 one  200 7.2018 8.356 9.5917 11.392 12.928 14.611 17.12 19.274 21.698 25.444 28.765
t6 two  200 8.2579 9.5372 10.905 12.909 14.601 16.458 19.282 21.7 24.579 28.954 32.297
t6 one  300 7.7736 8.9923 10.281 12.182 13.784 15.597 18.199 20.531 22.881 26.451 30.069
t6 two  300 8.8784 10.219 11.652 13.768 15.571 17.56 20.492 22.991 25.755 29.9 34.079
clusters one    3 8.4324 18.271 37.396 94.235 188.1 375.23 951.56 1929.1 3996.8 9897.6 19968
clusters two    3 18.291 37.546 75.912 189.47 377.92 759.82 1909 3850.8 7750.1 18128 34761
clusters one    4 6.256 11.399 17.575 29.389 42.347 60.402 94.858 135.32 190.11 304.84 423.85
clusters two    4 11.424 17.609 25.966 42.103 59.79 84.319 131.95 188.23 271.1 438.81 585.1
clusters one    5 7.5727 12.531 19.167 31.788 46.303 66.315 106.46 150.58 209.25 330.7 447.05
clusters two    5 12.436 19.076 28.179 46.265 66.38 94.547 150.23 210.15 293.29 474.99 656.86
clusters one    6 6.3462 10.091 14.234 20.882 27.324 35.27 48.81 61.379 79.055 107.62 136.44
clusters two    6 10.055 14.174 19.02 27.227 35.143 44.986 61.728 78.809 99.701 136.35 169.95
clusters one    7 6.7133 10.306 14.38 21.153 27.628 35.66 49.685 62.968 79.938 110.12 145.35
clusters two    7 10.252 14.349 19.3 27.567 35.659 45.764 62.927 80.055 100.8 139.66 172.29
clusters one    8 5.8786 8.9073 12.039 16.721 20.918 25.705 33.407 40.543 48.875 63.266 76.545
clusters two    8 8.9098 12.054 15.527 20.97 25.83 31.591 40.578 48.743 59.331 75.443 91.396
clusters one    9 6.0734 8.9871 12.082 16.764 20.9 25.854 33.826 41.356 50.422 63.57 73.884
clusters two    9 8.9701 12.063 15.509 20.85 25.735 31.497 41.116 49.658 59.344 74.649 88.102
clusters one   10 5.4668 8.084 10.692 14.404 17.491 20.882 26.115 30.52 35.552 42.928 50.341
clusters two   10 8.0801 10.697 13.465 17.492 20.884 24.782 30.577 35.668 41.577 50.763 60.006
clusters one   11 5.6268 8.1513 10.714 14.358 17.386 20.742 25.881 30.488 35.689 43.711 49.898
clusters two   11 8.1347 10.7 13.41 17.416 20.849 24.627 30.558 35.939 41.569 50.276 57.512
clusters one   12 5.1622 7.4796 9.7447 12.784 15.27 17.987 21.924 25.341 28.859 34.526 39.17
clusters two   12 7.4793 9.7402 12.036 15.269 17.984 20.884 25.307 29.006 33.46 39.54 44.185
clusters one   14 4.9167 7.0165 9.0102 11.628 13.724 15.909 18.991 21.677 24.4 28.38 31.99
clusters two   14 7.0121 9.0201 10.997 13.727 15.905 18.217 21.732 24.451 27.632 31.897 36.204
clusters one   16 4.721 6.6571 8.4699 10.833 12.654 14.584 17.208 19.325 21.752 25.034 27.661
clusters two   16 6.6622 8.4804 10.269 12.675 14.588 16.609 19.447 21.927 24.374 27.871 30.894
clusters one   20 4.4357 6.1156 7.6793 9.65 11.147 12.625 14.652 16.257 17.97 20.188 22.295
clusters two   20 6.1169 7.6942 9.1978 11.158 12.673 14.229 16.358 18.112 19.824 22.384 24.07
clusters one   25 4.2803 5.7749 7.155 8.8807 10.155 11.462 13.156 14.499 15.935 18.109 19.489
clusters two   25 5.7645 7.1427 8.4522 10.144 11.426 12.734 14.461 15.836 17.323 19.37 20.758
clusters one   30 3.9969 5.3282 6.5303 8.0209 9.1074 10.184 11.615 12.692 13.855 15.374 16.548
clusters two   30 5.3259 6.5274 7.6664 9.0996 10.187 11.28 12.715 13.856 14.95 16.568 17.789
clusters one   40 3.7514 4.8729 5.8828 7.1159 7.9955 8.8363 9.9301 10.734 11.559 12.708 13.547
clusters two   40 4.8707 5.8897 6.8288 8.0079 8.8601 9.6855 10.786 11.639 12.513 13.565 14.278
clusters one   50 3.5728 4.5657 5.4494 6.53 7.3031 8.037 9.0185 9.7382 10.407 11.299 11.876
clusters two   50 4.5703 5.4552 6.2783 7.3052 8.05 8.7823 9.716 10.365 11.035 11.932 12.565
clusters one   70 3.3538 4.189 4.9115 5.7827 6.4065 6.9922 7.7278 8.2916 8.8469 9.6054 10.173
clusters two   70 4.1839 4.9134 5.5804 6.4044 6.9985 7.5484 8.2698 8.8256 9.371 10.132 10.595
clusters one  100 3.1506 3.8514 4.4457 5.1459 5.6499 6.1183 6.7227 7.1433 7.5823 8.0705 8.396
clusters two  100 3.8502 4.4441 4.981 5.6471 6.1147 6.5678 7.1251 7.5507 7.9607 8.4289 8.8302
clusters one  150 2.9555 3.5379 4.0212 4.5811 4.9652 5.3299 5.7922 6.1613 6.4864 6.9067 7.2649
clusters two  150 3.54 4.024 4.4549 4.9738 5.3422 5.6952 6.1594 6.4939 6.8173 7.2407 7.5686
clusters one  200 2.8362 3.3511 3.7744 4.2615 4.599 4.907 5.2943 5.5594 5.8179 6.1803 6.4246
clusters two  200 3.3524 3.7722 4.1461 4.5951 4.9077 5.2039 5.5794 5.8415 6.1016 6.4425 6.6312
clusters one  300 2.6962 3.1326 3.484 3.8828 4.1525 4.4045 4.7127 4.943 5.1678 5.4337 5.6409
clusters two  300 3.1338 3.4853 3.7929 4.1518 4.4013 4.6332 4.9395 5.1643 5.3601 5.6295 5.8298
"""


Array = np.ndarray[Any, np.dtype[np.float64]]
# t6 beyond the table: the population MAD (median |t|), the densities at 0 and at it
_T_MAD = float(_sp.stdtrit(T_DF, 0.75))
_F0 = math.gamma((T_DF + 1) / 2) / (math.sqrt(T_DF * math.pi) * math.gamma(T_DF / 2))
_F_MAD = _F0 * (1.0 + _T_MAD**2 / T_DF) ** (-(T_DF + 1) / 2)


def shape_rows(shape: str, two_sided: bool) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Tabulated sizes and, per size, the quantiles of T at ``LEVELS``."""
    side = "two" if two_sided else "one"
    ns, qs = [], []
    for line in _ROWS.strip().splitlines():
        s, d, n, *q = line.split()
        if s == shape and d == side:
            ns.append(int(n))
            qs.append([float(v) for v in q])
    return np.asarray(ns), np.asarray(qs)


@lru_cache(maxsize=8)
def _rows(shape: str, two_sided: bool) -> QuantileRows:
    return QuantileRows(*shape_rows(shape, two_sided), LEVELS)


def _t6_sf(c: Array, n: int, two_sided: bool) -> Array:
    """P(T > c) for n > the table: t6 replicas, the median's and the MAD's errors normal."""
    med = (_NODES[:, None] / (2.0 * _F0 * math.sqrt(n)))[None]
    rel = math.sqrt(1.0 / (16.0 * n * _F_MAD**2 * _T_MAD**2))
    t = (np.asarray(c)[..., None, None] * _T_MAD * np.exp(_NODES[None, :] * rel)).reshape(
        -1, 1, _NODES.size
    )
    upper = _sp.stdtr(T_DF, -(med + t))
    out = upper + (_sp.stdtr(T_DF, med - t) if two_sided else 0.0)
    w = (_WEIGHTS[:, None] * _WEIGHTS[None, :])[None]
    p = (w * -np.expm1(n * np.log1p(-np.minimum(out, 1.0 - 1e-16)))).sum(axis=(1, 2))
    return np.asarray(p).reshape(np.shape(c))


def shape_isf(shape: str, p: float, n: int, two_sided: bool) -> float:
    """The quantile of T with upper-tail probability ``p`` among n replicas with noise of
    ``shape`` (0 where the shape cannot bind: two clusters beyond the table)."""
    if n > SIZES[-1]:
        if shape != "t6":
            return 0.0
        return float(_opt.brentq(lambda c: _t6_sf(np.array(c), n, two_sided) - p, 0.1, 1e4))
    return _rows(shape, two_sided).isf(p, n)


def shape_sf(shape: str, t: Array, n: int, two_sided: bool) -> Array:
    """P(T > t) for each t (1 above the table's largest level; 0 where the shape cannot bind)."""
    t = np.asarray(t, dtype=np.float64)
    if n > SIZES[-1]:
        return _t6_sf(t, n, two_sided) if shape == "t6" else np.zeros(t.shape)
    return _rows(shape, two_sided).sf(t, n)


def _main(argv: list[str]) -> None:
    draws = int(argv[0]) if argv else 1_000_000
    for shape in SHAPES:
        for n in SIZES:
            rng = np.random.default_rng([n, SHAPES.index(shape), 20261130])
            one, two = simulate_max_dev(n, draws, rng, noise=partial(draw, shape))
            for side, t in (("one", one), ("two", two)):
                q = np.quantile(t, [1.0 - p for p in LEVELS])
                print(f"{shape} {side} {n:4d} " + " ".join(f"{v:.5g}" for v in q), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
