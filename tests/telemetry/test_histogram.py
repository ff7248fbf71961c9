"""The batched histogram bins exactly like prometheus_client's Histogram."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from fleetwatch.core.profiles import FLEETWATCH, Signal
from fleetwatch.telemetry.metrics import BatchedHistogram

BOUNDS = FLEETWATCH.metric(Signal.TTFT).buckets


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=5000, allow_nan=False), max_size=200))
def test_same_buckets_sum_and_count_as_prometheus_client(values):
    reg = CollectorRegistry()
    ref = Histogram("h", "h", buckets=BOUNDS, registry=reg)
    ours = BatchedHistogram(BOUNDS)
    for v in values:
        ref.observe(v)
        ours.pending.append(v)
    buckets, total, count = ours.snapshot()
    assert count == len(values)
    for le, n in buckets:
        assert reg.get_sample_value("h_bucket", {"le": le}) == n
    assert abs(reg.get_sample_value("h_sum") - total) <= 1e-9 * max(1.0, abs(total))


def test_values_appended_during_flushes_are_never_lost():
    h = BatchedHistogram((1.0,))
    n = 200_000
    done = threading.Event()

    def flusher():
        while not done.is_set():
            h.flush()

    t = threading.Thread(target=flusher)
    t.start()
    for _ in range(n):
        h.pending.append(0.5)
    done.set()
    t.join()
    assert h.snapshot()[2] == n
