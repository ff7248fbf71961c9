"""PromQL for dashboards: profile-aware selectors, template variables, and the checks.

Dashboard expressions carry Grafana template variables (``$model``, ``$replica``,
``$__rate_interval``). ``concrete`` replaces them with fixed values so promtool can parse the
expression; ``metric_names`` lists the series an expression reads so a test can hold it to its
profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fleetwatch.core.profiles import MetricRef, Profile
from fleetwatch.core.profiles.labels import Matcher, parse_matcher_list
from fleetwatch.dashboards.errors import DashboardError

__all__ = [
    "RATE",
    "TEMPLATE_VALUES",
    "Scope",
    "concrete",
    "metric_names",
]

RATE: Final = "$__rate_interval"

# Values substituted for each template variable before promtool sees an expression.
TEMPLATE_VALUES: Final[Mapping[str, str]] = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
    "datasource": "prometheus",
    "model": "model-a",
    "replica": "replica-0",
    "slo": "availability",
    "topk": "10",
}


@dataclass(frozen=True, slots=True)
class Scope:
    """How one profile's series are filtered by the dashboard variables.

    ``fleet`` keeps every replica of the chosen models (the population a replica is compared
    with); ``replica`` narrows to the chosen replicas as well.
    """

    profile: Profile

    @property
    def replica(self) -> str:
        return self.profile.replica_label

    @property
    def model(self) -> str:
        return self.profile.model_label

    @property
    def routing(self) -> tuple[str, ...]:
        """The label scheme's routing labels, each a dashboard variable of its own name."""
        own = (self.model, self.replica)
        return tuple(n for n in self.profile.routing if n not in own)

    @property
    def fleet_by(self) -> str:
        """The grouping of a fleet-wide series: the model and the routing labels."""
        return ", ".join((self.model, *self.routing))

    @property
    def matchers(self) -> tuple[Matcher, ...]:
        """The label scheme's matchers, which every selector of the profile's metrics carries
        (none under the default scheme)."""
        return parse_matcher_list(self.profile.outcomes.total.scope)

    @property
    def pinned(self) -> tuple[str, ...]:
        """The labels the scheme's equality matchers fix (``job="vllm"``), neither the model
        nor a routing label: one value across the scheme's whole fleet."""
        own = (self.model, *self.routing)
        names = (m.name for m in self.matchers if m.op == "=")
        return tuple(n for n in dict.fromkeys(names) if n not in own)

    @property
    def recorded_by(self) -> str:
        """The grouping of a recorded fleet series: ``fleet_by`` and the ``pinned`` labels.

        A pinned label has one value per scheme, so keeping it splits no fleet; it stays on the
        recorded series, so the rules of two schemes (prod's ``namespace="llm-prod"`` and
        staging's) loaded in one Prometheus write distinct series, not the same one twice.
        """
        return ", ".join((self.model, *self.routing, *self.pinned))

    def _routed(self, *matchers: str) -> str:
        return ",".join((*matchers, *(f'{n}=~"${n}"' for n in self.routing)))

    def fleet(self) -> str:
        return self._routed(f'{self.model}=~"$model"')

    def recorded(self, name: str) -> str:
        """A fleet series the profile's recording rules write, for the chosen models, of this
        scheme's fleet only.

        The series keeps only the ``recorded_by`` labels, so the scheme's matchers are applied
        to those: each equality matcher (its label is kept, see ``pinned``), and each regex or
        negative matcher (``=~``, ``!=``, ``!~``) on the model or a routing label. A matcher on
        a label the series does not keep (``instance!~"canary.*"``) is left out: the rule
        applied it to the buckets it summed, and the recorded series has no such label to
        tell one scheme's from another's by (make it a routing label if two schemes differ
        only there).
        """
        kept = {self.model, *self.routing, *self.pinned}
        scheme = [str(m) for m in self.matchers if m.name in kept]
        labels = ",".join((f'profile="{self.profile.name}"', *scheme, self.fleet()))
        return f"{name}{{{labels}}}"

    def chosen(self) -> str:
        return self._routed(f'{self.model}=~"$model"', f'{self.replica}=~"$replica"')

    def hardware(self) -> str:
        """Device series (GPU gauges) carry the replica but not necessarily the model."""
        return self._routed(f'{self.replica}=~"$replica"')

    def rate(self, ref: MetricRef, by: str, *, fleet: bool = False, suffix: str = "") -> str:
        """``sum by (by) (rate(metric[$__rate_interval]))`` over the chosen (or all) replicas."""
        labels = self.fleet() if fleet else self.chosen()
        return f"sum by ({by}) (rate({ref.selector(labels, suffix)}[{RATE}]))"

    def quantile(self, q: float, ref: MetricRef, by: str, *, fleet: bool = False) -> str:
        """The ``q`` quantile of a histogram, per ``by`` (``le`` is added)."""
        grouping = f"le, {by}" if by else "le"
        return (
            f"histogram_quantile({q:g}, {self.rate(ref, grouping, fleet=fleet, suffix='_bucket')})"
        )

    def gauge(self, ref: MetricRef, by: str, agg: str = "avg", *, device: bool = False) -> str:
        labels = self.hardware() if device else self.chosen()
        return f"{agg} by ({by}) ({ref.selector(labels)})"

    def buckets(self, ref: MetricRef) -> str:
        """Bucket increases per interval, the shape Grafana's heatmap reads."""
        return f"sum by (le) (increase({ref.selector(self.chosen(), '_bucket')}[{RATE}]))"


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def concrete(expr: str, values: Mapping[str, str] | None = None) -> str:
    """``expr`` with each template variable replaced by a fixed value from ``values`` (default
    ``TEMPLATE_VALUES``; a running Prometheus wants e.g. ``.*`` for the regex variables)."""
    table = TEMPLATE_VALUES if values is None else values

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        try:
            return table[name]
        except KeyError:
            raise DashboardError(
                f"expression uses unknown template variable '${name}': {expr}"
            ) from None

    return _VARIABLE.sub(substitute, expr)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.:$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_KEYWORDS: Final = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
        "group_right", "bool", "offset", "inf", "nan", "Inf", "NaN", "atan2",
    }
)  # fmt: skip


def metric_names(expr: str) -> frozenset[str]:
    """Series names an expression selects (functions, keywords and labels excluded)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name in _KEYWORDS:
            continue
        names.add(name)
    return frozenset(names)
