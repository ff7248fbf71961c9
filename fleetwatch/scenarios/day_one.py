"""Day one, as rules: every rule a newcomer generates for the fleetwatch profile from what ships.

- SLO rules from ``slo/examples/chat.yaml`` (``fleetwatch slo rules``, with the goodput target the
  fleet is served with), its periods and windows divided by ``SCALE`` and evaluated every second,
  as the demo does with its 12 h period, so the page windows are seconds (30 s and 2 s for the
  30-day SLO) and the shares of the budget each alert spends stay the Workbook's;
- outlier rules (``fleetwatch fleet rules``) with a rate window and ``for:`` of seconds;
- operational alerts (``fleetwatch.dashboards.alerts``) with every ``for:`` and rate window in seconds.

The acceptance test loads all three into a real Prometheus scraping a real fleet.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from fleetwatch.core.duration import format_duration, parse_duration
from fleetwatch.core.goodput import format_goodput_target
from fleetwatch.core.profiles import get_profile
from fleetwatch.dashboards.alerts import Thresholds, render_yaml, rules_document

__all__ = [
    "CHAT_SPEC",
    "GOODPUT",
    "OPERATIONAL",
    "OUTLIER_FOR",
    "OUTLIER_WINDOW",
    "SCALE",
    "DayOneRules",
    "scaled_spec",
    "write_rules",
]

CHAT_SPEC: Final = Path(__file__).resolve().parents[1] / "slo" / "examples" / "chat.yaml"
SCALE: Final = 120
"""SLO periods and windows are divided by this: 30d -> 6h, whose page windows are 30 s and 2 s."""
GOODPUT: Final = (0.5, 0.05)
"""The goodput target the fleet is served with (``engine serve --goodput 0.5,0.05``), which is
the one ``chat.yaml``'s goodput SLO states."""
ABSENT_FOR: Final = "10s"
OUTLIER_WINDOW: Final = "30s"
OUTLIER_FOR: Final = "10s"
OPERATIONAL: Final = Thresholds(
    kv_for="5s",
    preemption_for="5s",
    throttle_for="5s",
    breaker_open_for="1s",
    retry_for="5s",
    telemetry_for="5s",
    window="20s",
)


def _scaled(text: str) -> str:
    return format_duration(max(1, parse_duration(text) // SCALE))


def scaled_spec(source: Path = CHAT_SPEC) -> dict[str, Any]:
    """``source`` with every period, window and ``absent_for`` in seconds, rules every second."""
    data = copy.deepcopy(yaml.safe_load(source.read_text(encoding="utf-8")))
    data["evaluation_interval"] = "1s"
    for slo in data["slos"]:
        slo["period"] = _scaled(slo.get("period", "30d"))
        for window in slo.get("windows") or ():
            window["long"] = _scaled(window["long"])
            window["short"] = _scaled(window["short"])
        slo.setdefault("alerting", {})["absent_for"] = ABSENT_FOR
    return dict(data)


@dataclass(frozen=True, slots=True)
class DayOneRules:
    """The rule files written, and the SLO spec (scaled) they came from."""

    spec: Path
    files: tuple[Path, ...]
    slo_output: str


def write_rules(folder: Path) -> DayOneRules:
    """Write the scaled spec and the three rule files into ``folder`` through the commands a
    user runs (``slo rules``, ``fleet rules``) and ``fleetwatch.dashboards.alerts`` for the thresholds the
    command line does not take."""
    import contextlib
    import io

    from fleetwatch.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "chat.yaml"
    spec.write_text(yaml.safe_dump(scaled_spec(), sort_keys=False))
    slo_rules = folder / "slo.rules.yaml"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(
            [
                *("slo", "rules", str(spec), "--profile", "fleetwatch"),
                *("--goodput", format_goodput_target(GOODPUT), "-o", str(slo_rules)),
            ]
        )
        if status != 0:
            raise RuntimeError(f"slo rules failed: {err.getvalue()}")
        fleet_rules = folder / "outliers.rules.yaml"
        status = main(
            [
                *("fleet", "rules", "--profile", "fleetwatch", "-o", str(fleet_rules)),
                *("--window", OUTLIER_WINDOW, "--for", OUTLIER_FOR),
            ]
        )
        if status != 0:
            raise RuntimeError(f"fleet rules failed: {err.getvalue()}")
    ops = folder / "operational.rules.yaml"
    ops.write_text(render_yaml(rules_document(get_profile("fleetwatch"), thresholds=OPERATIONAL)))
    return DayOneRules(spec, (slo_rules, fleet_rules, ops), out.getvalue() + err.getvalue())
