"""The fan-out calls every observer in attach order, each only on the hooks it overrides."""

from __future__ import annotations

from typing import Any

from fleetwatch.engine_probe.engine.event_log import EventLog
from fleetwatch.engine_probe.engine.fanout import Fanout
from fleetwatch.telemetry.hooks import HOOKS, EngineObserver, NullObserver


class FirstTokens(NullObserver):
    def __init__(self, seen: list[tuple[str, str]]) -> None:
        self.seen = seen

    def on_first_token(self, t: float, request_id: str) -> None:
        self.seen.append(("first", request_id))


class Everything:
    """Defines every hook without subclassing the base, as an engine adapter may."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name not in HOOKS:
            raise AttributeError(name)
        return lambda *args: self.calls.append(name)


def test_observers_are_called_in_attach_order_on_the_hooks_they_override(make_engine) -> None:
    seen: list[tuple[str, str]] = []
    log = EventLog()
    engine = make_engine()
    engine.attach(FirstTokens(seen))
    engine.attach(log)
    engine.attach(FirstTokens(seen))
    ids = [engine.add_request(p, max_tokens=3) for p in ([1, 2, 3], [4, 5])]
    while engine.has_unfinished():
        engine.step()
    assert seen == [("first", ids[0]), ("first", ids[0]), ("first", ids[1]), ("first", ids[1])]
    assert [e.args[0] for e in log.events if e.name == "first_token"] == ids
    assert log.for_request(ids[0])[-1] == "request_finished"


def test_a_hook_goes_straight_to_its_one_overriding_observer_or_nowhere() -> None:
    log = EventLog()
    fan = Fanout([log, FirstTokens([]), NullObserver()])
    assert fan.on_tokens == log.on_tokens  # the bound method itself: no loop in between
    assert fan.on_first_token != log.on_first_token  # two observers handle it
    nothing = Fanout([NullObserver(), FirstTokens([])])
    assert getattr(nothing.on_step, "__func__", None) is EngineObserver.on_step


def test_an_observer_that_only_looks_like_one_gets_every_hook() -> None:
    duck = Everything()
    fan = Fanout([duck, NullObserver()])
    fan.on_first_token(0.0, "a")
    fan.on_tokens(0.0, ["a"])
    fan.on_step(None)
    assert duck.calls == ["on_first_token", "on_tokens", "on_step"]
