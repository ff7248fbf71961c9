"""The SRE Workbook's arithmetic, and the window table scaled to other periods."""

from __future__ import annotations

import pytest

from fleetwatch.core.duration import format_duration, parse_duration
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.windows import WORKBOOK_WINDOWS, budget_fraction, scaled_windows


def test_a_999_objective_over_30_days_is_a_43_2_minute_budget() -> None:
    spec = load_spec("service: s\nslos: [{name: a, objective: 99.9, sli: {kind: availability}}]")
    slo = spec.slos[0]
    assert slo.error_budget == 0.001
    assert slo.budget_s / 60 == pytest.approx(43.2)


def test_a_14_4x_burn_for_one_hour_consumes_2_percent_of_the_budget() -> None:
    assert budget_fraction(14.4, 3600, 30 * 86400) == pytest.approx(0.02)
    fractions = [w.budget_fraction(30 * 86400) for w in WORKBOOK_WINDOWS]
    assert fractions == pytest.approx([0.02, 0.05, 0.10, 0.10])


def test_the_30_day_table_is_the_workbook_table() -> None:
    table = [(w.severity, format_duration(w.long_s), format_duration(w.short_s), w.burn)
             for w in scaled_windows(30 * 86400, 30)]  # fmt: skip
    assert table == [
        ("page", "1h", "5m", 14.4),
        ("page", "6h", "30m", 6.0),
        ("ticket", "1d", "2h", 3.0),
        ("ticket", "3d", "6h", 1.0),
    ]


@pytest.mark.parametrize("period", ["28d", "7d", "90d", "1d"])
def test_scaled_windows_keep_each_alerts_budget_fraction(period: str) -> None:
    period_s = parse_duration(period)
    for scaled, base in zip(scaled_windows(period_s, 30), WORKBOOK_WINDOWS, strict=True):
        assert scaled.burn == base.burn
        # Rounding to whole 30 s intervals moves the fraction by at most one interval's worth.
        assert scaled.budget_fraction(period_s) == pytest.approx(
            base.budget_fraction(30 * 86400), abs=base.burn * 30 / period_s + 1e-12
        )
        assert scaled.long_s % 30 == 0 and scaled.short_s % 30 == 0


def test_a_one_hour_demo_period_gets_windows_of_at_least_one_interval() -> None:
    table = scaled_windows(3600, 5)
    assert all(w.short_s >= 5 and w.long_s > w.short_s for w in table)


def test_durations_round_trip() -> None:
    for text in ("5m", "1h30m", "28d", "3d6h", "1m30s"):
        assert format_duration(parse_duration(text)) == text
    with pytest.raises(ValueError):
        parse_duration("30m1h")
