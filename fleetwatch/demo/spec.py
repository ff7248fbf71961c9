"""The demo's SLO spec: where it lives, and the SLO whose page alert the demo watches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PAGE_SLO", "SPEC_PATH", "page_alert"]

SPEC_PATH = Path(__file__).with_name("slo.yaml")
"""The demo's SLO spec (12 h period, rules evaluated every second)."""

PAGE_SLO = "availability"
"""The SLO the error burst must page on."""


def page_alert(spec: Any) -> str:
    """The name of ``PAGE_SLO``'s page alert in ``spec``."""
    from fleetwatch.slo.rules.generate import alert_name

    slo = next(s for s in spec.slos if s.name == PAGE_SLO)
    return alert_name(slo, "page")
