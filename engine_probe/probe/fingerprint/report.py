"""The fingerprint as text for a terminal and as a JSON file to keep and compare against later.

The file holds the prompt set's identity, each replica's answers (text cut to 240 characters,
with the whole text's sha256, token counts, finish reason and log probabilities) and, per model,
the reference answers it was judged by: what ``--against`` reads back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.fingerprint.collect import Answer, ReplicaPrint
from fleetwatch.engine_probe.probe.fingerprint.judge import Judgement
from fleetwatch.engine_probe.probe.fingerprint.prompts import PromptSet

__all__ = ["SCHEMA", "load_reference", "render", "to_dict"]

SCHEMA = "fleetwatch.fingerprint/1"
TEXT_CHARS = 240


def answer_dict(a: Answer) -> dict[str, Any]:
    if a.error is not None:
        return {"prompt": a.prompt_id, "error": a.error}
    return {
        "prompt": a.prompt_id,
        "text": a.text[:TEXT_CHARS],
        "sha256": a.sha256,
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "finish_reason": a.finish_reason,
        "logprobs": None if a.logprobs is None else [round(x, 6) for x in a.logprobs],
    }


def to_dict(
    prints: Sequence[ReplicaPrint],
    prompts: PromptSet,
    judgement: Judgement,
    *,
    taken_at: str,
    meta: Mapping[str, str],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "taken_at": taken_at,
        "prompt_set": prompts.identity(),
        "meta": dict(meta),
        "ok": judgement.ok,
        "replicas": [
            {
                "url": p.url,
                "model": p.model,
                "served": p.served,
                "logprobs": p.logprobs,
                "error": p.error,
                "answers": [answer_dict(a) for a in p.answers],
                **(
                    {
                        "runs": p.runs,
                        "variants": {
                            pid: [answer_dict(v) for v in vs] for pid, vs in p.variants.items()
                        },
                        "failures": {
                            pid: [answer_dict(v) for v in vs] for pid, vs in p.failures.items()
                        },
                    }
                    if p.runs > 1
                    else {}
                ),
            }
            for p in prints
        ],
        "unreachable": judgement.unreachable,
        "models": {
            m.model: {
                "verdict": m.verdict,
                "reference_from": m.reference_from,
                "replicas": m.replicas,
                "differing": m.differing,
                "failed": m.failed,
                "no_majority": m.no_majority,
                "findings": {u: [f.to_dict() for f in fs] for u, fs in m.findings.items()},
                "flips": {u: [f.to_dict() for f in fs] for u, fs in m.flips.items()},
                "reference": {pid: answer_dict(a) for pid, a in m.reference.items()},
            }
            for m in judgement.models
        },
    }


def _answer(raw: Any, where: str) -> Answer:
    if not isinstance(raw, dict) or not isinstance(raw.get("prompt"), str):
        raise ProbeError(f"{where} must be an object with 'prompt'")
    if isinstance(raw.get("error"), str):
        return Answer(raw["prompt"], error=raw["error"])
    sha = raw.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or not isinstance(raw.get("text"), str):
        raise ProbeError(f"{where} needs 'text' and a 64-character 'sha256'")
    lp = raw.get("logprobs")
    if lp is not None and (
        not isinstance(lp, list)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in lp)
    ):
        raise ProbeError(f"{where}.logprobs must be a list of numbers or null")
    counts = [raw.get(k) for k in ("prompt_tokens", "completion_tokens")]
    if not all(c is None or (isinstance(c, int) and not isinstance(c, bool)) for c in counts):
        raise ProbeError(f"{where}: token counts must be integers or null")
    reason = raw.get("finish_reason")
    return Answer(
        raw["prompt"],
        text=raw["text"],
        prompt_tokens=counts[0],
        completion_tokens=counts[1],
        finish_reason=reason if isinstance(reason, str) else None,
        logprobs=None if lp is None else tuple(float(x) for x in lp),
        text_sha256=sha,
    )


def load_reference(path: Path, prompts: PromptSet) -> dict[str, dict[str, Answer]]:
    """model -> prompt id -> the reference answer, from a fingerprint file taken on ``prompts``."""
    where = f"--against {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProbeError(f"{where}: cannot read: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProbeError(f"{where}: not a JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ProbeError(f"{where}: not a fingerprint file (schema is not {SCHEMA!r})")
    ident, mine = data.get("prompt_set"), prompts.identity()
    if not isinstance(ident, dict) or any(ident.get(k) != mine[k] for k in mine):
        theirs = ident if isinstance(ident, dict) else {}
        raise ProbeError(
            f"{where}: taken on prompt set {theirs.get('name')!r} v{theirs.get('version')} "
            f"(sha256 {str(theirs.get('sha256'))[:12]}), not {mine['name']!r} v{mine['version']} "
            f"(sha256 {mine['sha256'][:12]}): fingerprints compare only on the same prompts"
        )
    models = data.get("models")
    if not isinstance(models, dict):
        raise ProbeError(f"{where}: 'models' must be an object")
    out: dict[str, dict[str, Answer]] = {}
    ids = {p.id for p in prompts.prompts}
    for model, entry in models.items():
        ref = entry.get("reference") if isinstance(entry, dict) else None
        if not isinstance(ref, dict):
            raise ProbeError(f"{where}: models.{model}.reference must be an object")
        answers = {
            pid: _answer(raw, f"{where}: models.{model}.reference.{pid}")
            for pid, raw in ref.items()
            if pid in ids
        }
        if not answers:
            raise ProbeError(
                f"{where}: holds no reference answer for model {model!r} (judged alone, or no "
                "prompt had a majority): take it again over agreeing replicas"
            )
        out[str(model)] = answers
    return out


def render(judgement: Judgement, prompts: PromptSet, *, verbose: bool = False) -> list[str]:
    """The report as lines: per model its verdict, then each differing replica with its first
    differing prompt (every one with ``verbose``), this answer against the reference."""
    lines = [f"prompt set {prompts.name} v{prompts.version}: {len(prompts.prompts)} prompts"]
    for url, why in judgement.unreachable.items():
        lines.append(f"UNREACHABLE {url}: {why}")
    for m in judgement.models:
        n = len(m.replicas)
        live = n - len(m.failed)
        against = "the majority" if m.reference_from == "majority" else m.reference_from
        if m.verdict == "agree":
            who = f"all {live} replicas agree" if live > 1 else "the replica agrees"
            head = f"{who} with {against} on every prompt"
        elif m.verdict == "alone":
            head = "one replica: nothing to compare with (give more URLs, or --against FILE)"
        elif m.verdict == "no majority":
            head = f"{len(m.no_majority)} prompts with no majority answer among {live} replicas"
        else:
            head = f"{len(m.differing)} of {n} replicas differ from {against}" + (
                f", {len(m.failed)} failed" if m.failed else ""
            )
        lines.append(f"model {m.model}: {m.verdict.upper()}: {head}")
        for url, why in m.failed.items():
            lines.append(f"  FAILED {url}: {why}")
        for url in m.differing:
            found = m.findings[url]
            kinds = ", ".join(sorted({f.kind for f in found}))
            lines.append(
                f"  DIFFERS {url}: {len(found)} of {len(prompts.prompts)} prompts ({kinds})"
            )
            for f in found if verbose else found[:1]:
                lines.append(f"    {f.prompt_id}: {f.kind}: {f.detail}")
                if f.this or f.reference:
                    lines.append(f"      this replica: {f.this}")
                    lines.append(f"      reference:    {f.reference}")
        for url, flips in m.flips.items():
            # a flip is held against the replica where the answer most runs gave differs
            held = {f.prompt_id for f in m.findings.get(url, []) if f.kind != "error"}
            near = sum(f.prompt_id not in held for f in flips)
            lines.append(
                f"  FLIPS {url}: its runs answered unlike each other on {len(flips)} of "
                f"{len(prompts.prompts)} prompts ({near} of them a near-tie: most runs gave the "
                "reference, the others not held against it)"
            )
            for f in flips if verbose else flips[:1]:
                lines.append(f"    {f.prompt_id}: {f.kind}: {f.detail}")
        shown = list(m.no_majority.items())
        for pid, said in shown if verbose else shown[:1]:
            lines.append(f"  NO MAJORITY on {pid}:")
            for answer, urls in said.items():
                lines.append(f"    {', '.join(urls)}: {answer}")
        if m.no_majority and live == 2:
            lines.append(
                "  two replicas cannot outvote each other: add a third, or judge both "
                "--against a fingerprint of a known-good replica"
            )
    return lines
