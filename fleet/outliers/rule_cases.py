"""Cases of the generated outlier rules' promtool test beyond the fleet of five (``rules``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleetwatch.fleet.outliers.exposition import ref_labels
from fleetwatch.fleet.outliers.rule_parts import counter, latency_refs, names, series_name
from fleetwatch.telemetry.profiles import Profile, Signal

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
) -> list[dict[str, Any]]:
    """A fleet with every replica's requests in each histogram's lowest bucket, except one's: 55 %
    there and 45 % in the next, so its interpolated p50 is 1.82x the fleet's (robust z far beyond
    the cutoff; both checked) while both lie in the same bucket: no alert. Empty for a profile
    without latency histograms."""
    refs = latency_refs(profile)
    if not refs:
        return []
    r, m = profile.replica_label, profile.model_label
    skewed = replicas[2]
    series: list[dict[str, str]] = []
    for rep in replicas:
        base = {m: "m", r: rep}
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

    def one() -> list[dict[str, Any]]:  # a fresh list each time: YAML would alias a shared one
        return [{"labels": series_name("", {m: "m", r: skewed}), "value": 1}]

    return [
        {
            "interval": interval,
            "input_series": series,
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": []}],
            "promql_expr_test": [
                {
                    "expr": f'{n0["ratio"]}{{{r}="{skewed}"}} >= bool {o.min_effect:g}',
                    "eval_time": at,
                    "exp_samples": one(),
                },
                {
                    "expr": f'{n0["z"]}{{{r}="{skewed}"}} > bool {o.z_cutoff:g}',
                    "eval_time": at,
                    "exp_samples": one(),
                },
                {
                    "expr": n0["top"],
                    "eval_time": at,
                    "exp_samples": [{"labels": series_name(n0["top"], {m: "m"}), "value": lowest}],
                },
            ],
        }
    ]
