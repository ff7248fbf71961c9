"""Several observers behind one: the engine keeps a single reference, so its disabled path stays
one ``is None`` check however many observers may be attached later."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.telemetry.hooks import EngineObserver, RequestInfo, StepStats

__all__ = ["Fanout"]


class Fanout:
    """Calls each observer in attach order."""

    __slots__ = ("observers",)

    def __init__(self, observers: Sequence[EngineObserver]) -> None:
        self.observers = tuple(observers)

    def on_request_arrived(self, t: float, info: RequestInfo) -> None:
        for o in self.observers:
            o.on_request_arrived(t, info)

    def on_request_scheduled(self, t: float, request_id: str, batch_size: int) -> None:
        for o in self.observers:
            o.on_request_scheduled(t, request_id, batch_size)

    def on_prefill_chunk(self, t: float, request_id: str, tokens: int, cached_tokens: int) -> None:
        for o in self.observers:
            o.on_prefill_chunk(t, request_id, tokens, cached_tokens)

    def on_first_token(self, t: float, request_id: str) -> None:
        for o in self.observers:
            o.on_first_token(t, request_id)

    def on_tokens(self, t: float, request_ids: Sequence[str]) -> None:
        for o in self.observers:
            o.on_tokens(t, request_ids)

    def on_preempted(self, t: float, request_id: str) -> None:
        for o in self.observers:
            o.on_preempted(t, request_id)

    def on_resumed(self, t: float, request_id: str) -> None:
        for o in self.observers:
            o.on_resumed(t, request_id)

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
        for o in self.observers:
            o.on_request_finished(
                t,
                request_id,
                status,
                finish_reason,
                error_type,
                output_tokens,
                cached_prompt_tokens,
            )

    def on_step(self, stats: StepStats) -> None:
        for o in self.observers:
            o.on_step(stats)
