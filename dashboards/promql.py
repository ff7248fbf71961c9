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

    def _routed(self, *matchers: str) -> str:
        return ",".join((*matchers, *(f'{n}=~"${n}"' for n in self.routing)))

    def fleet(self) -> str:
        return self._routed(f'{self.model}=~"$model"')

    def recorded(self, name: str) -> str:
        """A fleet series the profile's recording rules write, for the chosen models."""
        return f'{name}{{profile="{self.profile.name}",{self.fleet()}}}'

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
