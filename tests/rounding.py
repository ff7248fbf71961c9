"""Reports compared to the last digits that float summation order leaves alone."""

from __future__ import annotations

from typing import Any


def rounded(obj: Any, digits: int = 9) -> Any:
    """``obj`` (a JSON document) with each float to ``digits`` significant digits: a query
    engine and an in-memory pass sum the same rows in their own order, so sums agree to the last
    few bits only."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rounded(v, digits) for v in obj]
    return obj
