"""Which latency component moved: mean queue, prefill, decode and stall, before and after.

Over all ok requests, and over each run's own e2e p99 tail (requests at or above that run's p99),
where a regression in the tail usually shows first.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["COMPONENTS", "ComponentMove", "component_moves"]

COMPONENTS = ("queue_s", "prefill_s", "decode_s", "preemption_stall_s")


@dataclass(frozen=True, slots=True)
class ComponentMove:
    """Mean seconds of one latency component in a cohort, before and after."""

    component: str
    cohort: str
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


def _cohorts(
    b_ok: pd.DataFrame, a_ok: pd.DataFrame
) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    cohorts: list[tuple[str, pd.DataFrame, pd.DataFrame]] = [("all", b_ok, a_ok)]
    if "e2e_s" in b_ok.columns and len(b_ok) >= 20 and len(a_ok) >= 20:
        tb = b_ok[b_ok["e2e_s"] >= b_ok["e2e_s"].quantile(0.99)]
        ta = a_ok[a_ok["e2e_s"] >= a_ok["e2e_s"].quantile(0.99)]
        cohorts.append(("e2e p99 tail", tb, ta))
    return cohorts


def component_moves(b_ok: pd.DataFrame, a_ok: pd.DataFrame) -> tuple[ComponentMove, ...]:
    """Mean of each component present in both runs, per cohort ("all", then "e2e p99 tail" when
    each run has at least 20 ok requests)."""
    return tuple(
        ComponentMove(c, cohort, float(cb[c].mean()), float(ca[c].mean()))
        for cohort, cb, ca in _cohorts(b_ok, a_ok)
        for c in COMPONENTS
        if c in cb.columns and c in ca.columns
    )
