"""``EventLog``: an observer that records every event as a plain tuple (the test double that ships
with the engine, like OpenTelemetry's in-memory exporter), plus each request's event names in order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetwatch.telemetry.hooks import RequestInfo, StepStats

__all__ = ["Event", "EventLog"]


@dataclass(frozen=True, slots=True)
class Event:
    """One observer call: ``name`` is the method name without ``on_``; ``args`` follow ``t``."""

    name: str
    t: float
    args: tuple[Any, ...]


@dataclass(slots=True, eq=False)
class EventLog:
    """Records events in call order. ``steps`` holds the ``StepStats`` values separately too."""

    events: list[Event] = field(default_factory=list)
    steps: list[StepStats] = field(default_factory=list)

    def on_request_arrived(self, t: float, info: RequestInfo) -> None:
        self.events.append(Event("request_arrived", t, (info,)))

    def on_request_scheduled(self, t: float, request_id: str, batch_size: int) -> None:
        self.events.append(Event("request_scheduled", t, (request_id, batch_size)))

    def on_prefill_chunk(self, t: float, request_id: str, tokens: int, cached_tokens: int) -> None:
        self.events.append(Event("prefill_chunk", t, (request_id, tokens, cached_tokens)))

    def on_first_token(self, t: float, request_id: str) -> None:
        self.events.append(Event("first_token", t, (request_id,)))

    def on_tokens(self, t: float, request_ids: Sequence[str]) -> None:
        self.events.append(Event("tokens", t, (tuple(request_ids),)))

    def on_preempted(self, t: float, request_id: str) -> None:
        self.events.append(Event("preempted", t, (request_id,)))

    def on_resumed(self, t: float, request_id: str) -> None:
        self.events.append(Event("resumed", t, (request_id,)))

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
        self.events.append(
            Event(
                "request_finished",
                t,
                (
                    request_id,
                    status,
                    finish_reason,
                    error_type,
                    output_tokens,
                    cached_prompt_tokens,
                ),
            )
        )

    def on_step(self, stats: StepStats) -> None:
        self.events.append(Event("step", stats.end_s, (stats,)))
        self.steps.append(stats)

    def for_request(self, request_id: str) -> list[str]:
        """Names of the events that concern ``request_id``, in order (``tokens`` once per step)."""
        out: list[str] = []
        for e in self.events:
            if e.name == "request_arrived":
                if e.args[0].request_id == request_id:
                    out.append(e.name)
            elif e.name == "tokens":
                if request_id in e.args[0]:
                    out.append(e.name)
            elif e.name != "step" and e.args[0] == request_id:
                out.append(e.name)
        return out
