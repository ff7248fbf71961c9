"""The goodput target as text: ``TTFT,TPOT`` in seconds (``0.5,0.05``), both ways.

One spelling for every place that names the target: ``fleetwatch engine serve --goodput`` (what
the exporter counts ``fleetwatch_goodput_requests_total`` against) and ``fleetwatch slo rules
--goodput`` (what a goodput SLO's thresholds must equal).
"""

from __future__ import annotations

import math

__all__ = ["format_goodput_target", "parse_goodput_target", "same_goodput_target"]


def parse_goodput_target(text: str) -> tuple[float, float]:
    """``"0.5,0.05"`` -> (0.5, 0.05): TTFT and TPOT targets in seconds, both positive.
    Raises ``ValueError`` with a short reason."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 2:
        raise ValueError(
            f"goodput target must be TTFT,TPOT in seconds (e.g. 0.5,0.05), got {text!r}"
        )
    values = []
    for name, part in zip(("TTFT", "TPOT"), parts, strict=True):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(
                f"goodput target: {name} must be a number of seconds, got {part!r}"
            ) from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"goodput target: {name} must be positive seconds, got {part!r}")
        values.append(value)
    return values[0], values[1]


def format_goodput_target(target: tuple[float, float]) -> str:
    """(0.5, 0.05) -> ``"0.5,0.05"``."""
    return f"{target[0]:g},{target[1]:g}"


def same_goodput_target(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two targets are the same up to float spelling (``0.05`` and ``5e-2``)."""
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0) for x, y in zip(a, b, strict=True))
