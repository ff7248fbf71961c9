"""Read an SLO spec from a file or YAML text: fleetwatch's own format, or OpenSLO v1.

A document with ``apiVersion: openslo/v1`` goes through ``fleetwatch.slo.openslo``; anything else is
validated by ``fleetwatch.slo.parse`` (the format is described there).

Any input costs little: a spec is at most ``MAX_SPEC_BYTES``; YAML is composed with at most
``MAX_ALIASES`` aliases, and refused when aliases would make it more than ``MAX_NODES`` nodes once
expanded (an alias bomb of a few hundred bytes expands to billions); both are checked on the node
graph before any Python object is built. Error messages show values through ``fleetwatch.core.brief``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, cast

import yaml

from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.openslo import parse_openslo
from fleetwatch.slo.parse import parse_spec
from fleetwatch.slo.spec import SLOSpec

__all__ = ["MAX_ALIASES", "MAX_NODES", "MAX_SPEC_BYTES", "load_spec", "read_spec"]

MAX_SPEC_BYTES: Final = 1 << 20
MAX_ALIASES: Final = 256
MAX_NODES: Final = 200_000


class _LimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting aliases as they are composed and sizing each composed
    document as it would be once aliases are expanded (the pure-Python composer: the C one
    cannot be hooked)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                mark = cast(Any, self).peek_event().start_mark
                raise SLOSpecError(
                    f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases (*name)"
                )
        return super().compose_node(parent, index)

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None and _expanded_size(node, {}) > MAX_NODES:
            raise SLOSpecError(
                f"the YAML expands to more than {MAX_NODES} values through its aliases (*name)"
            )
        return node


def _expanded_size(node: yaml.Node, seen: dict[int, int]) -> int:
    """Nodes under ``node`` with every alias expanded, computed once per distinct node and
    capped just above ``MAX_NODES`` (so a bomb is sized in time linear in its text)."""
    known = seen.get(id(node))
    if known is not None:
        return known
    seen[id(node)] = MAX_NODES + 1  # a node reached again while being sized: a cycle
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children: list[yaml.Node] = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, seen)
        if total > MAX_NODES:
            break
    total = min(total, MAX_NODES + 1)
    seen[id(node)] = total
    return total


def read_spec(path: str | Path) -> SLOSpec:
    """Read a spec file (fleetwatch or OpenSLO YAML)."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SLOSpecError(f"cannot read spec: {exc.strerror or exc}", path=str(p)) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SLOSpecError(f"{p}: larger than {MAX_SPEC_BYTES} bytes; a spec is a small file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SLOSpecError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    return load_spec(text, source=str(p))


def load_spec(text: str, *, source: str = "<spec>") -> SLOSpec:
    """Parse YAML text; an ``openslo/v1`` document goes through the OpenSLO importer."""
    if len(text) > MAX_SPEC_BYTES:
        raise SLOSpecError(f"{source}: larger than {MAX_SPEC_BYTES} bytes; a spec is a small file")
    try:
        docs = [d for d in yaml.load_all(text, Loader=_LimitedLoader) if d is not None]
    except SLOSpecError as exc:
        raise SLOSpecError(f"{source}: {exc}") from None
    except RecursionError:
        raise SLOSpecError(f"{source}: the YAML is nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SLOSpecError(f"{source}: {where}: {problem}") from None
    if not docs:
        raise SLOSpecError("spec is empty: expected 'service' and 'slos'", path="(root)")
    first = docs[0]
    if isinstance(first, Mapping) and str(first.get("apiVersion", "")).startswith("openslo/"):
        return parse_openslo(docs)
    if len(docs) > 1:
        raise SLOSpecError("expected one YAML document", path="(root)")
    return parse_spec(first)
