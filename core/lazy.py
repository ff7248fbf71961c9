"""Package attributes imported on first use: a module ``__getattr__`` (PEP 562) from a table.

A package re-exports its public names so users import one place, but importing the package must
not import what only some of them need (pandas, aiohttp, torch): ``fleetwatch --help`` and the
serving process stay light.

>>> __getattr__ = lazy_attributes(__name__, {"LLMEngine": "llm_engine"})  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes", "lazy_dir"]


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``package``: ``where`` maps each name to the module that defines it,
    relative to ``package`` (``"llm_engine"``) or absolute (``"fleetwatch.telemetry.hooks"``).
    The value is cached in the package, so each name is looked up once."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = module if module.startswith("fleetwatch.") else f"{package}.{module}"
        value = getattr(importlib.import_module(target), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def lazy_dir(names: list[str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` that lists the public names, loaded or not (for ``dir()`` and tab
    completion)."""
    return lambda: sorted(names)
