"""A fleet's label scheme: which labels name a replica and its model, which route alerts, and
which matchers pick this fleet's series out of a shared Prometheus.

Every generator that writes PromQL (SLO rules, outlier rules, operational alerts, dashboards,
capacity rules and the KEDA query, ``fleet outliers --prometheus``) reads the scheme from the
``Profile`` it is given: ``LabelScheme.apply`` returns a copy of a profile whose metric
selectors carry the matchers and whose aggregations keep the replica, model and routing labels.
The default scheme (nothing set) changes nothing, so a profile's own names stay as they are.

The scheme is set once, in a small YAML file given to each command as ``--labels FILE``::

    replica: [namespace, pod]     # the labels whose values name one replica (its key: ns/pod)
    model: model_name             # the label naming the model (one fleet per model)
    routing: [namespace]          # labels every aggregation keeps, so alerts can be routed
    matchers:                     # applied to every series the rules read
      - job="vllm"
      - namespace=~"llm-.*"
    links:                        # absolute bases of the alerts' links (``core.links``)
      runbooks: https://git.example.com/sre/runbooks
      grafana: https://grafana.example.com

Matchers are PromQL's four (``=``, ``!=``, ``=~``, ``!~``) on a double-quoted value; a regex is
anchored, as Prometheus anchors it. The replica key is ``core.identity.Identity``: the same
definition the request-record analyses key replicas by.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.core.identity import Identity, IdentityError
from fleetwatch.core.links import Links, LinksError, links_from_mapping
from fleetwatch.core.profiles.types import Profile, ProfileError

__all__ = [
    "DEFAULT_SCHEME",
    "LABELS_HELP",
    "LabelScheme",
    "LabelSchemeError",
    "Matcher",
    "load_scheme",
    "parse_matcher_list",
    "scheme_from_mapping",
    "with_labels",
]

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_SPLIT = re.compile(r'(?:[^,"]|"(?:[^"\\]|\\.)*")+')
_RESERVED = frozenset({"le", "quantile", "alertname", "alertstate", "severity"})
_KEYS = ("replica", "model", "routing", "matchers", "links")

LABELS_HELP = (
    "Label scheme (YAML: replica, model, routing, matchers) of your Prometheus, and the "
    "links alerts carry (links: runbooks, grafana, prometheus); default: the profile's own "
    "names, no matchers, relative links."
)


class LabelSchemeError(ProfileError):
    """A label scheme that cannot be used: names what (the key, the matcher) and where."""


@dataclass(frozen=True, slots=True)
class Matcher:
    """One PromQL label matcher; ``value`` as written between the quotes (escapes kept)."""

    name: str
    op: str
    value: str

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'

    @property
    def text(self) -> str:
        """The value with its escapes decoded (what Prometheus compares with)."""
        return re.sub(r"\\(.)", r"\1", self.value)

    def matches(self, value: str) -> bool:
        """Whether a series whose label is ``value`` ("" when absent) is selected."""
        if self.op == "=":
            return value == self.text
        if self.op == "!=":
            return value != self.text
        hit = re.fullmatch(self.text, value) is not None
        return hit if self.op == "=~" else not hit

    def example(self) -> str:
        """A label value this matcher selects ("" meaning the label is left off): what the
        generated promtool tests label their input series with."""
        if self.op == "=":
            return self.text
        candidates = [""]
        if self.op == "=~":
            candidates.insert(0, _regex_example(self.text))
        candidates += ["x", "fleetwatch-test", "0"]
        for value in candidates:
            if value is not None and self.matches(value):
                return value
        raise LabelSchemeError(
            f"matcher {self}: no label value found that it selects, so no test series can be "
            "written for it (write the value it should match as an equality matcher)"
        )


def parse_matcher_list(text: str | Sequence[str], where: str = "matchers") -> tuple[Matcher, ...]:
    """Matchers from ``a="x",b=~"y"`` or a list of such strings; ``LabelSchemeError`` naming the
    first one that is not ``name op "value"`` or whose regex does not compile."""
    parts: list[str] = []
    for item in [text] if isinstance(text, str) else list(text):
        if not isinstance(item, str):
            raise LabelSchemeError(f'{where}: {item!r} is not a matcher string like job="vllm"')
        if not item.strip():
            continue
        pieces = _SPLIT.findall(item)
        if ",".join(pieces) != item or any(not p.strip() for p in pieces):
            raise LabelSchemeError(f"{where}: cannot split {item!r} into matchers")
        parts += pieces
    out: list[Matcher] = []
    for part in parts:
        m = _MATCHER.fullmatch(part)
        if m is None:
            raise LabelSchemeError(
                f'{where}: {part.strip()!r} is not a label matcher (name="value", !=, =~ or !~)'
            )
        matcher = Matcher(m.group(1), m.group(2), m.group(3))
        if matcher.name.startswith("__"):
            raise LabelSchemeError(f"{where}: {matcher}: reserved label name {matcher.name!r}")
        if matcher.op in ("=~", "!~"):
            try:
                re.compile(matcher.text)
            except re.error as exc:
                raise LabelSchemeError(f"{where}: {matcher}: bad regex ({exc})") from None
        out.append(matcher)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class LabelScheme:
    """What a fleet's Prometheus calls things; None/empty keeps the profile's own."""

    replica: tuple[str, ...] | None = None
    model: str | None = None
    routing: tuple[str, ...] = ()
    matchers: tuple[Matcher, ...] = ()
    links: Links = dataclasses.field(default_factory=Links)

    def __post_init__(self) -> None:
        if self.replica is not None:
            try:
                Identity(self.replica)
            except IdentityError as exc:
                raise LabelSchemeError(f"replica: {exc}") from None
        names = [*(self.replica or ()), *([self.model] if self.model else []), *self.routing]
        for name in names:
            if not name.isidentifier() or name.startswith("__"):
                raise LabelSchemeError(f"{name!r} is not a Prometheus label name")
            if name in _RESERVED:
                raise LabelSchemeError(f"{name!r} is a label fleetwatch's rules set themselves")
        if self.model and self.model in (self.replica or ()):
            raise LabelSchemeError(f"model label {self.model!r} is also a replica label")
        if len(set(self.routing)) != len(self.routing):
            raise LabelSchemeError(f"routing: label named twice in {','.join(self.routing)}")

    @property
    def is_default(self) -> bool:
        return self == DEFAULT_SCHEME

    def apply(self, profile: Profile) -> Profile:
        """A copy of ``profile`` under this scheme: selectors carry the matchers, aggregations
        keep the replica, model and routing labels. The default scheme returns it unchanged."""
        if self.is_default:
            return profile
        if dataclasses.replace(self, links=Links()).is_default:
            return dataclasses.replace(profile, links=self.links)
        scope = ",".join(str(m) for m in self.matchers)

        def scoped(ref: Any) -> Any:
            return None if ref is None else dataclasses.replace(ref, scope=scope)

        outcomes = profile.outcomes
        replica = self.replica or profile.replica_labels
        out = dataclasses.replace(
            profile,
            replica_label=replica[-1],
            model_label=self.model or profile.model_label,
            identity=tuple(replica),
            routing=tuple(self.routing),
            scope_labels=self.examples(),
            links=self.links,
            signals={s: scoped(ref) for s, ref in profile.signals.items()},
            outcomes=dataclasses.replace(
                outcomes,
                total=scoped(outcomes.total),
                bad={k: scoped(v) for k, v in outcomes.bad.items()},
                good=scoped(outcomes.good),
                truncated=scoped(outcomes.truncated),
            ),
        )
        try:
            out.series_labels("m", "replica-0")
        except ProfileError as exc:
            raise LabelSchemeError(f"replica: {exc}") from None
        return out

    def examples(self) -> dict[str, str]:
        """For each label the matchers constrain, a value all of them select ("" = absent),
        free of quotes and backslashes so test series need no escapes."""
        by_label: dict[str, list[Matcher]] = {}
        for m in self.matchers:
            by_label.setdefault(m.name, []).append(m)
        out: dict[str, str] = {}
        for name, group in by_label.items():
            candidates = [m.example() for m in group] + ["", "x"]
            value = next(
                (
                    v
                    for v in candidates
                    if '"' not in v and "\\" not in v and all(m.matches(v) for m in group)
                ),
                None,
            )
            if value is None:
                shown = ",".join(str(m) for m in group)
                raise LabelSchemeError(
                    f"matchers {shown}: no value of {name} without quotes or backslashes "
                    "satisfies them all, so no test series can be written"
                )
            out[name] = value
        return out


DEFAULT_SCHEME = LabelScheme()


def _names(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Iterable[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise LabelSchemeError(f"{where}: {key}: expected label names, got {value!r}")
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise LabelSchemeError(f"{where}: {key}: {item!r} is not a label name")
        out.append(item.strip())
    return tuple(out)


def scheme_from_mapping(data: Mapping[str, Any], where: str) -> LabelScheme:
    """The scheme a labels file's mapping states; ``where`` names the file in errors."""
    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise LabelSchemeError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise LabelSchemeError(f"{where}: model: {model!r} is not a label name")
    matchers = data.get("matchers", [])
    if not isinstance(matchers, (str, list)):
        raise LabelSchemeError(f'{where}: matchers: expected a list of matchers like job="vllm"')
    try:
        return LabelScheme(
            replica=_names(data["replica"], "replica", where) if "replica" in data else None,
            model=model.strip() if model else None,
            routing=_names(data["routing"], "routing", where) if "routing" in data else (),
            matchers=parse_matcher_list(matchers, f"{where}: matchers"),
            links=links_from_mapping(data.get("links"), where),
        )
    except LinksError as exc:
        raise LabelSchemeError(str(exc)) from None
    except LabelSchemeError as exc:
        text = str(exc)
        raise LabelSchemeError(text if text.startswith(where) else f"{where}: {text}") from None


def load_scheme(path: Path | None) -> LabelScheme:
    """The scheme in the labels file at ``path`` (None: the default scheme)."""
    if path is None:
        return DEFAULT_SCHEME
    import yaml

    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise LabelSchemeError(f"{path}{line}: not YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise LabelSchemeError(f"{path}: expected a mapping of {', '.join(_KEYS)}")
    return scheme_from_mapping(data, str(path))


def with_labels(profile: Profile, path: Path | None) -> Profile:
    """``profile`` under the scheme in the labels file at ``path`` (what ``--labels`` does)."""
    scheme = load_scheme(path)
    try:
        return scheme.apply(profile)
    except LabelSchemeError as exc:
        raise LabelSchemeError(f"{path}: {exc}") from None


# -- a value a regex matches, for test series ------------------------------------------------


def _regex_example(pattern: str) -> str:
    """A short string ``pattern`` fully matches, or "" when the walk cannot make one (the caller
    checks the result)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        return _walk(_parser.parse(pattern))
    except Exception:
        return ""


def _walk(items: Any) -> str:
    from re import _constants as c  # type: ignore[attr-defined]

    out = []
    for op, av in items:
        if op is c.LITERAL:
            out.append(chr(av))
        elif op is c.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        elif op is c.ANY:
            out.append("a")
        elif op is c.IN:
            out.append(_in_set(av))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            low, _high, sub = av
            out.append(_walk(sub) * low)
        elif op is c.SUBPATTERN:
            out.append(_walk(av[-1]))
        elif op is c.BRANCH:
            out.append(_walk(av[1][0]))
        elif op is c.AT:
            continue
        else:
            raise ValueError(op)
    return "".join(out)


def _in_set(items: Any) -> str:
    from re import _constants as c  # type: ignore[attr-defined]

    if items and items[0][0] is c.NEGATE:
        banned = {chr(v) for op, v in items[1:] if op is c.LITERAL}
        return next(ch for ch in "axz0_-" if ch not in banned)
    op, av = items[0]
    if op is c.LITERAL:
        return chr(av)
    if op is c.RANGE:
        return chr(av[0])
    if op is c.CATEGORY:
        return {"CATEGORY_DIGIT": "0", "CATEGORY_SPACE": " "}.get(str(av), "a")
    raise ValueError(op)
