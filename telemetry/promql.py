"""Label matchers as metric profiles write them: ``name="value",…`` parsed to a dict and back.

A profile's ``MetricRef.matchers`` select one signal inside a shared metric (``status="error"``).
The SLO rule generator and the fleet tools both need those labels as a dict (to write test series,
to pick samples from a ``/metrics`` snapshot), so the grammar lives here, once:

- a matcher is ``name = "value"``: a label name (``[A-Za-z_][A-Za-z0-9_]*``), ``=``, and a
  double-quoted string in which a backslash escapes the next character (``\\"``, ``\\\\``);
- matchers are separated by commas; blanks around names, ``=``, values and commas are ignored;
- only equality: ``!=``, ``=~`` and ``!~`` are rejected, since a label set cannot be read from
  them;
- the empty string is no matchers at all: ``{}``.

Values come back as written between the quotes: escapes are kept, not decoded (``"a\\"b"``
gives ``a\\"b``), and ``format_matchers`` writes them back unchanged, so the two round-trip.
Commas split matchers before quotes are read, so a value holding a comma is rejected.

Two parsers used to exist and differed only in what they forgave. The SLO one (kept) is the
stricter: an empty matcher between commas, a trailing comma, or text of blanks only is an
error; the fleet one skipped those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["MatcherError", "equality_labels", "format_matchers", "parse_matchers"]

_EQUALITY = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')


class MatcherError(ValueError):
    """A matcher that is not ``name="value"``; ``part`` is the offending matcher, stripped."""

    def __init__(self, part: str) -> None:
        super().__init__(f'unsupported label matcher {part!r} (only name="value")')
        self.part = part


def parse_matchers(text: str) -> dict[str, str]:
    """The labels that ``text`` (``name="value",…``, no braces) selects by equality.

    A name given twice keeps its last value. Raises ``MatcherError`` on the first matcher that
    is not an equality on a double-quoted value (see the module docstring for the grammar).
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split(","):
        m = _EQUALITY.fullmatch(part)
        if m is None:
            raise MatcherError(part.strip())
        out[m.group(1)] = m.group(2)
    return out


def equality_labels(text: str) -> dict[str, str] | None:
    """``parse_matchers(text)``, or None where it would raise (the caller falls back)."""
    try:
        return parse_matchers(text)
    except MatcherError:
        return None


def format_matchers(labels: Mapping[str, str]) -> str:
    """``name="value",…`` for ``labels``, values written verbatim (already escaped, as
    ``parse_matchers`` returns them); the inverse of ``parse_matchers``."""
    return ",".join(f'{k}="{v}"' for k, v in labels.items())
