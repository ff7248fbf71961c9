"""Bound the values of user-supplied labels so a caller cannot explode the series count, nor
the size of one series: each value is cut to ``max_length`` characters, and only the first
``max_values`` distinct values are kept."""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["MAX_LABEL_LENGTH", "OTHER", "LabelCap"]

OTHER: Final = "other"
"""The value every label value beyond the cap is folded into."""
MAX_LABEL_LENGTH: Final = 128
"""Characters of a label value kept by default; a longer value is cut (and counted)."""


class LabelCap:
    """Keep the first ``max_values`` distinct values of one label; fold the rest into ``other``.
    Values longer than ``max_length`` characters are cut to that length first.

    ``folded`` counts how many times a value was folded (exported as
    ``fleetwatch_telemetry_label_overflow_total{label=...}``), ``truncated`` how many times a
    value was cut (``fleetwatch_telemetry_label_truncated_total{label=...}``). Lookups of known
    values are one dict access; only a new or long value takes the lock.

    >>> cap = LabelCap("tenant", 2, max_length=4)
    >>> [cap.get(v) for v in ("a", "bbbbbbbb", "c", "a", "bbbbzz")]
    ['a', 'bbbb', 'other', 'a', 'bbbb']
    >>> cap.folded, cap.truncated
    (1, 2)
    """

    __slots__ = ("_known", "_lock", "folded", "label", "max_length", "max_values", "truncated")

    def __init__(self, label: str, max_values: int, max_length: int = MAX_LABEL_LENGTH) -> None:
        if max_values < 1:
            raise ValueError(f"max_values for label '{label}' must be >= 1, got {max_values}")
        if max_length < 1:
            raise ValueError(f"max_length for label '{label}' must be >= 1, got {max_length}")
        self.label = label
        self.max_values = max_values
        self.max_length = max_length
        self.folded = 0
        self.truncated = 0
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, value: str) -> str:
        """The label value to use for ``value``: itself (cut to ``max_length``) while under the
        cap, else ``other``."""
        known = self._known.get(value)
        if known is not None:
            return known
        if len(value) > self.max_length:
            with self._lock:
                self.truncated += 1
            value = value[: self.max_length]
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
