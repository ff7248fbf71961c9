"""The four dashboard views, each a function from a metric profile to rows of panels.

``views_for`` says which a profile gets: every profile the SLO, fleet and replica views; the
resilience view only profiles that can have its series (``fleetwatch.dashboards.names.RESILIENCE_PROFILES``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from fleetwatch.core.profiles import Profile
from fleetwatch.dashboards.names import has_resilience
from fleetwatch.dashboards.panels import RowSpec
from fleetwatch.dashboards.views.fleet import fleet_rows
from fleetwatch.dashboards.views.replica import replica_rows
from fleetwatch.dashboards.views.resilience import resilience_rows
from fleetwatch.dashboards.views.slo import slo_rows

__all__ = ["VIEWS", "View", "views_for"]

View = Callable[[Profile], tuple[RowSpec, ...]]

# view name -> (dashboard title suffix, rows)
VIEWS: Final[Mapping[str, tuple[str, View]]] = {
    "slo": ("SLO overview", slo_rows),
    "fleet": ("fleet", fleet_rows),
    "replica": ("replica drill-down", replica_rows),
    "resilience": ("resilience", resilience_rows),
}


def views_for(profile: Profile) -> tuple[str, ...]:
    """The views generated for ``profile``, in ``VIEWS`` order."""
    return tuple(v for v in VIEWS if v != "resilience" or has_resilience(profile))
