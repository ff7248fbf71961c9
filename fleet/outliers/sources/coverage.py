"""No judgement without the data it claims: replicas the Prometheus readers found nothing for.

A replica with no request count (neither the profile's outcome counter nor a latency histogram's
``_count``) or with no signal at all cannot be judged, and a fleet of such replicas must not come
back as "no outlier". The readers ask ``without_data`` which replicas are empty and raise
``insufficient_data`` naming them, with a hint when another profile's series are there instead
(the usual cause: the wrong ``--profile``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping

from fleetwatch.core.profiles import PROFILES, Profile
from fleetwatch.fleet.errors import AnalysisError

__all__ = ["insufficient_data", "profiles_present", "without_data"]

_SUFFIXES = ("_bucket", "_count", "_sum", "_created", "_total")


def without_data(
    replicas: Iterable[str],
    volume: Mapping[str, float],
    values: Mapping[str, Mapping[str, float]],
) -> list[str]:
    """Replicas with no request count (volume missing or NaN) or no finite signal at all.

    ``values`` is column -> replica -> value. A replica with a count of zero is not listed: it
    has data (no requests), and the detector's minimum-volume gate says so.
    """
    out = []
    for r in replicas:
        v = volume.get(r, math.nan)
        if math.isnan(v) or (
            v > 0 and not any(not math.isnan(col.get(r, math.nan)) for col in values.values())
        ):
            out.append(r)
    return out


def _stems(names: Iterable[str]) -> set[str]:
    out = set()
    for n in names:
        out.add(n)
        out.update(n[: -len(s)] for s in _SUFFIXES if n.endswith(s))
    return out


def profiles_present(names: Collection[str], profile: Profile) -> list[str]:
    """Other known profiles with at least one series among ``names`` (sample or metric names)."""
    mine = _stems(names)
    return [
        other.name
        for other in PROFILES.values()
        if other.name != profile.name and mine & _stems(other.metric_names())
    ]


def insufficient_data(
    where: Iterable[str], profile: Profile, others: Collection[str], empty: bool = False
) -> AnalysisError:
    """The one-line error: what is missing, where, and the likely reason."""
    places = ", ".join(where)
    msg = f"no {profile.outcomes.total.name} or latency series in {places}"
    if others:
        msg += f": wrong --profile? ({', '.join(others)} series found)"
    elif empty:
        msg += ": no series at all (empty snapshot?)"
    else:
        msg += f": insufficient data to judge (profile '{profile.name}')"
    return AnalysisError(msg)
