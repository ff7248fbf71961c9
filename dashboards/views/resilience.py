"""Resilience view: circuit breakers, retries and their budget, the micro-batcher.

These metrics come from fleetwatch's resilience library in the user's own client or proxy code
(in front of the engine), never from the engine, so they are filtered by breaker, retry budget
and batcher, not by replica; every panel description says so (``RESILIENCE_SOURCE``). Only
profiles that can have them get this view (``RESILIENCE_PROFILES``).
"""

from __future__ import annotations

import dataclasses

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import MetricRef, Profile
from fleetwatch.dashboards.names import (
    BATCHER_LABEL,
    BREAKER_LABEL,
    BREAKER_STATE_LABEL,
    BREAKER_STATES,
    RESILIENCE,
    RESILIENCE_SOURCE,
    RETRY_BUDGET_LABEL,
    RETRY_POLICY_LABEL,
    Resilience,
)
from fleetwatch.dashboards.panels import Kind, PanelSpec, Query, RowSpec, legend_of
from fleetwatch.dashboards.promql import RATE

__all__ = ["breaker_state_code", "resilience_rows"]

_BREAKER = legend_of(BREAKER_LABEL)
_BATCHER = legend_of(BATCHER_LABEL)
# Timeline colours: red where calls are refused, yellow while probing, blue where an operator
# took the breaker out of the decision.
_STATE_COLORS = {
    "closed": "green",
    "open": "red",
    "half_open": "yellow",
    "forced_open": "dark-red",
    "disabled": "blue",
    "metrics_only": "blue",
}


def _rate(ref: MetricRef, by: str, suffix: str = "") -> str:
    return f"sum by ({by}) (rate({ref.selector(suffix=suffix)}[{RATE}]))"


def _total(ref: MetricRef, suffix: str = "") -> str:
    return f"sum (rate({ref.selector(suffix=suffix)}[{RATE}]))"


def _state_is(name: str) -> str:
    return f'{BREAKER_STATE_LABEL}="{name}"'


def breaker_state_code() -> str:
    """One series per breaker whose value numbers its current state (``BREAKER_STATES``).

    The breaker gauge is one-hot over the ``state`` label; each state's series is scaled by its
    number and the largest kept, so the state timeline gets a single row per breaker that its
    value mappings name back.
    """
    state = RESILIENCE[Resilience.BREAKER_STATE]
    terms = " or ".join(
        f"{state.selector(_state_is(name))} * {code}"
        for code, name in sorted(BREAKER_STATES.items())
    )
    return f"max by ({BREAKER_LABEL}) ({terms})"


def _sourced(row: RowSpec, module: str) -> RowSpec:
    """``row`` with every panel description ending in where its series come from."""
    note = f" Source: resilience.{module}, part of {RESILIENCE_SOURCE}."
    return RowSpec(
        row.title,
        tuple(dataclasses.replace(p, description=p.description + note) for p in row.panels),
    )


def resilience_rows(profile: Profile) -> tuple[RowSpec, ...]:
    del profile  # the same metrics whatever engine sits behind the breaker
    m = RESILIENCE
    calls = _rate(m[Resilience.BREAKER_CALLS], BREAKER_LABEL)
    refused = _rate(m[Resilience.BREAKER_NOT_PERMITTED], BREAKER_LABEL)
    breakers = (
        PanelSpec(
            "Breaker state",
            "State of each circuit breaker over time. Open: calls fail fast without reaching "
            "the replica; half_open: a few probe calls decide whether to close; forced_open, "
            "disabled and metrics_only are set by an operator.",
            (Query(breaker_state_code(), _BREAKER),),
            units.Short,
            Kind.STATE,
            width=24,
            value_names=tuple(sorted(BREAKER_STATES.items())),
            value_colors=tuple(
                (code, _STATE_COLORS[name]) for code, name in sorted(BREAKER_STATES.items())
            ),
        ),
        PanelSpec(
            "Breaker calls by outcome",
            "Calls through each breaker per second by outcome (success, failure, ignored), and "
            "the slow ones among them (at least the breaker's slow-call duration).",
            (
                Query(
                    _rate(m[Resilience.BREAKER_CALLS], f"{BREAKER_LABEL}, outcome"),
                    f"{_BREAKER} {{{{outcome}}}}",
                ),
                Query(
                    _rate(m[Resilience.BREAKER_SLOW_CALLS], f"{BREAKER_LABEL}, outcome"),
                    f"{_BREAKER} slow {{{{outcome}}}}",
                ),
            ),
            units.OpsPerSecond,
        ),
        PanelSpec(
            "Calls refused by open breakers",
            "Calls rejected without being attempted, as a share of all calls through the breaker.",
            (Query(f"{refused} / ({calls} + {refused})", _BREAKER),),
            units.PercentUnit,
        ),
        PanelSpec(
            "Breaker transitions",
            "State changes per second by the state entered; a breaker that keeps reopening "
            "flaps on thresholds too tight for its traffic.",
            (
                Query(
                    _rate(m[Resilience.BREAKER_TRANSITIONS], f"{BREAKER_LABEL}, to_state"),
                    f"{_BREAKER} -> {{{{to_state}}}}",
                ),
            ),
            units.OpsPerSecond,
            width=24,
        ),
    )
    retries = (
        PanelSpec(
            "Retries and attempts per second",
            "Every attempt (first tries included), the retries among them, and calls that gave "
            "up on a retryable error (attempt cap, deadline or budget).",
            (
                Query(_total(m[Resilience.RETRY_ATTEMPTS]), "attempts"),
                Query(_total(m[Resilience.RETRIES]), "retries"),
                Query(_total(m[Resilience.RETRY_EXHAUSTED]), "exhausted"),
            ),
            units.OpsPerSecond,
        ),
        PanelSpec(
            "Retry share of attempts",
            "Retries over all attempts, per retry policy. A retry budget holds this near its "
            "percentage (0.1-0.2); without one, an outage can triple the load on a struggling "
            "fleet.",
            (
                Query(
                    f"{_rate(m[Resilience.RETRIES], RETRY_POLICY_LABEL)} / "
                    f"{_rate(m[Resilience.RETRY_ATTEMPTS], RETRY_POLICY_LABEL)}",
                    legend_of(RETRY_POLICY_LABEL),
                ),
            ),
            units.PercentUnit,
        ),
        PanelSpec(
            "Retries refused by the budget",
            "Retries each budget did not allow: the caller saw the original failure instead.",
            (
                Query(
                    _rate(m[Resilience.RETRY_BUDGET_REFUSALS], RETRY_BUDGET_LABEL),
                    legend_of(RETRY_BUDGET_LABEL),
                ),
            ),
            units.OpsPerSecond,
        ),
        PanelSpec(
            "Retry budget balance",
            "Retries each budget would allow now; near zero means the next failures go "
            "straight to callers.",
            (
                Query(
                    f"sum by ({RETRY_BUDGET_LABEL}) "
                    f"({m[Resilience.RETRY_BUDGET_BALANCE].selector()})",
                    legend_of(RETRY_BUDGET_LABEL),
                ),
            ),
            units.Short,
        ),
    )
    fill = m[Resilience.BATCH_FILL]
    size = m[Resilience.BATCH_SIZE]
    wait = m[Resilience.BATCH_QUEUE_WAIT]
    batcher = (
        PanelSpec(
            "Batch fill",
            "Items per dispatched batch over the maximum batch size: low fill means batches "
            "leave on the timer, high fill means on size.",
            (
                Query(
                    f"{_total(fill, '_sum')} / {_total(fill, '_count')}",
                    "mean fill",
                ),
                Query(
                    f"histogram_quantile(0.5, {_rate(fill, 'le', '_bucket')})",
                    "p50 fill",
                ),
            ),
            units.PercentUnit,
            width=8,
        ),
        PanelSpec(
            "Batch size",
            "Items per dispatched batch.",
            (
                Query(
                    f"{_total(size, '_sum')} / {_total(size, '_count')}",
                    "mean",
                ),
                Query(
                    f"histogram_quantile(0.99, {_rate(size, 'le', '_bucket')})",
                    "p99",
                ),
            ),
            units.Short,
            width=8,
        ),
        PanelSpec(
            "Batcher queue depth",
            "Items waiting for the next batch; growth means the batch function is slower than "
            "arrivals.",
            (
                Query(
                    f"sum by ({BATCHER_LABEL}) ({m[Resilience.BATCH_QUEUE_DEPTH].selector()})",
                    _BATCHER,
                ),
            ),
            units.Short,
            width=8,
        ),
        PanelSpec(
            "Batcher queue wait",
            "Time from submit to the start of the item's batch (p50, p99), per batcher.",
            (
                Query(
                    f"histogram_quantile(0.5, {_rate(wait, f'{BATCHER_LABEL}, le', '_bucket')})",
                    f"{_BATCHER} p50",
                ),
                Query(
                    f"histogram_quantile(0.99, {_rate(wait, f'{BATCHER_LABEL}, le', '_bucket')})",
                    f"{_BATCHER} p99",
                ),
            ),
            units.Seconds,
            width=8,
        ),
        PanelSpec(
            "Batcher items by outcome",
            "Items per second by outcome (success, failure, cancelled), and failing calls of "
            "the batch function (by default a failing batch is bisected, so only the items that "
            "fail get the error).",
            (
                Query(
                    _rate(m[Resilience.BATCH_ITEMS], f"{BATCHER_LABEL}, outcome"),
                    f"{_BATCHER} {{{{outcome}}}}",
                ),
                Query(
                    _rate(m[Resilience.BATCH_FAILURES], BATCHER_LABEL),
                    f"{_BATCHER} failed batches",
                ),
            ),
            units.OpsPerSecond,
            width=8,
        ),
        PanelSpec(
            "Batcher rejections",
            "Submissions refused per second by reason: full (queue at capacity), closed, "
            "too_costly (over the batch cost cap), cost_error (the cost function raised).",
            (
                Query(
                    _rate(m[Resilience.BATCH_REJECTED], f"{BATCHER_LABEL}, reason"),
                    f"{_BATCHER} {{{{reason}}}}",
                ),
            ),
            units.OpsPerSecond,
            width=8,
        ),
    )
    return (
        _sourced(RowSpec("Circuit breakers", breakers), "breaker"),
        _sourced(RowSpec("Retries", retries), "retry"),
        _sourced(RowSpec("Micro-batcher", batcher), "batcher"),
    )
