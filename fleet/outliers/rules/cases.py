"""Cases of the generated outlier rules' promtool test beyond the fleet of five (``rules``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.core.rules import AlertCase, ExpectedSample, ExprCase, InputSeries, RuleTest
from fleetwatch.fleet.outliers.rules.parts import (
    counter,
    fleet_of,
    kept,
    latency_refs,
    names,
    replica_match,
    series_name,
    test_labels,
)
from fleetwatch.fleet.outliers.sources.exposition import ref_labels

__all__ = ["same_bucket_case"]


def same_bucket_case(
    profile: Profile,
    o: Any,
    replicas: Sequence[str],
    *,
    alert: str,
    interval: str,
    at: str,
    per_min: int,
    minutes: int,
) -> list[RuleTest]:
    """A fleet with every replica's requests in each histogram's lowest bucket, except one's: 55 %
    there and 45 % in the next, so its interpolated p50 is 1.82x the fleet's (robust z far beyond
    the cutoff; both checked) while both lie in the same bucket: no alert. Empty for a profile
    without latency histograms."""
    refs = latency_refs(profile)
    if not refs:
        return []
    skewed = replicas[2]
    series: list[InputSeries] = []
    for rep in replicas:
        base = test_labels(profile, "m", rep)
        if profile.has(Signal.PROMPT_TOKENS):
            tokens = profile.metric(Signal.PROMPT_TOKENS)
            series.append(
                counter(tokens.name, {**base, **ref_labels(tokens)}, per_min * 40, minutes)
            )
        for _name, ref in refs:
            bounds = [b for b in ref.buckets if b > 0]
            first = per_min * 55 // 100 if rep == skewed else per_min
            for le, n in ((bounds[0], first), (bounds[1], per_min), (float("inf"), per_min)):
                le_s = "+Inf" if le == float("inf") else f"{le:g}"
                series.append(counter(ref.name + "_bucket", {**base, "le": le_s}, n, minutes))
        outcomes = (profile.outcomes.total, profile.outcomes.good)
        for outcome in (o_ for o_ in outcomes if o_ is not None):
            series.append(counter(outcome.name, {**base, **ref_labels(outcome)}, per_min, minutes))
    name0, ref0 = refs[0]
    lowest = next(b for b in ref0.buckets if b > 0)
    n0 = names(name0, o.window)

    labels = test_labels(profile, "m", skewed)
    one = (ExpectedSample(series_name("", kept(profile, labels)), 1),)
    match = replica_match(profile, labels)
    return [
        RuleTest(
            interval,
            tuple(series),
            (AlertCase(at, alert),),
            (
                ExprCase(f"{n0['ratio']}{match} >= bool {o.min_effect:g}", at, one),
                ExprCase(f"{n0['z']}{match} > bool {o.z_cutoff:g}", at, one),
                ExprCase(
                    n0["top"],
                    at,
                    (ExpectedSample(series_name(n0["top"], fleet_of(profile, labels)), lowest),),
                ),
            ),
        )
    ]
