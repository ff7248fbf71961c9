"""The probe against the truth: its TTFT and ITL percentiles beside the scripted server's own write
instants, at 256 and 1,000 concurrent streams with a 20 ms token gap, in one process and spread
over worker processes. Used by ``bench_serve``.

The scripted server runs in its own process and shares the system-wide monotonic clock with the
probe, so a chunk's write instant and the probe's receive instant are directly comparable. Truth
per request: TTFT = first write - the probe's send; ITL = gaps between writes (one token per
chunk). Error = probe percentile - true percentile over the same requests. Beside each error: the
probe's verdict (``ok`` or ``client-bound``) and its worst per-worker p99 loop lag.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from dataclasses import dataclass

import numpy as np

from benchmarks.machine import cpu
from fleetwatch.engine_probe.probe.client import Prober
from fleetwatch.engine_probe.probe.clientload import auto_workers
from fleetwatch.engine_probe.probe.measure import itl_samples
from fleetwatch.engine_probe.probe.runner import ProbePlan, make_prompts, run_plan
from fleetwatch.engine_probe.probe.stats import distribution

FIRST_S, GAP_S, CHUNKS = 0.05, 0.02, 32
SPREAD_S = 0.25
"""All of a run's requests are due within this window: every stream overlaps every other."""


@dataclass(frozen=True, slots=True)
class Accuracy:
    ttft_p50_err: float
    ttft_p99_err: float
    itl_p50_err: float
    itl_p99_err: float
    rx_delay_p99: float
    """p99 of (probe receive - server write) over every chunk."""
    loop_lag_p99: float
    cpu_fraction: float
    verdict: str
    ok: int


def _truth(url: str) -> dict[str, list[float]]:
    with urllib.request.urlopen(f"{url}/v1/scripted/truth", timeout=60) as resp:
        data = json.load(resp)
    return {p: e for p, e in zip(data["prompts"], data["emitted"], strict=True)}


def measure(url: str, streams: int, workers: int, seed: int, *, stamp: bool = True) -> Accuracy:
    """One run; ``stamp=False`` (one process only) takes receive times in the reading task, as
    the probe did before it stamped reads at the socket: the A/B for that change."""
    defaults = Prober.__init__.__kwdefaults__
    assert defaults is not None
    defaults["stamp_reads"] = stamp
    try:
        return _measure(url, streams, workers, seed)
    finally:
        defaults["stamp_reads"] = True


def _measure(url: str, streams: int, workers: int, seed: int) -> Accuracy:
    plan = ProbePlan(
        mode="constant",
        levels=(streams / SPREAD_S,),
        requests=streams,
        prompt_tokens=24,
        max_tokens=CHUNKS + 1,
        model="scripted",
        api="completions",
        seed=seed,
        workers=workers,
        timeout_s=120,
    )
    run = asyncio.run(run_plan(url, plan))
    level = run.levels[0]
    truth = _truth(url)
    ttft_p, ttft_t, itl_p, itl_t, rx = [], [], [], [], []
    prompts = make_prompts(streams, plan.prompt_tokens, np.random.default_rng(seed))
    for r in level.results:
        writes = truth.get(prompts[r.index])
        if not r.ok or writes is None or r.first_token_s is None:
            continue
        ttft_p.append(r.first_token_s - r.sent_s)
        ttft_t.append(writes[0] - r.sent_s)
        itl_p.extend(r.itl_s())
        itl_t.extend(itl_samples(writes, [1] * len(writes)))
        rx.extend(got - wrote for got, wrote in zip(r.chunk_times_s, writes, strict=False))
    dp, dt = distribution(ttft_p), distribution(ttft_t)
    ip, it = distribution(itl_p), distribution(itl_t)
    client = level.client
    assert client is not None
    assert len(ttft_p) == level.summary.ok, "every ok request paired with the server's record"
    return Accuracy(
        ttft_p50_err=dp.p50 - dt.p50,
        ttft_p99_err=dp.p99 - dt.p99,
        itl_p50_err=ip.p50 - it.p50,
        itl_p99_err=ip.p99 - it.p99,
        rx_delay_p99=distribution(rx).p99,
        loop_lag_p99=client.worst_lag_p99_s,
        cpu_fraction=max(client.cpu_fraction),
        verdict=client.verdict,
        ok=level.summary.ok,
    )


def accuracy(streams_list: tuple[int, ...] = (16, 256, 1000), rounds: int = 3) -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetwatch.engine_probe.probe.scripted_server",
            str(FIRST_S),
            str(GAP_S),
            str(CHUNKS),
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        print(
            f"\nprobe vs the server's own write times (scripted server in its own process: first "
            f"token {FIRST_S * 1e3:.0f} ms, then {CHUNKS} tokens {GAP_S * 1e3:.0f} ms apart; "
            f"all streams due within {SPREAD_S * 1e3:.0f} ms; {rounds} interleaved rounds, medians; "
            f"load average before: {os.getloadavg()[0]:.2f})"
        )
        print(
            f"{'streams':>8} {'workers':>12} {'TTFT p50 err':>13} {'TTFT p99 err':>13} "
            f"{'ITL p50 err':>12} {'ITL p99 err':>12} {'rx-write p99':>13} {'loop lag p99':>13} "
            f"{'cpu/wall':>9} {'verdict (per round)':>30}"
        )
        for n in streams_list:
            configs = [(1, False), (1, True), (max(2, auto_workers(n)), True)]
            rows: dict[tuple[int, bool], list[Accuracy]] = {c: [] for c in configs}
            seed = 1000 * n
            for _ in range(rounds):
                for w, stamp in configs:
                    seed += 1
                    rows[w, stamp].append(measure(url, n, w, seed, stamp=stamp))
            for w, stamp in configs:
                got = rows[w, stamp]
                label = f"{w}{'' if stamp else ' (reader)'}"

                def med(attr: str, got: list[Accuracy] = got) -> float:
                    return statistics.median(getattr(a, attr) for a in got) * 1e3

                verdicts = ",".join("bound" if a.verdict != "ok" else "ok" for a in got)
                print(
                    f"{n:>8} {label:>12} {med('ttft_p50_err'):>+10.2f} ms {med('ttft_p99_err'):>+10.2f} ms "
                    f"{med('itl_p50_err'):>+9.2f} ms {med('itl_p99_err'):>+9.2f} ms "
                    f"{med('rx_delay_p99'):>10.2f} ms {med('loop_lag_p99'):>10.2f} ms "
                    f"{statistics.median(a.cpu_fraction for a in got):>9.2f} {verdicts:>30}"
                )
        print(f"load average after: {os.getloadavg()[0]:.2f}; CPU: {cpu()}")
        print(
            "(reader): receive times taken in the reading task instead of at the socket read. "
            "verdict: the probe's own call (client-bound when its p99 loop lag > min(10 % of ITL "
            "p50, 1 ms)); cpu/wall: the busiest worker's CPU share (low with high lag: other "
            "processes held the cores)"
        )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    accuracy()
