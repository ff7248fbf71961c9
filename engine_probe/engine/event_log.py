"""``EventLog``: an observer that records every event as a plain tuple (the test double that ships
with the engine, like OpenTelemetry's in-memory exporter), plus each request's event names in order."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetwatch.telemetry.hooks import EngineObserver, StepStats

__all__ = ["Event", "EventLog"]


@dataclass(frozen=True, slots=True)
class Event:
    """One observer call: ``name`` is the method name without ``on_``; ``args`` follow ``t``."""

    name: str
    t: float
    args: tuple[Any, ...]


def _records(hook: str) -> Callable[..., None]:
    """A method for ``hook`` that appends the call to ``events``. It takes the protocol's
    arguments positionally, as the engine passes them, and checks their number, so the test
    double still refuses a call the protocol does not allow."""
    name = hook.removeprefix("on_")
    arity = len(inspect.signature(getattr(EngineObserver, hook)).parameters) - 1  # less self

    def record(self: EventLog, *args: Any) -> None:
        if len(args) != arity:
            raise TypeError(f"{hook}() takes {arity} arguments, got {len(args)}")
        self.events.append(Event(name, args[0], args[1:]))

    record.__name__ = record.__qualname__ = hook
    return record


@dataclass(slots=True, eq=False)
class EventLog(EngineObserver):
    """Records events in call order. ``steps`` holds the ``StepStats`` values separately too."""

    events: list[Event] = field(default_factory=list)
    steps: list[StepStats] = field(default_factory=list)

    on_request_arrived = _records("on_request_arrived")
    on_request_scheduled = _records("on_request_scheduled")
    on_prefill_chunk = _records("on_prefill_chunk")
    on_first_token = _records("on_first_token")
    on_preempted = _records("on_preempted")
    on_resumed = _records("on_resumed")
    on_request_finished = _records("on_request_finished")

    def on_tokens(self, t: float, request_ids: Sequence[str]) -> None:
        self.events.append(Event("tokens", t, (tuple(request_ids),)))

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
