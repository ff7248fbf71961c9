"""The ``tgi`` profile: the Text Generation Inference router's ``/metrics`` (``router/src/server.rs``)."""

from __future__ import annotations

from typing import Final

from fleetwatch.core.profiles.buckets import TGI_DURATION_BUCKETS
from fleetwatch.core.profiles.types import OutcomeCounter, Profile, Signal
from fleetwatch.core.profiles.types import counter as _c
from fleetwatch.core.profiles.types import gauge as _g
from fleetwatch.core.profiles.types import histogram as _h

__all__ = ["TGI"]

TGI: Final = Profile(
    name="tgi",
    description="Text Generation Inference router /metrics (no TTFT metric)",
    replica_label="instance",
    model_label="model",
    class_label=None,
    signals={
        Signal.E2E: _h("tgi_request_duration", TGI_DURATION_BUCKETS),
        Signal.QUEUE: _h("tgi_request_queue_duration", TGI_DURATION_BUCKETS),
        Signal.TPOT: _h("tgi_request_mean_time_per_token_duration", TGI_DURATION_BUCKETS),
        Signal.WAITING: _g("tgi_queue_size"),
        Signal.RUNNING: _g("tgi_batch_current_size"),
    },
    outcomes=OutcomeCounter(
        total=_c("tgi_request_count"),
        good=_c("tgi_request_success"),
    ),
)
