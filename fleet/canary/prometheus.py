"""A canary's and its baseline's windows from a Prometheus server, by label matchers.

Each side is the series its matchers select (``--canary 'pod="vllm-7"'``, ``--baseline
'pod=~"vllm-[0-6]"'``) under the profile's label scheme (``--labels``), summed over the side:
per latency signal ``sum by (le) (increase(<histogram>_bucket{…}[window]))`` (and so the
output length, where the profile has a per-request histogram of it: vLLM's
``vllm:request_generation_tokens``), and the requests
``increase`` of the profile's request counter by outcome: every value of the label it splits
outcomes by (vLLM's ``finished_reason``: ``stop``, ``length``, ``abort``, ``error``; the output
shape, live), else each outcome counter the profile names (errors, aborts). The two sides must
not share a replica, and must serve the same models: both are checked first.
"""

from __future__ import annotations

import json
import math
import re

from fleetwatch.core.identity import Identity, IdentityError
from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.profiles.types import by
from fleetwatch.fleet.canary.judge import OUTPUT_LENGTH, Side
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.sources.exposition import (
    LATENCY_SOURCES,
    per_request,
    signal_ref,
)
from fleetwatch.fleet.outliers.sources.prometheus import Fetch, http_get, query_vector

__all__ = ["check_selector", "outcome_label", "sides_from_prometheus"]

_ONE_EQUAL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"\s*')
"""One ``label="value"`` matcher: how a profile names an outcome of its request counter."""
_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def check_selector(text: str, option: str) -> str:
    """``text`` when it is a non-empty comma-separated list of PromQL label matchers
    (``name="v"``, ``!=``, ``=~``, ``!~``); ``AnalysisError`` naming ``option`` otherwise."""
    rest = text.strip()
    if not rest:
        raise AnalysisError(f'{option}: give label matchers, e.g. pod="vllm-7"')
    while rest:
        m = _MATCHER.match(rest)
        if m is None:
            raise AnalysisError(
                f'{option}: {text!r} is not a list of label matchers (name="value", name=~"re")'
            )
        rest = rest[m.end() :]
        if rest.startswith(","):
            rest = rest[1:]
            if not rest.strip():
                raise AnalysisError(f"{option}: {text!r} ends with a comma")
        elif rest.strip():
            raise AnalysisError(f"{option}: {text!r}: expected ',' after {m.group(0).strip()!r}")
    return text.strip()


def outcome_label(profile: Profile) -> str | None:
    """The label the request counter splits outcomes by (vLLM's ``finished_reason``,
    fleetwatch's ``status``), where the profile's outcome counters are that counter with one
    ``label="value"`` matcher; None otherwise (outcomes are then counted one counter each)."""
    total = profile.outcomes.total
    found = set()
    for ref in profile.outcomes.bad.values():
        m = _ONE_EQUAL.fullmatch(ref.matchers)
        if ref.name != total.name or m is None:
            return None
        found.add(m.group(1))
    return found.pop() if len(found) == 1 else None


def _scalar(url: str, expr: str, at: float | None, get: Fetch) -> float:
    got = [v for v in query_vector(url, expr, at, get).values() if math.isfinite(v)]
    return sum(got) if got else 0.0


def _cumulative(
    url: str, ref: MetricRef, selector: str, window: str, at: float | None, get: Fetch
) -> dict[float, float]:
    """A histogram's cumulative buckets ``{le: requests}`` over the window, summed over a side."""
    expr = f"sum by (le) (increase({ref.selector(selector, '_bucket')}[{window}]))"
    cumulative: dict[float, float] = {}
    for key, v in query_vector(url, expr, at, get).items():
        le = json.loads(key).get("le")
        try:
            bound = float(le)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):  # "1" and "1.0" are one bound
            cumulative[bound] = cumulative.get(bound, 0.0) + v
    return cumulative


def _side(
    url: str, profile: Profile, selector: str, window: str, at: float | None, get: Fetch
) -> Side:
    refs = {}
    once = per_request(profile)
    for name, sigs in LATENCY_SOURCES:
        ref = signal_ref(profile, *sigs)
        if ref is not None and name in once:  # a per-token histogram's samples are not requests
            refs[name] = ref
    length = profile.signals.get(Signal.OUTPUT_LENGTH)
    if length is not None and length.kind == "histogram":
        refs[OUTPUT_LENGTH] = length
    histograms = {}
    for name, ref in refs.items():
        cumulative = _cumulative(url, ref, selector, window, at, get)
        if cumulative:
            histograms[name] = cumulative
    outcomes = profile.outcomes
    total = _scalar(url, f"sum(increase({outcomes.total.selector(selector)}[{window}]))", at, get)
    rates: dict[str, int] = {}
    label = outcome_label(profile)
    if label is not None:
        expr = f"sum by ({label}) (increase({outcomes.total.selector(selector)}[{window}]))"
        counts: dict[str, float] = {}
        for key, v in query_vector(url, expr, at, get).items():
            value = str(json.loads(key).get(label, ""))
            counts[value] = counts.get(value, 0.0) + v
        rates = {f"{label}={k}": round(v) for k, v in counts.items() if math.isfinite(v)}
        failures = frozenset(
            f"{label}={m.group(2)}"
            for ref in outcomes.bad.values()
            if (m := _ONE_EQUAL.fullmatch(ref.matchers))
        )
        return Side(histograms, round(total), rates, failures)
    if outcomes.good is not None:
        good = _scalar(url, f"sum(increase({outcomes.good.selector(selector)}[{window}]))", at, get)
        rates["error_rate"] = max(round(total - good), 0)
    for outcome, ref in sorted(outcomes.bad.items()):
        n = _scalar(url, f"sum(increase({ref.selector(selector)}[{window}]))", at, get)
        rates["error_rate" if outcome == "error" else f"{outcome}_rate"] = round(n)
    return Side(histograms, round(total), rates, frozenset(rates))


def _members(
    url: str, profile: Profile, selector: str, window: str, at: float | None, get: Fetch
) -> tuple[set[str], set[str]]:
    """The replicas and the models a side's request counter has series for in the window."""
    ident = Identity(profile.replica_labels)
    labels = by((profile.model_label, *profile.replica_labels))
    expr = f"group by ({labels}) (increase({profile.outcomes.total.selector(selector)}[{window}]))"
    replicas, models = set(), set()
    for key in query_vector(url, expr, at, get):
        series = json.loads(key)
        try:
            replicas.add(ident.key(series))
        except IdentityError:
            continue
        models.add(series.get(profile.model_label, ""))
    return replicas, models


def sides_from_prometheus(
    url: str,
    profile: Profile,
    *,
    baseline: str,
    canary: str,
    window: str = "10m",
    at: float | None = None,
    fetch: Fetch | None = None,
) -> tuple[Side, Side, list[str]]:
    """(baseline, canary, notes): each side's window, after checking that the sides hold
    replicas, share none and serve the same models."""
    get = fetch or http_get
    base_reps, base_models = _members(url, profile, baseline, window, at, get)
    can_reps, can_models = _members(url, profile, canary, window, at, get)
    counter = profile.outcomes.total.name
    for option, sel, reps in (("--baseline", baseline, base_reps), ("--canary", canary, can_reps)):
        if not reps:
            raise AnalysisError(
                f"{option} {sel}: no replica has {counter} series in the last {window} on {url}"
            )
    shared = sorted(base_reps & can_reps)
    if shared:
        raise AnalysisError(
            f"--baseline and --canary both select {', '.join(shared[:3])}: a canary is judged "
            "against other replicas"
        )
    if base_models != can_models:
        raise AnalysisError(
            f"the baseline serves {', '.join(sorted(base_models))} and the canary "
            f"{', '.join(sorted(can_models))}: narrow both to one model "
            f'({profile.model_label}="…")'
        )
    notes = [
        f"baseline: {len(base_reps)} replicas ({baseline}); canary: {len(can_reps)} ({canary}); "
        f"model {', '.join(sorted(base_models))}; last {window} on {url}"
    ]
    return (
        _side(url, profile, baseline, window, at, get),
        _side(url, profile, canary, window, at, get),
        notes,
    )
