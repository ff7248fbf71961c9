"""Alerts a spec asks for that cannot work as written, found before any rule is written.

Two ways a valid-looking spec stays silent:

- A burn condition whose error-ratio threshold (burn x error budget) is 100 % or more can never
  fire: an objective of 90 % makes the Workbook's 14.4x page a ratio of 1.44. ``check_reachable``
  refuses it (``SLOSpecError`` naming the alert and the YAML path).
- The Workbook table scaled to a short period at a long evaluation interval is rounded to whole
  intervals, and a window that rounds up spends a larger share of the budget before the alert
  fires: a 1 h period evaluated every 60 s pages only after 48 % of the budget, not 2 %, and both
  page conditions land on the same windows. ``scaling_warnings`` names each such alert and the
  share it really consumes. Windows written in the spec are taken as meant and not warned about.
- A goodput SLO reads a counter the exporter increments against its own target (``engine serve
  --goodput``, ``instrument(goodput=...)``), not against the spec's thresholds. Rules for a
  profile with that counter therefore need the exporter's target stated (``slo rules --goodput
  TTFT,TPOT``), and ``check_goodput_target`` refuses a goodput SLO whose thresholds differ from it:
  otherwise the SLO would silently measure some other target.
"""

from __future__ import annotations

import math
from typing import Final

from fleetwatch.core.duration import format_duration
from fleetwatch.core.goodput import format_goodput_target, same_goodput_target
from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.rules.generate import alert_name
from fleetwatch.slo.spec import (
    BurnWindow,
    GoodputSLI,
    ServiceLevelObjective,
    SLOSpec,
    budget_fraction,
)
from fleetwatch.slo.windows import WORKBOOK_PERIOD_S, WORKBOOK_WINDOWS, scaled_windows

__all__ = ["SHARE_TOLERANCE", "check_goodput_target", "check_reachable", "scaling_warnings"]

SHARE_TOLERANCE: Final = 0.25
"""How far (relative) a scaled condition's budget share may stray from the Workbook's before
``scaling_warnings`` says so."""


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def _windows(w: BurnWindow) -> str:
    return f"{w.burn:g}x over {format_duration(w.long_s)} and {format_duration(w.short_s)}"


def _is_workbook(slo: ServiceLevelObjective, interval_s: int) -> bool:
    return slo.windows == scaled_windows(slo.period_s, interval_s)


def check_reachable(spec: SLOSpec) -> None:
    """``SLOSpecError`` for the first burn condition that can never fire (burn x budget >= 1),
    naming its alert, the share of the budget it claims, and what every request failing
    would really spend in its long window."""
    for slo in spec.slos:
        if not slo.alerting.enabled:
            continue
        workbook = _is_workbook(slo, spec.evaluation_interval_s)
        for j, w in enumerate(slo.windows):
            threshold = slo.threshold(w)
            if threshold < 1:
                continue
            most = 1 / slo.error_budget  # the burn rate of every request failing
            needs = w.budget_fraction(slo.period_s)
            spends = budget_fraction(most, w.long_s, slo.period_s)
            floor = 100 * (1 - 1 / w.burn)
            raise SLOSpecError(
                f"alert {alert_name(slo, w.severity)} ({w.severity}, {_windows(w)}) can never "
                f"fire: its threshold is an error ratio of {_pct(threshold)} ({w.burn:g} x the "
                f"{_pct(slo.error_budget)} error budget of objective {slo.objective:g}%). It "
                f"claims to fire after {_pct(needs)} of the budget, but even with every request "
                f"failing the budget burns at most {most:.3g}x and only {_pct(spends)} of it is "
                f"spent in {format_duration(w.long_s)}; raise the objective above {floor:.4g}% "
                f"or give windows with a burn factor below {most:.3g}",
                path=f"{slo.path}.objective" if workbook else f"{slo.path}.windows[{j}].burn",
            )


def scaling_warnings(spec: SLOSpec) -> list[str]:
    """One line per alert condition whose Workbook window, scaled to the SLO's period and
    rounded to whole evaluation intervals, spends a share of the budget more than
    ``SHARE_TOLERANCE`` away from the Workbook's, and per alert whose conditions collapsed onto
    the same windows."""
    out: list[str] = []
    interval = spec.evaluation_interval_s
    for slo in spec.slos:
        if not slo.alerting.enabled or not _is_workbook(slo, interval):
            continue
        period = format_duration(slo.period_s)
        for w, base in zip(slo.windows, WORKBOOK_WINDOWS, strict=True):
            real = w.budget_fraction(slo.period_s)
            meant = base.budget_fraction(WORKBOOK_PERIOD_S)
            if abs(real / meant - 1) <= SHARE_TOLERANCE:
                continue
            ideal_long = base.long_s * slo.period_s / WORKBOOK_PERIOD_S
            out.append(
                f"{slo.path} ({slo.name}): alert {alert_name(slo, w.severity)} ({w.severity}, "
                f"{_windows(w)}) fires only after {_pct(real)} of the error budget, not the "
                f"Workbook's {_pct(meant)}: its {format_duration(base.long_s)} window scaled to a "
                f"{period} period is {ideal_long:.3g} s, rounded to whole {interval} s evaluation "
                f"intervals. {_remedy(slo.period_s, interval)}"
            )
        for severity in ("page", "ticket"):
            same = [w for w in slo.windows if w.severity == severity]
            shapes = {(w.long_s, w.short_s) for w in same}
            if len(same) > 1 and len(shapes) < len(same):
                burns = " and ".join(f"{w.burn:g}x" for w in same)
                lowest = min(w.burn for w in same)
                w0 = same[0]
                out.append(
                    f"{slo.path} ({slo.name}): alert {alert_name(slo, severity)} ({severity}): "
                    f"its {burns} conditions collapsed onto the same windows "
                    f"({format_duration(w0.long_s)} and {format_duration(w0.short_s)}), so the "
                    f"{lowest:g}x one always fires first and the others never decide anything. "
                    f"{_remedy(slo.period_s, interval)}"
                )
    return out


def _remedy(period_s: int, interval_s: int) -> str:
    # The shortest Workbook long window is 1/720 of the period; rounding moves it by up to half
    # an interval, which stays within the tolerance while interval <= 2 x tolerance x window.
    shortest = WORKBOOK_WINDOWS[0].long_s * period_s / WORKBOOK_PERIOD_S
    most = max(1, math.floor(2 * SHARE_TOLERANCE * shortest))
    scale = WORKBOOK_PERIOD_S / WORKBOOK_WINDOWS[0].long_s
    least = math.ceil(interval_s / (2 * SHARE_TOLERANCE) * scale)
    return (
        f"Evaluate at most every {format_duration(most)}, or lengthen the period to at least "
        f"{format_duration(least)}, or give the windows explicitly."
    )


def check_goodput_target(
    spec: SLOSpec, profile: Profile | None, target: tuple[float, float] | None
) -> None:
    """``SLOSpecError`` for the first goodput SLO whose thresholds differ from the exporter's
    goodput ``target`` (TTFT s, TPOT s), or, on a ``profile`` that counts goodput, for one
    written while the target is not stated (None). Without a profile and a target there is
    nothing to compare with."""
    for slo in spec.slos:
        sli = slo.sli
        if not isinstance(sli, GoodputSLI):
            continue
        mine = (sli.ttft_s, sli.tpot_s)
        if target is None:
            if profile is None or not profile.has(Signal.GOODPUT):
                continue
            raise SLOSpecError(
                f"goodput SLO {slo.name!r} reads {profile.metric(Signal.GOODPUT).name}, which "
                "the exporter counts against its own goodput target, not against this spec: "
                "state that target with --goodput TTFT,TPOT (what engine serve --goodput or "
                f"instrument(goodput=...) was given; --goodput {format_goodput_target(mine)} "
                "for this SLO's thresholds)",
                path=f"{slo.path}.sli",
            )
        if not same_goodput_target(mine, target):
            raise SLOSpecError(
                f"goodput SLO {slo.name!r} has TTFT <= {mine[0]:g} s and TPOT <= {mine[1]:g} s, "
                f"but the exporter counts goodput against TTFT <= {target[0]:g} s and TPOT <= "
                f"{target[1]:g} s (--goodput {format_goodput_target(target)}): the SLO would "
                "measure that target, not its own; make the two equal",
                path=f"{slo.path}.sli",
            )
