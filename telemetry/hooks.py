"""The step-loop observer protocol: how an engine tells the outside world what it did.

The engine calls an observer with plain values and timestamps from its injected clock; it never
imports telemetry. Any engine can feed fleetwatch's telemetry by calling the same methods.

Threading contract: every method is called synchronously on the engine's step-loop thread, in event
order, and must not block or raise (an observer that raises is the observer's bug; the engine does
not guard each call, so the disabled path stays a single ``is None`` check). Timestamps are seconds
on the engine's clock. No prompt or output text ever passes through this interface.

Event order for one request::

    arrived -> scheduled -> prefill_chunk* -> first_token -> tokens* -> finished
                  (preempted -> resumed -> prefill_chunk*)  may repeat anywhere after scheduled

A request rejected or aborted while waiting goes from arrived straight to finished.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol, runtime_checkable

__all__ = [
    "HOOKS",
    "EngineObserver",
    "HttpRequestInfo",
    "NullObserver",
    "RequestInfo",
    "StepStats",
]


@dataclass(frozen=True, slots=True)
class HttpRequestInfo:
    """The HTTP request a request came in on, for a server that serves the engine over HTTP
    (OpenTelemetry's ``http.*`` and ``server.*`` span attributes)."""

    method: str
    """``POST``."""
    route: str
    """The route template that matched (``/v1/completions``), never the raw path."""
    server_address: str | None = None
    server_port: int | None = None
    status_code: Callable[[str, bool], int] | None = None
    """The HTTP status the server answers with, given the request's final status (ok, error,
    aborted, rejected) and whether it produced output before ending. A callable, because the
    answer is only known once the request ends and the span is built after that, on another
    thread: the server's rule travels with the request instead of a value set too late."""


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What is known about a request when it arrives (no text: only its size).

    Fields after ``operation`` are optional: an engine or server that knows them fills them in.
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    traffic_class: str = "default"
    tenant: str | None = None
    traceparent: str | None = None
    """W3C trace context of the caller, continued by the request's span."""
    operation: str = "text_completion"
    tracestate: str | None = None
    """W3C ``tracestate`` sent with ``traceparent``, continued with it."""
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    """Sampling parameters the request runs with."""
    http: HttpRequestInfo | None = None
    """Set when the request was served over HTTP."""


class StepStats(NamedTuple):
    """One engine step, handed to observers once per step after it finished (or, with no
    tokens, a report of the engine's state between steps: see ``EngineObserver.on_step``).

    Units: seconds, tokens, KV blocks, bytes and FLOPs (estimates from the model's shape).
    Immutable; a named tuple because one is built every step: in a fifth of the time a frozen
    dataclass takes (its ``__init__`` sets each of 14 fields through ``object.__setattr__``).
    """

    step: int
    start_s: float
    end_s: float
    prefill_tokens: int
    decode_tokens: int
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    prefix_cache_queries: int
    """Prompt tokens looked up in the prefix cache this step."""
    prefix_cache_hits: int
    """Prompt tokens found in the prefix cache this step."""
    preemptions: int
    bytes_read: float
    """Weights plus KV bytes the step read: the memory-bandwidth numerator."""
    flops: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def is_state_report(self) -> bool:
        """A report of running/waiting/KV between steps (nothing computed), not a step."""
        return self.prefill_tokens == 0 and self.decode_tokens == 0

    @property
    def kv_usage(self) -> float:
        """KV-cache usage, 0..1."""
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0


@runtime_checkable
class EngineObserver(Protocol):
    """Receives step-loop events. See the module docstring for order and threading.

    Every hook is a no-op here: subclass this (or ``NullObserver``) and override only the events
    you use. A fan-out over several observers may skip a hook an observer leaves alone (the
    reference engine's does, so such a hook costs it nothing per step). An object that defines
    every hook satisfies the protocol without subclassing it.
    """

    __slots__ = ()

    def on_request_arrived(self, t: float, info: RequestInfo) -> None:
        """A request reached the engine; ``t`` is when a server received it, if that was earlier."""
        return None

    def on_request_scheduled(self, t: float, request_id: str, batch_size: int) -> None:
        """First admission to the running set; ``batch_size`` is the running count after it."""
        return None

    def on_prefill_chunk(self, t: float, request_id: str, tokens: int, cached_tokens: int) -> None:
        """A chunk of ``tokens`` prompt tokens was computed (``cached_tokens`` came from cache).

        ``cached_tokens`` is set only on the first chunk after an admission (or a resume); after a
        preemption the recomputed prompt + generated tokens arrive as chunks again.
        """
        return None

    def on_first_token(self, t: float, request_id: str) -> None:
        """The request's first output token."""
        return None

    def on_tokens(self, t: float, request_ids: Sequence[str]) -> None:
        """One decode token each for ``request_ids`` in this step (one call per step).

        The first output token is reported by ``on_first_token`` only, so a request's output
        tokens are 1 + the number of ``on_tokens`` calls naming it. The reference engine makes no
        call in a step where no request produced a new token.
        """
        return None

    def on_preempted(self, t: float, request_id: str) -> None:
        """Taken out of the running set to free KV blocks; recomputed after ``on_resumed``."""
        return None

    def on_resumed(self, t: float, request_id: str) -> None:
        """A preempted request was admitted again."""
        return None

    def on_request_finished(
        self,
        t: float,
        request_id: str,
        status: str,
        finish_reason: str | None,
        error_type: str | None,
        output_tokens: int,
        cached_prompt_tokens: int,
    ) -> None:
        """``status`` is one of ok, error, aborted, rejected (``fleetwatch.core.records.Status``)."""
        return None

    def on_step(self, stats: StepStats) -> None:
        """Once per step that computed tokens, after that step's other events.

        Also, between steps, whenever running, waiting or KV use changed without a step (a
        request aborted, the engine gone idle): a state report with ``tokens == 0`` and
        ``start_s == end_s``, so a gauge read from the last ``StepStats`` follows the engine.
        A step always computes tokens, so ``stats.is_state_report`` tells the two apart.
        """
        return None


HOOKS: Final = tuple(name for name in vars(EngineObserver) if name.startswith("on_"))
"""The hooks' names, in the order ``EngineObserver`` declares them."""


class NullObserver(EngineObserver):
    """An observer that ignores every event: subclass it and override only what you need."""
