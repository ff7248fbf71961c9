"""Burn-rate window tables: the SRE Workbook's for 30 days, scaled for any other period.

The Workbook table (chapter "Alerting on SLOs"), for a 30-day period:

======== ====== ======= ===== ========================
severity long   short   burn  budget spent when fired
======== ====== ======= ===== ========================
page     1h     5m      14.4  2%
page     6h     30m     6     5%
ticket   1d     2h      3     10%
ticket   3d     6h      1     10%
======== ====== ======= ===== ========================

For another period P the windows are multiplied by P / 30d and the burn factors kept, so each
condition still fires after spending the same share of the budget (burn x long / period). Scaled
windows are rounded to whole evaluation intervals (at least one), so that every window is a
whole number of samples when Prometheus scrapes and evaluates at that interval.
"""

from __future__ import annotations

from typing import Final

from fleetwatch.slo.spec import BurnWindow, budget_fraction

__all__ = ["WORKBOOK_PERIOD_S", "WORKBOOK_WINDOWS", "budget_fraction", "scaled_windows"]

WORKBOOK_PERIOD_S: Final = 30 * 86400
_H: Final = 3600

WORKBOOK_WINDOWS: Final[tuple[BurnWindow, ...]] = (
    BurnWindow("page", 1 * _H, 5 * 60, 14.4),
    BurnWindow("page", 6 * _H, 30 * 60, 6.0),
    BurnWindow("ticket", 24 * _H, 2 * _H, 3.0),
    BurnWindow("ticket", 72 * _H, 6 * _H, 1.0),
)


def scaled_windows(period_s: int, evaluation_interval_s: int) -> tuple[BurnWindow, ...]:
    """The Workbook table scaled to ``period_s``; windows in whole evaluation intervals, at
    least one long. The 30-day table comes back unchanged for any interval dividing 5 minutes."""
    out = []
    for w in WORKBOOK_WINDOWS:
        long_s = _round(w.long_s * period_s / WORKBOOK_PERIOD_S, evaluation_interval_s)
        short_s = _round(w.short_s * period_s / WORKBOOK_PERIOD_S, evaluation_interval_s)
        if short_s >= long_s:
            long_s = short_s + evaluation_interval_s
        out.append(BurnWindow(w.severity, long_s, short_s, w.burn))
    return tuple(out)


def _round(seconds: float, interval: int) -> int:
    return max(1, round(seconds / interval)) * interval
