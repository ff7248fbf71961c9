"""Stop strings on streamed text: find the first one, and hold back what could be its start.

Text is fed as it is decoded. ``feed`` returns the text that is safe to send now: everything up
to the longest suffix that is still the beginning of some stop string, which is held back until
later text settles it. When a stop string appears, the text before it is returned and the output
ends there; the stop string itself is never returned (OpenAI's behaviour). The stop string that
ends the output is the one completed first (the earliest end; of two ending together, the
longer), as when text arrives one token at a time, so the answer does not depend on how the
text was split into chunks. ``end`` is the position just after it in the whole output, which is
how many characters, hence tokens, were consumed.

A match is searched only in held-back plus new text: a stop string cannot start in text already
sent, because a suffix that is a prefix of a stop string is always held.

>>> s = StopScanner(("STOP",))
>>> s.feed("abcST"), s.feed("O"), s.feed("Px")
(('abc', None), ('', None), ('', 7))
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopScanner"]


class StopScanner:
    """Feed text in order; see the module docstring."""

    __slots__ = ("_held", "_longest", "_seen", "stops")

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._longest = max((len(s) for s in self.stops), default=0)
        self._held = ""
        self._seen = 0
        """Characters fed before ``_held``."""

    @property
    def held(self) -> str:
        return self._held

    def feed(self, text: str) -> tuple[str, int | None]:
        """(text to send now, end of the stop string in the whole output or None)."""
        buf = self._held + text
        hit, length = -1, 0
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (hit < 0 or (i + len(s), i) < (hit + length, hit)):
                hit, length = i, len(s)
        if hit >= 0:
            end = self._seen + hit + length
            self._seen += len(buf)
            self._held = ""
            return buf[:hit], end
        keep = self._partial(buf)
        cut = len(buf) - keep
        self._seen += cut
        self._held = buf[cut:]
        return buf[:cut], None

    def flush(self) -> str:
        """The output ended without a stop string: the held text is final, send it."""
        out, self._held = self._held, ""
        self._seen += len(out)
        return out

    def _partial(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that begins some stop string."""
        for k in range(min(len(buf), self._longest - 1), 0, -1):
            tail = buf[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return k
        return 0
