"""Several observers behind one: the engine keeps a single reference, so its disabled path stays
one ``is None`` check however many observers may be attached later."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fleetwatch.telemetry.hooks import HOOKS, EngineObserver

__all__ = ["Fanout"]

_Hook = Callable[..., None]


class Fanout(EngineObserver):
    """Calls each observer in attach order, on the hooks it overrides.

    Each hook is bound once, when the fan-out is built (the engine builds a new one on every
    attach and detach): left as the base's no-op when no observer overrides it, set to the one
    overriding observer's bound method, or to a loop over the overriding observers' bound
    methods. A step then pays one call per observer that does something with the event, and
    nothing for those that do not. Hooks are called positionally, as the engine calls them.
    """

    def __init__(self, observers: Sequence[EngineObserver]) -> None:
        self.observers = tuple(observers)
        for name in HOOKS:
            hooks = tuple(getattr(o, name) for o in self.observers if _overrides(o, name))
            if hooks:
                setattr(self, name, hooks[0] if len(hooks) == 1 else _each(hooks))


def _overrides(observer: EngineObserver, name: str) -> bool:
    """Whether ``observer``'s hook ``name`` is its own, not ``EngineObserver``'s no-op."""
    return getattr(getattr(observer, name), "__func__", None) is not getattr(EngineObserver, name)


def _each(hooks: tuple[_Hook, ...]) -> _Hook:
    def forward(*args: Any) -> None:
        for hook in hooks:
            hook(*args)

    return forward
