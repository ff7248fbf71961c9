"""What went wrong in a probe run: failed requests counted by cause, most frequent first."""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["failure_causes", "failure_text"]

_CAUSE_CHARS = 160


def _cause(r: Any) -> str:
    if r.http_status is not None and r.http_status != 200 and not r.error:
        return f"HTTP {r.http_status}"
    text = " ".join(str(r.error or r.status or "error").split())
    return text if len(text) <= _CAUSE_CHARS else text[: _CAUSE_CHARS - 3] + "..."


def failure_causes(run: Any) -> tuple[int, int, list[tuple[str, int]]]:
    """(failed, total, [(cause, count), ...] most frequent first) over every level of ``run``."""
    total = 0
    causes: Counter[str] = Counter()
    for level in run.levels:
        for r in level.results:
            total += 1
            if not r.ok:
                causes[_cause(r)] += 1
    return sum(causes.values()), total, causes.most_common()


def failure_text(causes: list[tuple[str, int]], top: int = 3) -> str:
    """``cause (xN); cause (xM)`` for the ``top`` causes, and how many others."""
    shown = "; ".join(f"{cause} (x{n})" for cause, n in causes[:top])
    rest = len(causes) - top
    return shown + (f"; {rest} other cause(s)" if rest > 0 else "")
