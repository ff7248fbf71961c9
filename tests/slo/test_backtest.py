"""Offline evaluation: window counts, burn rates, firing intervals, delay, reset, guard."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetwatch.records import RequestRecord, Status, to_frame
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from fleetwatch.slo.backtest import backtest
from fleetwatch.slo.burn import window_counts
from fleetwatch.slo.events import SLIEvents, sli_events
from fleetwatch.slo.load import load_spec

H = 3600.0


def _slo(extra: str = "", sli: str = "{kind: availability}", objective: float = 99.9):
    return load_spec(
        f"service: s\nevaluation_interval: 1m\nslos: [{{name: a, objective: {objective}, sli: {sli}{extra}}}]"
    ).slos[0]


def test_window_counts_are_the_events_in_the_half_open_window_before_each_evaluation() -> None:
    rng = np.random.default_rng(1)
    times = np.sort(rng.uniform(0, 7200, 3000))
    times[:5] = [60.0, 120.0, 120.0, 600.0, 3600.0]  # on the grid: count at that evaluation
    bad = rng.random(times.size) < 0.1
    tl = window_counts(
        SLIEvents(np.sort(times), bad[np.argsort(times)]), [300, 3600], 60, start_s=0, end_s=7200
    )
    t_sorted, b_sorted = np.sort(times), bad[np.argsort(times)]
    for k in (0, 1, 2, 5, 10, 61, 119, 120):
        t = tl.times[k]
        for w in (60, 300, 3600):
            inside = (t_sorted > t - w) & (t_sorted <= t)
            assert tl.total[w][k] == inside.sum()
            assert tl.bad[w][k] == (inside & b_sorted).sum()


def test_error_ratio_is_nan_without_events_so_no_alert_can_fire() -> None:
    tl = window_counts(
        SLIEvents(np.array([100.0]), np.array([True])), [300], 60, start_s=0, end_s=1200
    )
    ratio = tl.ratio(300)
    assert ratio[2] == 1.0 and np.isnan(ratio[-1])


def test_a_total_outage_pages_then_resets_with_delay_and_reset_times() -> None:
    frame = synthetic_records(
        np.random.default_rng(3), n=40_000, start_s=0, duration_s=8 * H,
        incidents=[Incident(4 * H, 4 * H + 1800, error_ratio=1.0)],
    )  # fmt: skip
    bt = backtest(_slo(), frame, 60, start_s=0, end_s=8 * H)
    pages = [i for i in bt.intervals if i.severity == "page"]
    assert len(pages) == 1
    page = pages[0]
    # 14.4x over 1h at 100% errors: 0.0144 h = 52 s of outage, so the first evaluation after it.
    assert 4 * H < page.start_s <= 4 * H + 120
    assert page.detection_delay_s is not None and 0 < page.detection_delay_s <= 120
    # Resets once the 5-minute window (the 30-minute one for the 6x condition) has seen recovery.
    assert page.end_s is not None and 4 * H + 1800 < page.end_s <= 4 * H + 1800 + 1800 + 60
    assert page.reset_s is not None and 0 < page.reset_s <= 1800 + 60
    assert page.peak_burn > 100
    tickets = [i for i in bt.intervals if i.severity == "ticket" and i.start_s >= 4 * H]
    assert len(tickets) == 1 and tickets[0].start_s <= 4 * H + 600


def test_healthy_traffic_fires_nothing() -> None:
    frame = synthetic_records(np.random.default_rng(4), n=40_000, start_s=0, duration_s=8 * H,
                              base_error_ratio=0.0002)  # fmt: skip
    bt = backtest(_slo(), frame, 60)
    assert bt.intervals == ()
    assert not any(t.firing.any() for t in bt.tracks)


def test_a_slow_burn_opens_a_ticket_but_no_page() -> None:
    frame = synthetic_records(
        np.random.default_rng(5), n=200_000, start_s=0, duration_s=24 * H,
        incidents=[Incident(6 * H, 24 * H, error_ratio=0.004)], base_error_ratio=0.0,
    )  # fmt: skip
    bt = backtest(_slo(), frame, 60, start_s=0)
    assert [i.severity for i in bt.intervals] == ["ticket"]


def _sparse(n_ok: int, n_bad: int) -> pd.DataFrame:
    records = [
        RequestRecord(request_id=f"r{i}", replica="a", model="m", arrival_s=i * 360.0,
                      finished_s=i * 360.0 + 1, status=Status.ERROR if i == n_ok else Status.OK)
        for i in range(n_ok + n_bad)
    ]  # fmt: skip
    return to_frame(records)


def test_min_events_guard_silences_burn_alerts_at_low_traffic() -> None:
    frame = _sparse(20, 1)  # 10 requests an hour, one failure: a 1000x burn in the 5m window
    unguarded = backtest(_slo(), frame, 60)
    assert any(i.severity == "page" for i in unguarded.intervals)
    guarded = backtest(_slo(", min_events: 100"), frame, 60)
    assert guarded.intervals == ()


def test_latency_and_goodput_events_follow_histogram_semantics() -> None:
    records = [
        RequestRecord(request_id="a", replica="r", model="m", arrival_s=0, first_token_s=0.5,
                      finished_s=1.0, output_tokens=11),  # ttft 0.5 (<= bound: good), tpot 0.05
        RequestRecord(request_id="b", replica="r", model="m", arrival_s=0, first_token_s=0.6,
                      finished_s=0.6, output_tokens=1),  # ttft 0.6: bad; tpot undefined
        RequestRecord(request_id="c", replica="r", model="m", arrival_s=0, finished_s=0.2,
                      status=Status.ERROR),  # no first token: not a TTFT event
    ]  # fmt: skip
    frame = to_frame(records)
    ttft = sli_events(_slo(sli="{kind: latency, signal: ttft, threshold: 0.5}"), frame)
    assert ttft.bad.tolist() == [False, True]
    goodput = sli_events(_slo(sli="{kind: goodput, ttft: 0.6, tpot: 0.05}"), frame)
    assert goodput.bad.tolist() == [False, False, True]


def test_per_class_selector_keeps_only_that_class() -> None:
    frame = synthetic_records(np.random.default_rng(6), n=1000, start_s=0, duration_s=H,
                              classes=("chat", "batch"))  # fmt: skip
    ev = sli_events(_slo(", selector: {traffic_class: batch}"), frame)
    assert len(ev) == int((frame["traffic_class"] == "batch").sum())


def test_evaluation_grid_is_aligned_to_the_step() -> None:
    tl = window_counts(SLIEvents(np.array([125.0, 301.0]), np.array([False, True])), [300], 60)
    assert tl.times.tolist() == [120.0, 180.0, 240.0, 300.0, 360.0]
    assert tl.total[300].tolist() == [0, 1, 1, 1, 2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_burn_rates_match_a_plain_pandas_rolling_window(seed: int) -> None:
    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(0, 6 * H, 5000))
    bad = rng.random(times.size) < 0.05
    tl = window_counts(SLIEvents(times, bad), [300, 3600], 60, start_s=0, end_s=6 * H)
    bins = np.ceil(times / 60).astype(int)
    per_step = pd.DataFrame({"bad": bad.astype(int), "total": 1}).groupby(bins).sum()
    per_step = per_step.reindex(range(tl.times.size), fill_value=0)
    for w in (300, 3600):
        rolled = per_step.rolling(w // 60, min_periods=1).sum()
        assert (rolled["total"].to_numpy() == tl.total[w]).all()
        assert (rolled["bad"].to_numpy() == tl.bad[w]).all()


@settings(max_examples=60, deadline=None)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=4000), min_size=1, max_size=80),
    fractions=st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.999]), min_size=1, max_size=80),
    long_steps=st.integers(min_value=2, max_value=30),
    short_steps=st.integers(min_value=1, max_value=2),
)
def test_window_counts_equal_brute_force_counting(
    offsets: list[int], fractions: list[float], long_steps: int, short_steps: int
) -> None:
    step = 10
    n = min(len(offsets), len(fractions))
    times = np.sort(np.array([o + f for o, f in zip(offsets[:n], fractions[:n], strict=True)]))
    bad = (np.arange(n) % 3) == 0
    windows = [long_steps * step, short_steps * step]
    tl = window_counts(SLIEvents(times, bad), windows, step, start_s=0, end_s=4100)
    for k in range(0, tl.times.size, 7):
        t = tl.times[k]
        for w in windows:
            inside = (times > t - w) & (times <= t)
            assert tl.total[w][k] == inside.sum()
            assert tl.bad[w][k] == (inside & bad).sum()
