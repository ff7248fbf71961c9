"""Healthy fleets as per-replica signal tables, thousands at once, with noise of several shapes.

For the outlier detector's calibration tests and benchmarks. Every replica is healthy: its values
differ from the fleet's base values only by noise, independent across replicas and signals. Shapes:

- ``normal``: ``base · (1 + spread · N(0, 1))`` for every signal, shares included: the null the
  statistical test is calibrated for (any spread gives the same z, so only floors and gates see
  it);
- ``lognormal``: ``base · exp(ε)``, ``ε ~ N(0, spread)``;
- ``bimodal``: two hardware batches, a fair coin per replica: ``ε = spread · (±1 + N(0, 1/4))``;
- ``heavy``: ε Student's t with ``T_DF`` degrees of freedom, scaled to a robust spread
  (1.4826 · MAD) of ``spread``.

In the last three, shares of rare events (``SHARES``: the error rate, the share of samples with a
clock-event reason) are what they are in a window: binomial counts over requests or samples.

``request_values`` draws every request of healthy fleets instead (the latencies in ``SAMPLED``,
each replica's requests from the same distribution), for the per-request rank test.

``fleet_values`` returns an array of shape (replicas, fleets, signals), signals in ``SIGNALS``
order; ``as_columns`` flattens fleets × signals into the columns of one matrix, so the detector's
vectorised scoring judges every fleet at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import numpy as np
import pandas as pd
from scipy import stats as _st

__all__ = [
    "REQUEST_SHAPES",
    "SAMPLED",
    "SHAPES",
    "SHARES",
    "SIGNALS",
    "T_DF",
    "as_columns",
    "fleet_table",
    "fleet_values",
    "histogram_fleet",
    "request_fleets",
    "request_values",
]

Shape = Literal["normal", "lognormal", "bimodal", "heavy"]
SHAPES: Final[tuple[Shape, ...]] = ("normal", "lognormal", "bimodal", "heavy")

SIGNALS: Final[Mapping[str, tuple[float, float]]] = {
    # name: (fleet base value, spread between healthy replicas, relative)
    "ttft": (0.2, 0.01),
    "tpot": (0.02, 0.01),
    "e2e": (3.0, 0.01),
    "itl": (0.02, 0.01),
    "error_rate": (0.002, 0.32),
    "throughput": (500.0, 0.01),
    "sm_clock_ratio": (0.97, 0.005),
    "clock_event_active": (0.01, 0.4),
    "dram_bw_ratio": (0.6, 0.01),
    "power_w": (550.0, 0.01),
}
"""Ten signals. The spreads are those of p50s over a window of thousands of requests on like
hardware (1 %), an SM clock held by the driver (0.5 %), and, for shares, a binomial count's."""
SHARES: Final[Mapping[str, int]] = {"error_rate": 5000, "clock_event_active": 600}
"""Shares drawn as binomial counts: requests (or GPU samples) per replica in the window."""
T_DF = 6
"""Degrees of freedom of the heavy tail (excess kurtosis 3). With 4, at the same spread, about
one fleet of 1,000 replicas in ten has a replica 25 % off the median: a real finding."""
_T_MAD = float(_st.t.ppf(0.75, T_DF))
"""Median |t|: dividing by it gives the heavy tail a robust spread of 1."""


def fleet_values(
    fleets: int, replicas: int, shape: Shape, *, seed: int
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Values of ``fleets`` healthy fleets of ``replicas``, shape (replicas, fleets, signals)."""
    rng = np.random.default_rng(seed)
    size = (replicas, fleets, len(SIGNALS))
    base = np.array([b for b, _ in SIGNALS.values()])
    spread = np.array([s for _, s in SIGNALS.values()])
    if shape == "normal":
        return np.asarray(base * (1.0 + spread * rng.standard_normal(size)))
    if shape == "lognormal":
        eps = spread * rng.standard_normal(size)
    elif shape == "bimodal":
        side = np.where(rng.random(size) < 0.5, -1.0, 1.0)
        eps = spread * (side + 0.25 * rng.standard_normal(size))
    elif shape == "heavy":
        eps = spread * (0.6745 / _T_MAD) * rng.standard_t(T_DF, size)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    out = base * np.exp(eps)
    for name, count in SHARES.items():
        j = list(SIGNALS).index(name)
        out[:, :, j] = rng.binomial(count, SIGNALS[name][0], size[:2]) / count
    return np.asarray(out)


def as_columns(values: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """(replicas, fleets, signals) -> (replicas, fleets · signals): fleet f's signal j is column
    ``f · signals + j``."""
    r, f, k = values.shape
    return np.ascontiguousarray(values.reshape(r, f * k))


def fleet_table(values: np.ndarray[Any, Any], fleet: int) -> pd.DataFrame:
    """One fleet of ``fleet_values`` as a frame indexed ``r0``, ``r1``, … with signal columns."""
    idx = pd.Index([f"r{i}" for i in range(values.shape[0])])
    return pd.DataFrame(values[:, fleet, :], index=idx, columns=list(SIGNALS))


RequestShape = Literal["lognormal", "bimodal", "heavy"]
REQUEST_SHAPES: Final[tuple[RequestShape, ...]] = ("lognormal", "bimodal", "heavy")
SAMPLED: Final[tuple[str, ...]] = ("ttft", "tpot", "e2e")
"""Signals with per-request samples (as from records)."""


def request_values(
    fleets: int, replicas: int, per_replica: int, shape: RequestShape, *, seed: int
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.int64]]]:
    """Every request of ``fleets`` healthy fleets: (samples, groups).

    ``samples`` has shape (replicas · per_replica, fleets · 3): fleet f's ``SAMPLED[j]`` is column
    ``f · 3 + j``; ``groups`` the replica of each row. Per-request latency shapes, in units of the
    signal's base value: ``lognormal`` (σ 0.5); ``bimodal``, prefix-cache hits and misses (70 %
    at 1, 30 % at 3, each lognormal σ 0.2); ``heavy``, 1 + Pareto with tail index 1.5 (infinite
    variance).
    """
    rng = np.random.default_rng(seed)
    size = (replicas * per_replica, fleets * len(SAMPLED))
    if shape == "lognormal":
        out = rng.lognormal(0.0, 0.5, size)
    elif shape == "bimodal":
        out = np.where(rng.random(size) < 0.7, 1.0, 3.0) * rng.lognormal(0.0, 0.2, size)
    elif shape == "heavy":
        out = 1.0 + rng.pareto(1.5, size)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    base = np.tile([SIGNALS[s][0] for s in SAMPLED], fleets)
    groups = np.repeat(np.arange(replicas, dtype=np.int64), per_replica)
    return np.asarray(out * base), groups


def request_fleets(
    fleets: int,
    replicas: int,
    per_replica: int,
    shape: RequestShape,
    *,
    seed: int,
    slow: float = 1.0,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Healthy fleets as the detector sees records: (values, stderr, rank p-values), each of
    shape (replicas, fleets · signals) like ``as_columns``.

    The ``SAMPLED`` signals are the medians of ``request_values`` (with the order-statistic
    standard error ``table_from_records`` gives them) and their rank p-values (one-sided, higher
    is worse); the other signals are ``fleet_values``' normal summaries (p-value NaN). ``slow``
    multiplies replica 0's requests (a planted slow replica).
    """
    from fleetwatch.fleet.outliers.stats.ranks import p_values, rank_z_columns

    samples, groups = request_values(fleets, replicas, per_replica, shape, seed=seed)
    if slow != 1.0:
        samples[groups == 0] *= slow
    cols = [list(SIGNALS).index(s) for s in SAMPLED]
    x = fleet_values(fleets, replicas, "normal", seed=seed + 1)
    by = samples.reshape(replicas, per_replica, fleets, len(SAMPLED))
    half = 1.959964 * np.sqrt(0.25 / per_replica)
    lo, med, hi = np.quantile(by, [0.5 - half, 0.5, 0.5 + half], axis=1)
    x[:, :, cols] = med
    se = np.full(x.shape, np.nan)
    se[:, :, cols] = (hi - lo) / (2 * 1.959964)
    p = np.full(x.shape, np.nan)
    z = rank_z_columns(samples, groups, replicas).reshape(replicas, fleets, len(SAMPLED))
    p[:, :, cols] = p_values(z, 1.0)
    return as_columns(x), as_columns(se), as_columns(p)


def histogram_fleet(
    replicas: int,
    per_replica: int,
    shape: RequestShape,
    bounds: Mapping[str, tuple[float, ...]],
    *,
    rng: np.random.Generator,
    per_request: tuple[str, ...] = SAMPLED,
) -> Any:
    """One healthy fleet as a Prometheus or ``/metrics`` source sees it: a ``FleetTable`` of the
    ``SAMPLED`` latencies' p50s read from histograms with upper bounds ``bounds[signal]``
    (``histogram_quantile``), the buckets of the signals in ``per_request`` as per-request samples
    for the rank test (the rest judged by the cutoff across p50s), and the bounds
    (``FleetTable.bins``). Requests are drawn as in ``request_values``, every
    replica's from the same distribution; TTFT 0.2 s, TPOT 20 ms and e2e 3 s at the base."""
    from fleetwatch.fleet.outliers.sources.histogram import bucket_samples, histogram_quantile
    from fleetwatch.fleet.outliers.table import FleetTable

    raw, groups = request_values(1, replicas, per_replica, shape, seed=int(rng.integers(2**31)))
    values: dict[str, list[float]] = {s: [] for s in SAMPLED}
    frames = []
    names = [f"r{i}" for i in range(replicas)]
    for j, signal in enumerate(SAMPLED):
        les = np.array([*bounds[signal], np.inf])
        for i, name in enumerate(names):
            x = np.sort(raw[groups == i, j])
            counts = np.searchsorted(x, les, side="right").tolist()
            cumulative = dict(zip(les.tolist(), counts, strict=True))
            values[signal].append(histogram_quantile(0.5, cumulative.items()))
            if signal in per_request:
                frames.append(pd.DataFrame({"replica": name, signal: bucket_samples(cumulative)}))
    index = pd.Index(names)
    return FleetTable(
        values=pd.DataFrame(values, index=index),
        volume=pd.Series(float(per_replica), index=index),
        samples=pd.concat(frames, ignore_index=True),
        bins={s: tuple(bounds[s]) for s in SAMPLED},
        source="histograms",
    )
