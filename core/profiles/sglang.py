"""The ``sglang`` profile: SGLang 0.5 ``/metrics``, from ``metrics_collector.py``."""

from __future__ import annotations

from typing import Final

from fleetwatch.core.profiles.buckets import (
    SGLANG_E2E_BUCKETS,
    SGLANG_ITL_BUCKETS,
    SGLANG_QUEUE_BUCKETS,
    SGLANG_TTFT_BUCKETS,
)
from fleetwatch.core.profiles.types import OutcomeCounter, Profile, Signal
from fleetwatch.core.profiles.types import counter as _c
from fleetwatch.core.profiles.types import gauge as _g
from fleetwatch.core.profiles.types import histogram as _h

__all__ = ["SGLANG"]

SGLANG: Final = Profile(
    name="sglang",
    description="SGLang 0.5 /metrics",
    replica_label="instance",
    model_label="model_name",
    class_label=None,
    signals={
        Signal.TTFT: _h("sglang:time_to_first_token_seconds", SGLANG_TTFT_BUCKETS),
        Signal.ITL: _h("sglang:inter_token_latency_seconds", SGLANG_ITL_BUCKETS),
        Signal.E2E: _h("sglang:e2e_request_latency_seconds", SGLANG_E2E_BUCKETS),
        Signal.QUEUE: _h("sglang:queue_time_seconds", SGLANG_QUEUE_BUCKETS),
        Signal.PROMPT_TOKENS: _c("sglang:prompt_tokens_total", "tokens"),
        Signal.GENERATION_TOKENS: _c("sglang:generation_tokens_total", "tokens"),
        Signal.RUNNING: _g("sglang:num_running_reqs"),
        Signal.WAITING: _g("sglang:num_queue_reqs"),
        Signal.KV_USAGE: _g("sglang:token_usage", "ratio"),
    },
    outcomes=OutcomeCounter(
        total=_c("sglang:num_requests_total"),
        bad={"aborted": _c("sglang:num_aborted_requests_total")},
    ),
)
