"""Fleet diagnosis benchmarks: outliers over 10,000 replicas × 10 signals, tail attribution over
1 million records, run comparison, the false-positive rate on healthy reference-engine fleets, and
the outlier test's calibration: false alarms on healthy fleets of 3 to 1,000 replicas with noise of
four shapes, floors and gates off and on, and how often planted slow replicas are found.

Timings are medians of interleaved repeats, side by side with a bare baseline on the same data:
for outliers, the bare robust z (numpy median/MAD only, no gates, floors or findings) and Envoy's
mean − 1.9σ rule; for the tail, a bare pandas "p99 + component means" summary.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pandas as pd

from benchmarks.fleet_outliers import _interleaved, _median_time, bench_outliers
from fleetwatch.fleet.compare import compare_runs
from fleetwatch.fleet.outliers import DetectorConfig, SignalSpec, detect, table_from_records
from fleetwatch.fleet.outliers.stats.robust import signal_level
from fleetwatch.fleet.outliers.stats.score import score_matrix
from fleetwatch.fleet.tail import attribute_tail
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet


def bench_tail() -> list[str]:
    df = synthetic_fleet(100, 10_000, seed=2, slowdown={7: 2.5})

    def bare() -> object:
        thr = df["e2e_s"].quantile(0.99)
        tail = df["e2e_s"] >= thr
        return df.groupby(tail)[["queue_s", "prefill_s", "decode_s"]].mean()

    t = _interleaved({"ours": lambda: attribute_tail(df), "bare": bare}, 5)
    top = attribute_tail(df).top
    assert top is not None
    return [
        f"| tail attribution, {len(df):,} records | {t['ours'] * 1000:.0f} ms "
        f"(CPU {t['ours_cpu'] * 1000:.0f} ms) | bare p99 + "
        f"component means {t['bare'] * 1000:.0f} ms ({t['ours'] / t['bare']:.1f}x) | floor 2 s; "
        f"top suspect: {top.name} ({top.share:.0%}) |"
    ]


def bench_records_pipeline() -> list[str]:
    df = synthetic_fleet(100, 10_000, seed=3, slowdown={5: 2.0})
    t = _median_time(lambda: detect(table_from_records(df)), 3)
    b = synthetic_fleet(10, 50_000, seed=1)
    a = synthetic_fleet(10, 50_000, seed=2, slowdown={i: 1.1 for i in range(10)})
    tc = _median_time(lambda: compare_runs(b, a), 3)
    return [
        f"| records → table → detect, {len(df):,} records, 100 replicas | {t * 1000:.0f} ms | | "
        "includes per-bucket like-for-like medians |",
        f"| compare, 500,000 vs 500,000 records, 6 metrics × 3 percentiles, 2,000 draws | "
        f"{tc * 1000:.0f} ms | | exact bootstrap + Mann–Whitney + KS |",
    ]


def bench_false_positives() -> list[str]:
    from fleetwatch.records import to_frame
    from fleetwatch.scenarios.engine_runs import ReplicaPlan, run_replica

    pool_n, fleets = 40, 200
    pool = [
        to_frame(run_replica(ReplicaPlan(f"h{i}", requests=40, seed=5000 + i)))
        for i in range(pool_n)
    ]
    cfg = DetectorConfig(min_requests=30)
    rows = []
    for size in (3, 5, 10):
        flagged = 0
        for k in range(fleets):
            picks = random.Random(size * 10_000 + k).sample(range(pool_n), size)
            df = pd.concat(
                [pool[i].assign(replica=f"r{j}") for j, i in enumerate(picks)], ignore_index=True
            )
            flagged += detect(table_from_records(df), cfg).verdict != "no outlier"
        rows.append(
            f"| false positives, healthy engine fleets of {size} | {flagged}/{fleets} fleets "
            f"({flagged / fleets:.1%}) | | pool of {pool_n} independent replica runs × 40 "
            "requests, seeded |"
        )
    hits = {1.5: 0, 2.0: 0}
    trials = 20
    for factor in hits:
        for k in range(trials):
            slow = to_frame(
                run_replica(ReplicaPlan("s", requests=40, slowdown=factor, seed=9000 + k))
            )
            picks = random.Random(k).sample(range(pool_n), 4)
            df = pd.concat(
                [pool[i].assign(replica=f"r{j}") for j, i in enumerate(picks)] + [slow],
                ignore_index=True,
            )
            rep = detect(table_from_records(df), cfg)
            hits[factor] += any(
                f.replica == "s" and f.side.value == "replica" for f in rep.findings
            )
    rows += [
        f"| detection, one replica slowed {f}x in fleets of 5 | {h}/{trials} found replica-side "
        "| | engine FaultConfig(slowdown) |"
        for f, h in hits.items()
    ]
    return rows


def bench_synthetic_false_positives() -> list[str]:
    fleets, size = 200, 10
    flagged = blamed = 0
    for k in range(fleets):
        rng = np.random.default_rng(k)
        # Healthy but not identical: each replica within a few percent of the others.
        speed = {i: float(rng.lognormal(0.0, 0.03)) for i in range(size)}
        df = synthetic_fleet(size, 200, seed=10_000 + k, slowdown=speed)
        report = detect(table_from_records(df))
        flagged += report.verdict != "no outlier"
        blamed += any(f.side.value == "replica" for f in report.findings)
    return [
        f"| false positives, synthetic healthy fleets of {size} (±3 % replica speed, 200 "
        f"requests each) | any finding {flagged}/{fleets} ({flagged / fleets:.1%}); replica "
        f"blamed {blamed}/{fleets} ({blamed / fleets:.1%}) | | seeded |"
    ]


def _stat_specs(floors: bool) -> list[SignalSpec]:
    from fleetwatch.scenarios.healthy_tables import SIGNALS as HEALTHY

    specs = [DetectorConfig().spec(s) for s in HEALTHY]
    return specs if floors else [s.ungated() for s in specs]


def _fleets_with_finding(
    values: np.ndarray, specs: list[SignalSpec], chunk: int, noise_shape: str
) -> np.ndarray:
    """Flags (replicas, fleets): replicas of ``values`` (replicas, fleets, signals) with any
    finding on the first pass, every signal in the family (level 1 % over all of them)."""
    from fleetwatch.scenarios.healthy_tables import as_columns

    n, f, k = values.shape
    level = signal_level(DetectorConfig().alpha, k)
    out = np.zeros((n, f), dtype=bool)
    for a in range(0, f, chunk):
        part = values[:, a : a + chunk]
        specs_all = specs * part.shape[1]
        _, _, flag = score_matrix(as_columns(part), specs_all, level, noise_shape=noise_shape)
        out[:, a : a + chunk] = flag.reshape(n, part.shape[1], k).any(axis=2)
    return out


def bench_calibration() -> list[str]:
    """False-alarm rates on healthy fleets (10 signals, noise of four shapes) with the floors and
    gates off (the statistical test alone, nominal 1 % family-wise) and on; detection rates."""
    from fleetwatch.scenarios.healthy_tables import SHAPES, SHARES, SIGNALS, fleet_values

    names = list(SIGNALS)
    on_specs, off_specs = _stat_specs(True), _stat_specs(False)
    # The test alone is judged on the continuous signals: shares drawn as binomial counts tie,
    # and where more than half tie (MAD = 0) only the floors can decide.
    cont = [j for j, s in enumerate(names) if s not in SHARES]
    rows = []
    for n in (3, 5, 10, 30, 1000):
        fleets = 2_000 if n == 1000 else 20_000
        chunk = max(1, 4_000_000 // (n * len(names)))
        t, c = time.perf_counter(), time.process_time()
        cells: dict[str, list[str]] = {"any": [], "normal": []}
        for shape in SHAPES:
            values = fleet_values(fleets, n, shape, seed=31 * n + SHAPES.index(shape))
            off_v = np.ascontiguousarray(values[:, :, cont])
            cont_specs = [off_specs[j] for j in cont]
            for noise_shape, out in cells.items():
                off = _fleets_with_finding(off_v, cont_specs, chunk, noise_shape).any(axis=0)
                on = _fleets_with_finding(values, on_specs, chunk, noise_shape).any(axis=0)
                out.append(f"{shape} {off.mean():.2%} / {on.mean():.2%}")
        rows.append(
            f"| false alarms, healthy fleets of {n:,}: test alone (8 continuous signals) / with "
            f"floors and gates (10 signals), `--noise-shape any` (the default) | "
            f"{' · '.join(cells['any'])} | at most 1 % for every shape / ≤ 1 % | "
            f"{fleets:,} fleets per shape; {time.perf_counter() - t:.1f} s "
            f"(CPU {time.process_time() - c:.1f} s) |"
        )
        rows.append(
            f"| same, `--noise-shape normal` | {' · '.join(cells['normal'])} | 1 % for normal "
            "noise / ≤ 1 % | |"
        )
    ttft, tpot, e2e = (names.index(s) for s in ("ttft", "tpot", "e2e"))
    for factor in (1.5, 2.0):
        for noise_shape in ("any", "normal"):
            found = []
            for n in (3, 5, 10, 30, 1000):
                fleets = 200 if n == 1000 else 2_000
                values = fleet_values(fleets, n, "lognormal", seed=7 * n)
                values[0, :, [ttft, tpot, e2e]] *= factor
                chunk = max(1, 4_000_000 // (n * len(names)))
                flag = _fleets_with_finding(values, on_specs, chunk, noise_shape)
                others = flag[1:].any(axis=0).mean()
                found.append(f"n={n:,} {flag[0].mean():.0%} (others {others:.1%})")
            rows.append(
                f"| detection, one replica {factor}x slower (TTFT, TPOT, e2e), lognormal 1 % noise, "
                f"`--noise-shape {noise_shape}` | {' · '.join(found)} | | share of fleets where "
                "it is found; where another is |"
            )
    return rows


def bench_rank_calibration() -> list[str]:
    """The detector as it runs on records: the per-request rank test on TTFT, TPOT and e2e (each
    replica's requests against the rest's), the cutoff on seven summary signals. False-alarm
    rates on healthy fleets whose requests are drawn whole, floors and gates off (nominal 1 %
    family-wise) and on; detection of planted slow replicas with the floors on."""
    from fleetwatch.fleet.outliers.stats.ranks import p_values, rank_z_columns
    from fleetwatch.scenarios.healthy_tables import (
        REQUEST_SHAPES,
        SAMPLED,
        SIGNALS,
        request_fleets,
        request_values,
    )

    names = list(SIGNALS)
    k = len(names)
    cols = [names.index(s) for s in SAMPLED]
    level = signal_level(DetectorConfig().alpha, k)
    on_specs, off_specs = _stat_specs(True), _stat_specs(False)

    def flags(
        fleets: int, n: int, per: int, shape: str, seed: int, floors: bool, slow: float = 1.0
    ):
        x, se, p = request_fleets(fleets, n, per, shape, seed=seed, slow=slow)
        specs = (on_specs if floors else off_specs) * fleets
        _, _, flag = score_matrix(x, specs, level, se if floors else None, p)
        return flag.reshape(n, fleets, k)

    rows = []
    for n in (3, 5, 10, 30, 1000):
        t, c = time.perf_counter(), time.process_time()
        off_fleets = 8_000 if n <= 10 else 3_000 if n == 30 else 200
        cells = []
        for i, shape in enumerate(REQUEST_SHAPES):
            off = flags(off_fleets, n, 20, shape, 100 * n + i, False).any(axis=(0, 2)).mean()
            per = 20 if n == 1000 else 50
            on = flags(200, n, per, shape, 7 * n + i, True).any(axis=(0, 2)).mean()
            cells.append(f"{shape} {off:.2%} / {on:.1%}")
        rows.append(
            f"| records: false alarms, healthy fleets of {n:,} (10 signals, 3 with requests): "
            f"test alone / with floors and gates | {' · '.join(cells)} | nominal 1 % / ≤ 1 % | "
            f"{off_fleets:,} / 200 fleets per shape; {time.perf_counter() - t:.1f} s "
            f"(CPU {time.process_time() - c:.1f} s) |"
        )
    found = []
    for name, n, per, slow, fleets in (
        ("n=3, one 2x slower", 3, 50, 2.0, 200),
        ("n=4, one 5x slower (the demo's)", 4, 50, 5.0, 200),
        ("n=1,000, one 1.5x slower", 1000, 200, 1.5, 10),
    ):
        cells = []
        for i, shape in enumerate(REQUEST_SHAPES):
            flag = flags(fleets, n, per, shape, 40 + i, True, slow)
            hit = flag[0][:, cols].any(axis=1).mean()
            cells.append(f"{shape} {hit:.0%} (others {flag[1:].any(axis=(0, 2)).mean():.1%})")
        found.append(
            f"| records: {name}, {per} requests each | {' · '.join(cells)} | | {fleets} fleets |"
        )
    samples, groups = request_values(200, 5, 50, "lognormal", seed=33)
    samples[groups <= 1] *= 2.0
    p = p_values(rank_z_columns(samples, groups, 5), 1.0)
    both = (p[:2] <= level / 5).all(axis=0).mean()
    found.append(
        f"| records: masking, 2 of 5 replicas 2x slower, 50 requests each | both found on a "
        f"signal {both:.1%} of 600 | | |"
    )
    return rows + found


def bench_histogram_calibration() -> list[str]:
    """Healthy fleets read from vLLM's histogram buckets (Prometheus, ``/metrics`` snapshots):
    share of fleets with any finding from the statistical test alone, TTFT/TPOT/e2e, 100 requests
    a replica. Ours: the rank test on every per-request histogram's buckets beside the bucket
    rule; baselines: TPOT judged by the cutoff across interpolated p50s, with and without the
    bucket rule (TTFT and e2e rank-tested in all three)."""
    from dataclasses import replace as _replace

    from fleetwatch.core.profiles import Signal, get_profile
    from fleetwatch.fleet.outliers.signals import signal_spec
    from fleetwatch.scenarios.healthy_tables import REQUEST_SHAPES, histogram_fleet

    vllm = get_profile("vllm")
    bounds = {
        name: tuple(vllm.metric(sig).buckets)
        for name, sig in (("ttft", Signal.TTFT), ("tpot", Signal.TPOT), ("e2e", Signal.E2E))
    }
    alone = DetectorConfig(
        min_requests=10, signals={s: signal_spec(s).ungated() for s in ("ttft", "tpot", "e2e")}
    )
    fleets = 300
    rows = []
    for n in (3, 10, 30):
        for shape in REQUEST_SHAPES:
            rates = []
            for per_request, gate in (
                (("ttft", "tpot", "e2e"), True),
                (("ttft", "e2e"), True),
                (("ttft", "e2e"), False),
            ):
                rng = np.random.default_rng(900 + n)
                hits = 0
                for _ in range(fleets):
                    t = histogram_fleet(n, 100, shape, bounds, rng=rng, per_request=per_request)
                    hits += bool(detect(t if gate else _replace(t, bins={}), alone).findings)
                rates.append(hits / fleets)
            rows.append(
                f"| histograms: {n} replicas, {shape}, test alone ({fleets} fleets) | "
                f"{rates[0]:.1%} | TPOT by cutoff: {rates[1]:.1%} with the bucket rule, "
                f"{rates[2]:.1%} without | nominal 1 % |"
            )
    return rows


def bench_share_calibration() -> list[str]:
    """The error rate of healthy fleets (every replica fails 0.4 % of its 300–3,000 requests,
    binomial counts) and with replica 0 failing 2 %: share of fleets with any finding from the
    test alone at 1 %. Ours: each replica's counts against the rest's (``shares``); baseline:
    the cutoff across the replicas' rates."""
    from fleetwatch.fleet.outliers.signals import signal_spec
    from fleetwatch.fleet.outliers.stats.shares import share_counts

    spec = [signal_spec("error_rate").ungated()]
    rows = []
    for replicas in (3, 5, 10, 30, 200):
        rng = np.random.default_rng(100 + replicas)
        fleets, alpha = 2000, 0.01
        n = rng.integers(300, 3000, (fleets, replicas)).astype(float)
        k = rng.binomial(n.astype(int), 0.004).astype(float)
        bad = k.copy()
        bad[:, 0] = rng.binomial(n[:, 0].astype(int), 0.02)
        null = sum(
            bool((share_counts(k[f] / n[f], n[f]).p <= alpha / replicas).any())
            for f in range(fleets)
        )
        found = sum(
            bool(share_counts(bad[f] / n[f], n[f]).p[0] <= alpha / replicas) for f in range(fleets)
        )
        _, _, flag = score_matrix((k / n).T, spec * fleets, alpha)
        _, _, flag_bad = score_matrix((bad / n).T, spec * fleets, alpha)
        rows.append(
            f"| error rate by counts, {replicas} replicas: healthy / one at 5x ({fleets} fleets) | "
            f"{null / fleets:.2%} / {found / fleets:.1%} | cutoff across rates "
            f"{flag.any(axis=0).mean():.2%} / {flag_bad[0].mean():.1%} | nominal 1 % |"
        )
    return rows


def main() -> None:
    import os

    from benchmarks.machine import cpu

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {cpu()}, 1-minute load average {load:.1f} at start")
    print("| case | ours | baseline | notes |")
    print("|---|---|---|---|")
    # FLEETWATCH_BENCH_ONLY=outliers (names without "bench_", comma-separated) runs only those.
    only = {s for s in os.environ.get("FLEETWATCH_BENCH_ONLY", "").split(",") if s}
    for fn in (
        bench_outliers,
        bench_tail,
        bench_records_pipeline,
        bench_false_positives,
        bench_synthetic_false_positives,
        bench_calibration,
        bench_rank_calibration,
        bench_histogram_calibration,
        bench_share_calibration,
    ):
        if only and fn.__name__.removeprefix("bench_") not in only:
            continue
        for line in fn():
            print(line, flush=True)
    print(f"1-minute load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
