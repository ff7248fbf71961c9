"""Runbook pages for a profile: the pages of ``runbooks/`` with every query in the profile's
metric and label names, under the fleet's label scheme.

The pages are written once, for the ``fleetwatch`` profile. ``render_runbooks`` rewrites each
```` ```promql ```` block and each inline code span that names a fleetwatch series:

- a series becomes the profile's series of the same signal (``fleetwatch_kv_cache_usage_ratio``
  -> ``vllm:kv_cache_usage_perc``, histogram suffixes kept), carrying the scheme's matchers;
- the request counter's ``status`` matchers become the profile's outcome counters
  (``{status="error"}`` -> ``vllm:request_success_total{finished_reason="error"}``; ``!="ok"``
  the union of its bad outcomes), and ``status`` in a grouping the label they share;
- ``replica`` in a grouping becomes the replica labels (``namespace, pod`` under a scheme),
  ``model`` the model label, ``traffic_class`` the class label, or nothing where there is none;
- the resilience library's series (breakers, retries) are the same in every profile and stay.

A query naming a series the profile does not export is kept as written, marked: a promql block
gets a first line ``# Not exported by the vllm profile: …`` and an inline span ``(fleetwatch
profile only)``. The ``fleetwatch`` profile under the default scheme renders every page byte for
byte as committed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fleetwatch.core.profiles import MetricRef, Profile, Signal, get_profile
from fleetwatch.core.profiles.labels import LabelSchemeError, parse_matcher_list
from fleetwatch.dashboards.names import RESILIENCE

__all__ = ["RUNBOOKS", "Untranslatable", "render_runbooks", "translate"]

RUNBOOKS: Final = Path(__file__).resolve().parents[1] / "runbooks"
"""The committed pages (written for the fleetwatch profile)."""

_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)(\s*)\(([^()]*)\)")
_FENCE = re.compile(r"^( *)```promql\n(.*?)^\1```", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]+)`")
_SUFFIXES: Final = ("_bucket", "_sum", "_count")
_RESILIENCE_NAMES: Final = frozenset(
    ref.name + s
    for ref in RESILIENCE.values()
    for s in (_SUFFIXES if ref.kind == "histogram" else ("",))
)


class Untranslatable(Exception):
    """A query names what the profile does not export."""


@dataclass(frozen=True, slots=True)
class _Outcomes:
    """The profile's outcome counters as a label on one counter where they are one."""

    label: str | None
    values: Mapping[str, str]


def _source_names(source: Profile) -> dict[str, tuple[Signal, str]]:
    out: dict[str, tuple[Signal, str]] = {}
    for signal, ref in source.signals.items():
        for suffix in ("", *_SUFFIXES) if ref.kind == "histogram" else ("",):
            out[ref.name + suffix] = (signal, suffix)
    return out


def _outcomes(profile: Profile) -> _Outcomes:
    """Where every bad outcome is one equality matcher on the total's own counter, that label
    and each outcome's value (vLLM's ``finished_reason``)."""
    values: dict[str, str] = {}
    labels = set()
    for key, ref in profile.outcomes.bad.items():
        found = parse_matcher_list(ref.matchers) if ref.matchers else ()
        if ref.name != profile.outcomes.total.name or len(found) != 1 or found[0].op != "=":
            return _Outcomes(None, {})
        labels.add(found[0].name)
        values[key] = found[0].value
    if len(labels) != 1:
        return _Outcomes(None, {})
    return _Outcomes(labels.pop(), values)


class _Translator:
    def __init__(self, profile: Profile, source: Profile) -> None:
        self.profile = profile
        self.names = _source_names(source)
        self.total = source.outcomes.total.name
        self.outcomes = _outcomes(profile)
        self.same_outcomes = (
            profile.outcomes.total.name == self.total and self.outcomes.label == "status"
        )
        known = sorted({*self.names, self.total, *_RESILIENCE_NAMES}, key=len, reverse=True)
        self.pattern = re.compile(
            r"(?<![\w:\"$])(" + "|".join(map(re.escape, known)) + r")(?![\w:])(\{[^{}]*\})?"
        )

    def labels(self, name: str) -> tuple[str, ...]:
        p = self.profile
        if name == "replica":
            return p.replica_labels
        if name == "model":
            return (p.model_label,)
        if name == "traffic_class":
            return (p.class_label,) if p.class_label else ()
        if name == "status":
            if self.outcomes.label is None:
                raise Untranslatable("status")
            return (self.outcomes.label,)
        return (name,)

    def matchers(self, text: str) -> tuple[list[str], list[tuple[str, str]]]:
        """The selector's matchers in the profile's labels, and its ``status`` matchers."""
        kept: list[str] = []
        status: list[tuple[str, str]] = []
        try:
            found = parse_matcher_list(text)
        except LabelSchemeError:
            raise Untranslatable(text) from None
        for m in found:
            if m.name == "status":
                status.append((m.op, m.value))
                continue
            mapped = self.labels(m.name)
            if mapped:
                kept.append(f'{mapped[-1]}{m.op}"{m.value}"')
        return kept, status

    def outcome(self, status: list[tuple[str, str]]) -> tuple[MetricRef, str]:
        """The counter (and matcher) selecting the source's ``status`` matchers."""
        bad = self.profile.outcomes.bad
        if not status:
            return self.profile.outcomes.total, ""
        if len(status) > 1:
            raise Untranslatable("status")
        op, value = status[0]
        if op == "=" and value in bad:
            return bad[value], ""
        if op == "!=" and value == "ok":
            keys = list(bad)
        elif op == "=~":
            keys = [k for k in value.split("|") if k in bad]
        else:
            raise Untranslatable(f"status{op}{value!r}")
        if len(keys) == 1:
            return bad[keys[0]], ""
        if not keys or self.outcomes.label is None:
            raise Untranslatable("status")
        values = "|".join(self.outcomes.values[k] for k in keys)
        return self.profile.outcomes.total, f'{self.outcomes.label}=~"{values}"'

    def selector(self, m: re.Match[str]) -> str:
        name, braces = m.group(1), m.group(2) or ""
        if name in _RESILIENCE_NAMES:
            return m.group(0)
        kept, status = self.matchers(braces[1:-1]) if braces else ([], [])
        suffix = ""
        if name == self.total and self.same_outcomes:
            ref = self.profile.outcomes.total
            kept = [*(f'status{op}"{v}"' for op, v in status), *kept]
        elif name == self.total:
            ref, extra = self.outcome(status)
            kept = [*([extra] if extra else []), *kept]
        else:
            if status or name not in self.names:
                raise Untranslatable(name)
            signal, suffix = self.names[name]
            if not self.profile.has(signal):
                raise Untranslatable(name)
            ref = self.profile.metric(signal)
        return ref.selector(",".join(kept), suffix)

    def label_list(self, m: re.Match[str]) -> str:
        names = [n.strip() for n in m.group(3).split(",") if n.strip()]
        mapped = dict.fromkeys(x for n in names for x in self.labels(n))
        return f"{m.group(1)}{m.group(2)}({', '.join(mapped)})"

    def names_a_series(self, text: str) -> bool:
        return self.pattern.search(text) is not None

    def __call__(self, expr: str) -> str:
        out = self.pattern.sub(self.selector, expr)
        return _LABEL_LIST.sub(self.label_list, out)


def translate(expr: str, profile: Profile) -> str:
    """``expr`` (written for the fleetwatch profile) in ``profile``'s names and scheme;
    ``Untranslatable`` naming what the profile lacks."""
    return _Translator(profile, get_profile("fleetwatch"))(expr)


def _page(text: str, t: _Translator, name: str) -> str:
    def block(m: re.Match[str]) -> str:
        indent, body = m.group(1), m.group(2)
        try:
            return f"{indent}```promql\n{t(body)}{indent}```"
        except Untranslatable as exc:
            note = f"{indent}# Not exported by the {name} profile: {exc}\n"
            return f"{indent}```promql\n{note}{body}{indent}```"

    def inline(m: re.Match[str]) -> str:
        if not t.names_a_series(m.group(1)):
            return m.group(0)
        try:
            return f"`{t(m.group(1))}`"
        except Untranslatable:
            return f"{m.group(0)} (fleetwatch profile only)"

    return _INLINE.sub(inline, _FENCE.sub(block, text))


def render_runbooks(profile: Profile, folder: Path = RUNBOOKS) -> dict[str, str]:
    """File name to text for every page under ``folder`` (and its ``index.yaml``), the queries
    in ``profile``'s names. The fleetwatch profile under the default scheme: the pages as
    they are."""
    t = _Translator(profile, get_profile("fleetwatch"))
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        out[path.name] = _page(text, t, profile.name)
    out["index.yaml"] = (folder / "index.yaml").read_text(encoding="utf-8")
    if out != {p: (folder / p).read_text(encoding="utf-8") for p in out}:
        readme = out["README.md"]
        title, _, rest = readme.partition("\n")
        out["README.md"] = (
            f"{title}\n\nQueries in the `{profile.name}` profile's names "
            f"({profile.description}), generated by `fleetwatch dashboards runbooks "
            f"--profile {profile.name}`.\n{rest}"
        )
    return out
