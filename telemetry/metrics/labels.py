"""Bound the values of user-supplied labels so a caller cannot explode the series count."""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["OTHER", "LabelCap"]

OTHER: Final = "other"
"""The value every label value beyond the cap is folded into."""


class LabelCap:
    """Keep the first ``max_values`` distinct values of one label; fold the rest into ``other``.

    ``folded`` counts how many times a value was folded (exported as
    ``fleetwatch_telemetry_label_overflow_total{label=...}``). Lookups of known values are one dict
    access; only a new value takes the lock.

    >>> cap = LabelCap("tenant", 2)
    >>> [cap.get(v) for v in ("a", "b", "c", "a")]
    ['a', 'b', 'other', 'a']
    >>> cap.folded
    1
    """

    __slots__ = ("_known", "_lock", "folded", "label", "max_values")

    def __init__(self, label: str, max_values: int) -> None:
        if max_values < 1:
            raise ValueError(f"max_values for label '{label}' must be >= 1, got {max_values}")
        self.label = label
        self.max_values = max_values
        self.folded = 0
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, value: str) -> str:
        """The label value to use for ``value``: itself while under the cap, else ``other``."""
        known = self._known.get(value)
        if known is not None:
            return known
        with self._lock:
            if value in self._known:
                return self._known[value]
            if len(self._known) < self.max_values:
                self._known[value] = value
                return value
            self.folded += 1
            return OTHER

    @property
    def distinct(self) -> int:
        """How many distinct values are kept (at most ``max_values``)."""
        return len(self._known)
