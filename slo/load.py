"""Read an SLO spec from a file or YAML text: fleetwatch's own format, or OpenSLO v1.

A document with ``apiVersion: openslo/v1`` goes through ``slo.openslo``; anything else is
validated by ``slo.parse`` (the format is described there).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from slo.errors import SLOSpecError
from slo.openslo import parse_openslo
from slo.parse import parse_spec
from slo.spec import SLOSpec

__all__ = ["load_spec", "read_spec"]


def read_spec(path: str | Path) -> SLOSpec:
    """Read a spec file (fleetwatch or OpenSLO YAML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SLOSpecError(f"cannot read spec: {exc.strerror or exc}", path=str(p)) from None
    return load_spec(text, source=str(p))


def load_spec(text: str, *, source: str = "<spec>") -> SLOSpec:
    """Parse YAML text; an ``openslo/v1`` document goes through the OpenSLO importer."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
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
