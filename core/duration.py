"""Prometheus-style durations (``5m``, ``1h30m``, ``28d``) as whole seconds, both ways."""

from __future__ import annotations

import re
from typing import Final

from fleetwatch.core.brief import brief

__all__ = ["format_duration", "parse_duration"]

_UNITS: Final[dict[str, int]] = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_PART: Final = re.compile(r"(\d+)([wdhms])")
_WHOLE: Final = re.compile(r"(?:\d+[wdhms])+")


def parse_duration(text: object) -> int:
    """Seconds in ``text`` (``"1h30m"`` -> 5400). Raises ``ValueError`` with a short reason.

    Units are w, d, h, m, s, largest first, as Prometheus writes them; the result is positive.
    """
    if not isinstance(text, str) or not _WHOLE.fullmatch(text.strip()):
        raise ValueError(f"must be a duration such as 5m, 1h30m or 28d, got {brief(text)}")
    parts = _PART.findall(text.strip())
    order = [list(_UNITS).index(unit) for _, unit in parts]
    if order != sorted(set(order)):
        raise ValueError(f"duration units must go from largest to smallest, got {brief(text)}")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in parts)
    if seconds <= 0:
        raise ValueError(f"must be longer than zero, got {brief(text)}")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest Prometheus duration for whole ``seconds`` (5400 -> ``"1h30m"``)."""
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {seconds}")
    out = []
    rest = int(seconds)
    for unit in ("d", "h", "m", "s"):
        n, rest = divmod(rest, _UNITS[unit])
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)
