"""A request an engine ends early keeps only the gaps of the tokens it reports."""

from __future__ import annotations

from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.telemetry.hooks import RequestInfo
from fleetwatch.telemetry.request_state import RequestState, record_gaps


def _state(buckets: list[int], output_tokens: int) -> RequestState:
    s = RequestState(0.0, RequestInfo("r", 4, 16), None)
    for b in buckets:
        s.gaps[b] += 1
        s.recent_gaps.append(b)
    s.output_tokens = output_tokens
    return s


def test_gaps_past_an_early_end_are_taken_off_newest_first() -> None:
    s = _state([0, 0, 5, 7, 9], output_tokens=3)  # 5 gaps seen, 3 tokens reported: 2 gaps kept
    kept = record_gaps(s)
    assert sum(kept) == 2 and kept[0] == 2
    assert len(kept) == len(ITL_BOUNDS) + 1


def test_gaps_of_a_request_that_delivered_everything_are_unchanged() -> None:
    s = _state([1, 2, 3], output_tokens=4)
    assert record_gaps(s) == tuple(s.gaps)
