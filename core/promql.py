"""PromQL building: label matchers as metric profiles write them (``name="value",…`` parsed to a
dict and back), string literals, regex escapes, and ``le`` bounds and matchers.

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

import math
import re
from collections.abc import Mapping
from decimal import Decimal

__all__ = [
    "MatcherError",
    "equality_labels",
    "format_le",
    "format_matchers",
    "le_matcher",
    "parse_matchers",
    "quote",
    "regex_escape",
]

_REGEX_SPECIAL = set(r"\.^$|?*+()[]{}")

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


def quote(value: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_le(value: float) -> str:
    """The shortest plain decimal for a bucket bound, as Go clients write it (``1``, ``0.5``,
    ``0.00001``, never an exponent): the shortest round-trip digits, written positionally."""
    if not math.isfinite(value):
        return str(value)
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def le_matcher(value: float) -> str:
    """An ``le`` matcher that matches the bound however it is spelled: ``0.5``, ``0.50``, ``1``,
    ``1.0``. Prometheus 3 rewrites classic-histogram ``le`` values to float form (``1`` becomes
    ``1.0``) while older servers keep what the client exposed, so an exact match breaks on
    upgrade. The dot is written as ``[.]`` to need no escaping."""
    text = format_le(value)
    if "." in text:
        whole, frac = text.split(".")
        return f'le=~"{whole}[.]{frac}0*"'
    return f'le=~"{text}([.]0+)?"'


def regex_escape(value: str) -> str:
    """``value`` as a literal inside a PromQL (RE2) regex: each special character escaped."""
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in value)
