"""SLI events at the instants the exporter observes them, and the binning both paths agree on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.records import STATUS_DTYPE, RequestRecord, to_frame
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from fleetwatch.slo.backtest import backtest
from fleetwatch.slo.bins import BinCounts
from fleetwatch.slo.burn import window_counts
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.events import SLIEvents, sli_events
from fleetwatch.slo.load import load_spec

H = 3600.0
WIDTH = len(ITL_BOUNDS) + 1


def _slo(sli: str, extra: str = ""):
    return load_spec(
        f"service: s\nevaluation_interval: 1m\nslos: [{{name: a, objective: 99, sli: {sli}{extra}}}]"
    ).slos[0]


def _gaps(**per_bound: int) -> tuple[int, ...]:
    counts = [0] * WIDTH
    for name, n in per_bound.items():
        counts[ITL_BOUNDS.index(float(name[1:].replace("_", ".")))] = n
    return tuple(counts)


def test_ttft_counts_at_the_first_token_and_tpot_at_the_finish() -> None:
    # A slow first token at 10 s, then a decode of 10 minutes.
    r = RequestRecord(request_id="a", replica="r", model="m", arrival_s=0.0, first_token_s=10.0,
                      finished_s=610.0, output_tokens=601)  # fmt: skip
    ttft = sli_events(_slo("{kind: latency, signal: ttft, threshold: 0.5}"), to_frame([r]))
    assert ttft.times.tolist() == [10.0] and ttft.bad.tolist() == [True]
    tpot = sli_events(_slo("{kind: latency, signal: tpot, threshold: 0.5}"), to_frame([r]))
    assert tpot.times.tolist() == [610.0] and tpot.bad.tolist() == [True]


def test_itl_counts_every_gap_one_slow_gap_in_198() -> None:
    # The example: one slow gap among 198; the exporter's bad ratio is 1/198, not 1.
    r = RequestRecord(request_id="a", replica="r", model="m", arrival_s=0.0, first_token_s=0.1,
                      finished_s=5.0, output_tokens=199, max_itl_s=0.3,
                      itl_buckets=_gaps(b0_025=197, b0_3=1))  # fmt: skip
    ev = sli_events(_slo("{kind: latency, signal: itl, threshold: 0.1}"), to_frame([r]))
    assert ev.count is not None and ev.count.tolist() == [198] and ev.bad.tolist() == [1]
    tl = window_counts(ev, [300], 60, start_s=0, end_s=60)
    assert tl.ratio(300)[-1] == pytest.approx(1 / 198)
    exact = sli_events(_slo("{kind: latency, signal: itl, threshold: 0.3}"), to_frame([r]))
    assert exact.bad.tolist() == [0]  # le is inclusive: a gap of exactly the bound is good


def test_itl_needs_the_gap_counts_and_a_bucket_bound() -> None:
    old = RequestRecord(request_id="a", replica="r", model="m", arrival_s=0.0, finished_s=1.0,
                        output_tokens=3, max_itl_s=0.2)  # fmt: skip
    with pytest.raises(SLOSpecError, match=r"itl_buckets.*1 of 1 selected records have none"):
        sli_events(_slo("{kind: latency, signal: itl, threshold: 0.1}"), to_frame([old]))
    with pytest.raises(SLOSpecError, match="gap-bucket bounds"):
        sli_events(_slo("{kind: latency, signal: itl, threshold: 0.11}"), to_frame([old]))


@settings(max_examples=80, deadline=None)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=400),
    fraction=st.sampled_from([0.0, 0.5, 0.999, 1e-9]),
    bin_s=st.sampled_from([1, 10, 30]),
    batches=st.integers(min_value=1, max_value=4),
)
def test_search_and_bincount_paths_and_batches_agree(
    offsets: list[int], fraction: float, bin_s: int, batches: int
) -> None:
    times = np.sort(np.asarray(offsets, dtype=np.float64) + fraction + 1.7e9)
    bad = (np.arange(times.size) % 5) == 0
    sorted_counts = BinCounts(bin_s)
    sorted_counts.add(SLIEvents(times, bad))
    order = np.random.default_rng(times.size).permutation(times.size)
    shuffled = BinCounts(bin_s)
    for part in np.array_split(order, batches):
        shuffled.add(SLIEvents(times[part], bad[part]))
    lo = min(sorted_counts.first, shuffled.first)
    hi = max(sorted_counts.last, shuffled.last)
    for a, b in zip(sorted_counts.window(lo, hi), shuffled.window(lo, hi), strict=True):
        assert (a == b).all()
    # and both agree with counting (t - w, t] directly, at every bin edge
    total, bad_counts = sorted_counts.window(lo, hi)
    edges = np.arange(lo, hi + 1) * float(bin_s)
    expected = np.searchsorted(times, edges, side="right")
    assert (np.cumsum(total) == expected).all()
    assert (np.cumsum(bad_counts) == np.searchsorted(times[bad], edges, side="right")).all()


def test_the_search_path_is_taken_for_dense_sorted_times_and_matches() -> None:
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0, 600, 50_000))
    times[:100] = np.arange(100) * 6.0  # exactly on bin edges
    times.sort()
    bad = rng.random(times.size) < 0.01
    dense = BinCounts(30)
    dense.add(SLIEvents(times, bad))
    counted = BinCounts(30)
    counted.add(SLIEvents(times[::-1].copy(), bad[::-1].copy()))  # unsorted: bincount path
    for a, b in zip(dense.window(-1, 21), counted.window(-1, 21), strict=True):
        assert (a == b).all()


def test_detection_delay_runs_from_the_first_bad_event_not_from_the_window() -> None:
    # A slow burn (0.4% errors: 4x the budget) from 6 h: the ticket fires hours later; the window
    # figure only counts from when the 2 h window first exceeded 1x.
    frame = synthetic_records(
        np.random.default_rng(5), n=200_000, start_s=0, duration_s=24 * H,
        incidents=[Incident(6 * H, 24 * H, error_ratio=0.004)], base_error_ratio=0.0,
    )  # fmt: skip
    spec = load_spec(
        "service: s\nevaluation_interval: 1m\nslos: [{name: a, objective: 99.9, "
        "sli: {kind: availability}}]"
    ).slos[0]
    bt = backtest(spec, frame, 60, start_s=0)
    (ticket,) = bt.intervals
    assert ticket.severity == "ticket" and ticket.start_s > 7 * H
    assert ticket.bad_since_s is not None and 6 * H - 60 <= ticket.bad_since_s <= 6 * H + 300
    assert ticket.detection_delay_s == pytest.approx(ticket.start_s - ticket.bad_since_s)
    assert ticket.window_delay_s is not None
    # here the 2 h window first passed 1x 29 minutes after the errors began
    assert ticket.window_delay_s <= ticket.detection_delay_s - 1200


@settings(max_examples=60, deadline=None)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=300),
    order=st.sampled_from(["sorted", "shuffled", "reversed", "nearly"]),
    chunk=st.sampled_from([4, 16, 64]),
    weighted=st.booleans(),
)
def test_chunked_counting_equals_direct_counting(
    offsets: list[int], order: str, chunk: int, weighted: bool
) -> None:
    times = np.asarray(offsets, dtype=np.float64) * 0.7 + 1e6
    times.sort()
    if order == "shuffled":
        times = np.random.default_rng(times.size).permutation(times)
    elif order == "reversed":
        times = times[::-1].copy()
    elif order == "nearly" and times.size > 3:
        times[[1, -2]] = times[[-2, 1]]
    count = (np.arange(times.size) % 4) if weighted else None
    bad = (count // 2) if count is not None else (np.arange(times.size) % 3 == 0)
    counts = BinCounts(10, chunk=chunk)
    counts.add(SLIEvents(times, bad, count))
    lo, hi = counts.span() or (0, 0)
    total, bad_counts = counts.window(lo - 1, hi + 1)
    edges = np.arange(lo - 1, hi + 2) * 10.0
    weight = np.ones(times.size) if count is None else count
    expect_total = [weight[times <= e].sum() for e in edges]
    expect_bad = [np.asarray(bad, dtype=float)[times <= e].sum() for e in edges]
    assert np.cumsum(total).tolist() == expect_total
    assert np.cumsum(bad_counts).tolist() == expect_bad


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    error=st.sampled_from([0.0005, 0.002, 0.01, 0.05]),
    min_events=st.sampled_from([0, 30]),
)
def test_skipped_runs_never_hold_a_firing_evaluation(
    seed: int, error: float, min_events: int
) -> None:
    from fleetwatch.slo.backtest import alert_firing

    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(0, 12 * H, 20_000))
    burst = rng.uniform(0, 11 * H)
    p = np.where((times > burst) & (times < burst + rng.uniform(60, 3 * H)), 0.2, error)
    events = SLIEvents(times, rng.random(times.size) < p)
    slo = load_spec(
        "service: s\nevaluation_interval: 30s\nslos: [{name: a, objective: 99.9, period: 1d, "
        f"min_events: {min_events}, sli: {{kind: availability}}}}]"
    ).slos[0]
    tl = window_counts(events, slo.window_seconds(), 30, start_s=0, end_s=12 * H)
    for sev in ("page", "ticket"):
        windows = [w for w in slo.windows if w.severity == sev]
        brute = np.zeros(tl.times.size, dtype=bool)
        with np.errstate(invalid="ignore"):
            for w in windows:
                thr = slo.threshold(w)
                cond = (tl.ratio(w.long_s) > thr) & (tl.ratio(w.short_s) > thr)
                brute |= cond & (tl.counts(w.long_s)[0] >= min_events)
        assert (alert_firing(slo, tl, windows) == brute).all()


def _truth(times: np.ndarray, bad: np.ndarray, bin_s: int, counts: BinCounts) -> None:
    """``counts`` hold, at every bin edge k * bin_s, the events and bad events at or before it."""
    lo, hi = counts.span() or (0, 0)
    total, bad_counts = counts.window(lo - 1, hi + 1)
    edges = np.arange(lo - 1, hi + 2) * float(bin_s)
    ordered = np.sort(times)
    assert (np.cumsum(total) == np.searchsorted(ordered, edges, side="right")).all()
    bad_times = np.sort(times[bad])
    assert (np.cumsum(bad_counts) == np.searchsorted(bad_times, edges, side="right")).all()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=3000),
    sorted_share=st.sampled_from([0.0, 0.3, 0.9, 1.0]),
    bin_s=st.sampled_from([1, 7, 30]),
    base=st.sampled_from([-5000.0, 0.0, 1.7e9]),
    bad_share=st.sampled_from([0.0, 0.01, 0.5, 1.0]),
    chunk=st.sampled_from([64, 256, 1024]),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_searched_chunks_then_binned_chunks_count_every_edge_exactly(
    n: int,
    sorted_share: float,
    bin_s: int,
    base: float,
    bad_share: float,
    chunk: int,
    seed: int,
) -> None:
    # Dense times (many per bin, a fifth exactly on a bin edge), ascending up to a point and
    # shuffled after it: the chunks before it are counted by search, the rest bin by bin.
    rng = np.random.default_rng(seed)
    span = max(1, n // 40) * bin_s
    times = np.sort(base + rng.uniform(0, span, n))
    on_edge = rng.random(n) < 0.2
    times[on_edge] = base + rng.integers(0, span // bin_s + 1, int(on_edge.sum())) * bin_s
    times.sort()
    cut = int(n * sorted_share)
    times[cut:] = rng.permutation(times[cut:])
    bad = rng.random(n) < bad_share
    counts = BinCounts(bin_s, chunk=chunk)
    counts.add(SLIEvents(times, bad))
    by_position = BinCounts(bin_s, chunk=chunk)  # bad events by position, as sli_events gives
    by_position.add(SLIEvents(times, None, bad_at=np.flatnonzero(bad)))
    reference = BinCounts(bin_s, chunk=chunk)
    for part in np.array_split(rng.permutation(n), 3):
        reference.add(SLIEvents(times[part], bad[part]))
    _truth(times, bad, bin_s, counts)
    _truth(times, bad, bin_s, by_position)
    _truth(times, bad, bin_s, reference)


@pytest.mark.parametrize(
    "bad", [("error",), ("error", "rejected"), ("aborted", "rejected", "error")]
)
def test_availability_takes_bad_events_by_position_across_chunks(bad: tuple[str, ...]) -> None:
    # the positions are found a chunk at a time from the status codes; a small chunk puts bad
    # records on both sides of every chunk boundary
    rng = np.random.default_rng(8)
    n = 10_007
    status = rng.choice(["ok", "error", "aborted", "rejected"], n, p=[0.7, 0.1, 0.1, 0.1])
    status[1023:1026] = "error"
    frame = pd.DataFrame({
        "finished_s": np.sort(rng.uniform(0, 7200, n)),
        "status": pd.Categorical(status, dtype=STATUS_DTYPE),
    })  # fmt: skip
    spec = _slo(f"{{kind: availability, bad: [{', '.join(bad)}]}}")
    events = sli_events(spec, frame, chunk=1024)
    assert events.bad is None and events.bad_at is not None
    assert events.bad_at.tolist() == np.flatnonzero(np.isin(status, bad)).tolist()
    plain = sli_events(spec, {"finished_s": frame["finished_s"].to_numpy(), "status": status})
    assert plain.bad_positions().tolist() == events.bad_at.tolist()


def test_events_take_bad_flags_or_bad_positions_not_both() -> None:
    times = np.arange(3.0)
    for bad, at, count in (
        (None, None, None),
        (np.zeros(3, dtype=bool), np.array([1]), None),
        (None, np.array([1]), np.ones(3, dtype=np.int64)),
    ):
        with pytest.raises(ValueError, match="one"):
            SLIEvents(times, bad, count, bad_at=at)


@pytest.mark.parametrize("runs", [2, 5])
def test_records_joined_from_files_in_finish_order_go_back_to_the_search(
    runs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each replica's file is in finish order; joined, the times fall back at every file's start.
    # The chunk that holds a join is binned; the chunks after it are searched again.
    import fleetwatch.slo.bins as bins_module

    rng = np.random.default_rng(runs)
    parts = []
    for _ in range(runs):
        t = rng.uniform(0, 3000, 4096)
        t[::97] = np.ceil(t[::97] / 30) * 30  # some exactly on a bin edge
        parts.append(np.sort(t))
    times = np.concatenate(parts)
    bad = rng.random(times.size) < 0.05
    searched: list[int] = []
    search = bins_module.BinCounts._search

    def counted(self: BinCounts, x: np.ndarray, lo: int, hi: int) -> np.ndarray | None:
        searched.append(x.size)
        return search(self, x, lo, hi)

    monkeypatch.setattr(bins_module.BinCounts, "_search", counted)
    counts = BinCounts(30, chunk=1024)
    counts.add(SLIEvents(times, None, bad_at=np.flatnonzero(bad)))
    _truth(times, bad, 30, counts)
    # every chunk is searched but the ones holding a join (4096 is a multiple of 1024: none)
    assert len(searched) == times.size // 1024
    shifted = np.concatenate([parts[0][:1000], times])  # joins now inside chunks
    searched.clear()
    counts = BinCounts(30, chunk=1024)
    counts.add(SLIEvents(shifted, np.concatenate([np.zeros(1000, dtype=bool), bad])))
    _truth(shifted, np.concatenate([np.zeros(1000, dtype=bool), bad]), 30, counts)
    assert len(searched) == -(-shifted.size // 1024) - runs


@pytest.mark.parametrize("where", [0, -1])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_times_that_are_not_finite_are_refused_on_either_path(where: int, value: float) -> None:
    ascending = np.linspace(1.7e9, 1.7e9 + 600, 5000)
    for times in (ascending, ascending[::-1].copy()):
        times = times.copy()
        times[where] = value
        with pytest.raises(SLOSpecError, match="finite"):
            BinCounts(30).add(SLIEvents(times, np.zeros(times.size, dtype=bool)))


@pytest.mark.parametrize("which", ["first", "last", "both"])
def test_bad_events_at_the_ends_of_each_bin_land_in_that_bin(which: str) -> None:
    # ascending and dense (the search path): a bad event that opens or closes a bin, including
    # one exactly on the edge, counts in that bin
    rng = np.random.default_rng(4)
    times = np.sort(np.concatenate([rng.uniform(0, 3000, 20_000), np.arange(0, 3001, 30.0)]))
    k = np.ceil(times / 30)
    opens = np.concatenate(([True], k[1:] != k[:-1]))
    closes = np.concatenate((k[1:] != k[:-1], [True]))
    bad = {"first": opens, "last": closes, "both": opens | closes}[which]
    counts = BinCounts(30, chunk=1024)
    counts.add(SLIEvents(times, bad))
    _truth(times, bad, 30, counts)
    assert (counts.window(1, 100)[1] == {"first": 1, "last": 1, "both": 2}[which]).all()
