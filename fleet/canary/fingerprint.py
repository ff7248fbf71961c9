"""What a fingerprint of the canary (``probe fingerprint --json``) adds to its verdict.

The file is read as data, by its schema (``fleetwatch.fingerprint/1``): the canary judge does not
run the fingerprint, the deploy pipeline does (``fleetwatch probe fingerprint CANARY_URL
--against fleet.json --json canary-fp.json``, or the canary with its peers). A fingerprint that
found a replica answering differently rolls the canary back whatever its latency: correct
answers come before fast ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleetwatch.fleet.errors import AnalysisError

__all__ = ["FINGERPRINT_SCHEMA", "fingerprint_findings"]

FINGERPRINT_SCHEMA = "fleetwatch.fingerprint/1"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AnalysisError(f"--fingerprint {path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AnalysisError(f"--fingerprint {path}: not a JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != FINGERPRINT_SCHEMA:
        raise AnalysisError(
            f"--fingerprint {path}: not a fingerprint file (schema is not {FINGERPRINT_SCHEMA!r}; "
            "write one with fleetwatch probe fingerprint --json)"
        )
    if not isinstance(data.get("models"), dict) or not isinstance(data.get("ok"), bool):
        raise AnalysisError(f"--fingerprint {path}: 'models' and 'ok' are missing")
    return data


def fingerprint_findings(path: Path) -> tuple[list[str], str]:
    """(reasons to roll back, a note): one reason per replica the fingerprint names as
    differing, failed or unreachable, or per model without a majority."""
    data = _load(path)
    reasons: list[str] = []

    def mapping(value: Any, where: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise AnalysisError(f"--fingerprint {path}: {where} must be an object")
        return value

    for url, why in sorted(mapping(data.get("unreachable"), "unreachable").items()):
        reasons.append(f"fingerprint: {url} could not be fingerprinted ({why})")
    for model, entry in sorted(data["models"].items()):
        if not isinstance(entry, dict):
            raise AnalysisError(f"--fingerprint {path}: models.{model} must be an object")
        findings = mapping(entry.get("findings"), f"models.{model}.findings")
        differing = entry.get("differing") or []
        if not isinstance(differing, list):
            raise AnalysisError(f"--fingerprint {path}: models.{model}.differing must be a list")
        for url in differing:
            found = findings.get(url) or []
            found = found if isinstance(found, list) else []
            kinds = sorted({f.get("kind", "?") for f in found if isinstance(f, dict)})
            first = found[0].get("prompt", "?") if found and isinstance(found[0], dict) else "?"
            reasons.append(
                f"fingerprint: {url} answers {model} unlike the reference on {len(found)} "
                f"prompts ({', '.join(kinds)}; first {first})"
            )
        for url, why in sorted(mapping(entry.get("failed"), f"models.{model}.failed").items()):
            reasons.append(f"fingerprint: {url} failed ({why})")
        if entry.get("verdict") == "no majority":
            reasons.append(f"fingerprint: {model} has no majority answer: nothing to trust")
    if not data["ok"] and not reasons:
        reasons.append("fingerprint: not ok")
    taken = data.get("taken_at", "?")
    against = ", ".join(
        sorted(
            {str(e.get("reference_from")) for e in data["models"].values() if isinstance(e, dict)}
        )
    )
    note = f"fingerprint {path} (taken {taken}, against {against or '?'}): " + (
        "answers agree" if not reasons else f"{len(reasons)} findings"
    )
    return reasons, note
