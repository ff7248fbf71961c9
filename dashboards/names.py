"""Names that dashboards and alerts use but that no engine profile defines.

Two tables live here, each the single place to change when the owning package settles its names:

* ``SLO_RULES``: the recording rules the SLO rule generator writes (Sloth's naming scheme:
  ``slo:sli_error:ratio_rate<window>`` and the metadata rules), labelled ``slo`` and ``service``.
  The windows differ per SLO (the generator scales them to each SLO's period), so dashboards
  select the per-window series by name prefix and tell them apart by their ``window`` label,
  never by a fixed list of windows.
* ``RESILIENCE``: the metrics fleetwatch's circuit breaker, retry budget and micro-batcher export.
  They come from the resilience library in the user's own client or proxy code, never from an
  engine's ``/metrics``, so only profiles listed in ``RESILIENCE_PROFILES`` read them (see there).

The fleet lines the fleet view reads are recorded by ``fleetwatch.dashboards.recordings``, which
names them (``fleet_recording_names``). Anything else a dashboard expression names must come from
its metric profile
(``fleetwatch.core.profiles``); ``allowed_names`` is the union of fixed names the checks accept, and
``unknown_names`` what they refuse (error-ratio rules pass for any window).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fleetwatch.core.duration import parse_duration
from fleetwatch.core.profiles import MetricRef, Profile
from fleetwatch.dashboards.recordings import fleet_recording_names

__all__ = [
    "BATCHER_LABEL",
    "BREAKER_LABEL",
    "BREAKER_OPEN_STATES",
    "BREAKER_STATES",
    "BREAKER_STATE_LABEL",
    "PROMETHEUS_BUILTINS",
    "RESILIENCE",
    "RESILIENCE_PROFILES",
    "RESILIENCE_SOURCE",
    "RETRY_BUDGET_LABEL",
    "RETRY_POLICY_LABEL",
    "SLO_RULES",
    "Resilience",
    "SLORuleNames",
    "allowed_names",
    "has_resilience",
    "unknown_names",
]


@dataclass(frozen=True, slots=True)
class SLORuleNames:
    """Recording-rule names of the SLO generator; every series carries ``slo`` and ``service``.

    ``error_ratio_prefix`` + window (``5m``, ``1h``, ...) is the error ratio over that window
    (0..1), one series per alert window and for the period, labelled ``window_label`` with the
    window; ``objective`` is the target (e.g. 0.999); ``error_budget`` is 1 - objective;
    ``current_burn_rate`` is the error ratio over the shortest window divided by the budget;
    ``budget_remaining`` is the fraction of the period's budget left (1 = untouched, < 0 = spent).
    """

    error_ratio_prefix: str = "slo:sli_error:ratio_rate"
    objective: str = "slo:objective:ratio"
    error_budget: str = "slo:error_budget:ratio"
    current_burn_rate: str = "slo:current_burn_rate:ratio"
    budget_remaining: str = "slo:period_error_budget_remaining:ratio"
    slo_label: str = "slo"
    service_label: str = "service"
    window_label: str = "window"

    def error_ratios(self, matchers: str = "") -> str:
        """Selector of the error ratio over every window any SLO records (by name prefix):
        ``{__name__=~"slo:sli_error:ratio_rate.+",<matchers>}``."""
        name = f'__name__=~"{self.error_ratio_prefix}.+"'
        return f"{{{name},{matchers}}}" if matchers else f"{{{name}}}"

    def is_error_ratio(self, name: str) -> bool:
        """Whether ``name`` is the error-ratio rule of some window (``...ratio_rate1h30m``)."""
        window = name.removeprefix(self.error_ratio_prefix)
        if window == name:
            return False
        try:
            parse_duration(window)
        except ValueError:
            return False
        return True

    def names(self) -> frozenset[str]:
        """The recording rules that exist once per SLO (the per-window error ratios, one per
        window the SLO uses, are recognised by ``is_error_ratio``)."""
        return frozenset(
            {self.objective, self.error_budget, self.current_burn_rate, self.budget_remaining}
        )


SLO_RULES: Final = SLORuleNames()


class Resilience(StrEnum):
    """Logical resilience signals (client- or proxy-side, engine-independent)."""

    BREAKER_STATE = "breaker_state"
    BREAKER_CALLS = "breaker_calls"
    BREAKER_SLOW_CALLS = "breaker_slow_calls"
    BREAKER_NOT_PERMITTED = "breaker_not_permitted"
    BREAKER_TRANSITIONS = "breaker_transitions"
    RETRY_ATTEMPTS = "retry_attempts"
    RETRIES = "retries"
    RETRY_EXHAUSTED = "retry_exhausted"
    RETRY_BUDGET_REFUSALS = "retry_budget_refusals"
    RETRY_BUDGET_BALANCE = "retry_budget_balance"
    BATCH_SIZE = "batch_size"
    BATCH_FILL = "batch_fill"
    BATCH_QUEUE_WAIT = "batch_queue_wait"
    BATCH_QUEUE_DEPTH = "batch_queue_depth"
    BATCH_ITEMS = "batch_items"
    BATCH_REJECTED = "batch_rejected"
    BATCH_FAILURES = "batch_failures"


# The names ``fleetwatch.resilience.breaker.metrics``, ``fleetwatch.resilience.retry.metrics`` and
# ``fleetwatch.resilience.batcher.metrics`` register (default prefix ``fleetwatch``).
RESILIENCE: Final[Mapping[Resilience, MetricRef]] = {
    # One-hot, labels ``breaker`` and ``state`` (see BREAKER_STATES): 1 for the current state.
    Resilience.BREAKER_STATE: MetricRef("fleetwatch_circuit_breaker_state", "gauge"),
    # Label ``outcome``: success, failure, ignored.
    Resilience.BREAKER_CALLS: MetricRef("fleetwatch_circuit_breaker_calls_total", "counter"),
    # Calls at least the slow-call duration long; label ``outcome``: success, failure.
    Resilience.BREAKER_SLOW_CALLS: MetricRef(
        "fleetwatch_circuit_breaker_slow_calls_total", "counter"
    ),
    Resilience.BREAKER_NOT_PERMITTED: MetricRef(
        "fleetwatch_circuit_breaker_not_permitted_calls_total", "counter"
    ),
    # Label ``to_state``: the state entered.
    Resilience.BREAKER_TRANSITIONS: MetricRef(
        "fleetwatch_circuit_breaker_transitions_total", "counter"
    ),
    # Retry policies carry label ``policy``; budgets carry ``budget``.
    Resilience.RETRY_ATTEMPTS: MetricRef("fleetwatch_retry_attempts_total", "counter"),
    Resilience.RETRIES: MetricRef("fleetwatch_retry_retries_total", "counter"),
    Resilience.RETRY_EXHAUSTED: MetricRef("fleetwatch_retry_exhausted_total", "counter"),
    Resilience.RETRY_BUDGET_REFUSALS: MetricRef(
        "fleetwatch_retry_budget_refusals_total", "counter"
    ),
    # Retries the budget would allow now.
    Resilience.RETRY_BUDGET_BALANCE: MetricRef("fleetwatch_retry_budget_balance", "gauge"),
    # Batcher metrics carry label ``batcher``.
    Resilience.BATCH_SIZE: MetricRef("fleetwatch_batcher_batch_size", "histogram", "items"),
    Resilience.BATCH_FILL: MetricRef("fleetwatch_batcher_fill_ratio", "histogram", "ratio"),
    Resilience.BATCH_QUEUE_WAIT: MetricRef(
        "fleetwatch_batcher_queue_wait_seconds", "histogram", "seconds"
    ),
    Resilience.BATCH_QUEUE_DEPTH: MetricRef("fleetwatch_batcher_queue_depth", "gauge", "items"),
    # Label ``outcome``: success, failure, cancelled.
    Resilience.BATCH_ITEMS: MetricRef("fleetwatch_batcher_items_total", "counter", "items"),
    # Label ``reason``: full, closed, too_costly, cost_error.
    Resilience.BATCH_REJECTED: MetricRef("fleetwatch_batcher_rejected_total", "counter", "items"),
    Resilience.BATCH_FAILURES: MetricRef("fleetwatch_batcher_batch_failures_total", "counter"),
}

BREAKER_LABEL: Final = "breaker"
BREAKER_STATE_LABEL: Final = "state"
RETRY_POLICY_LABEL: Final = "policy"
RETRY_BUDGET_LABEL: Final = "budget"
BATCHER_LABEL: Final = "batcher"
# Values of the breaker gauge's ``state`` label, numbered for the dashboard's state timeline
# (the timeline plots the number of the state whose series is 1 and names it back).
BREAKER_STATES: Final[Mapping[int, str]] = {
    0: "closed",
    1: "open",
    2: "half_open",
    3: "forced_open",
    4: "disabled",
    5: "metrics_only",
}
# States in which calls are refused.
BREAKER_OPEN_STATES: Final = ("open", "forced_open")

RESILIENCE_SOURCE: Final = (
    "fleetwatch's resilience library (resilience.breaker, resilience.retry, resilience.batcher) "
    "in your own client or proxy code, not the engine's /metrics"
)
"""Where the ``RESILIENCE`` series come from, for panel, dashboard and alert descriptions."""

RESILIENCE_PROFILES: Final = frozenset({"fleetwatch"})
"""Profiles whose dashboards and operational alerts include the resilience series.

A profile names what one kind of deployment exports. The ``fleetwatch`` profile is fleetwatch's
own instrumentation, and the resilience library is part of it. The vLLM, SGLang and TGI profiles
describe those engines' ``/metrics``, which never carry ``fleetwatch_circuit_breaker_*`` and
friends: a resilience dashboard or alert generated for them would read series the profile cannot
have. The resilience view reads nothing engine-specific (it is filtered by breaker, retry budget
and batcher, not by replica), so a vLLM or SGLang fleet whose clients use the library imports
``fleetwatch-resilience.json`` beside its own dashboards, and asks for the alerts explicitly
(``fleetwatch dashboards alerts --profile vllm --resilience``)."""


def has_resilience(profile: Profile) -> bool:
    """Whether ``profile``'s dashboards and alerts include the resilience series by default."""
    return profile.name in RESILIENCE_PROFILES


# Series Prometheus itself creates.
PROMETHEUS_BUILTINS: Final = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})


def _expanded(refs: Mapping[Resilience, MetricRef]) -> frozenset[str]:
    names: set[str] = set()
    for ref in refs.values():
        if ref.kind == "histogram":
            names.update(ref.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(ref.name)
    return frozenset(names)


def allowed_names(profile: Profile, *, resilience: bool | None = None) -> frozenset[str]:
    """Every series name an expression built for ``profile`` may use; the resilience series only
    where ``resilience`` (default: ``has_resilience(profile)``)."""
    with_resilience = has_resilience(profile) if resilience is None else resilience
    extra = _expanded(RESILIENCE) if with_resilience else frozenset()
    fleet = fleet_recording_names(profile)
    return profile.metric_names() | SLO_RULES.names() | fleet | extra | PROMETHEUS_BUILTINS


def unknown_names(profile: Profile, names: Iterable[str]) -> frozenset[str]:
    """Of ``names``, those an expression built for ``profile`` may not read: neither in
    ``allowed_names`` nor the error-ratio rule of some window."""
    allowed = allowed_names(profile)
    return frozenset(n for n in names if n not in allowed and not SLO_RULES.is_error_ratio(n))
