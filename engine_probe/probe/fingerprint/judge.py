"""Which replicas answer differently from the rest of their model's fleet.

Replicas are grouped by the model they serve. For each prompt the reference answer is the one a
strict majority of the model's replicas gave (or, with ``--against``, the one an earlier
fingerprint recorded); an answer is the token counts, why it stopped and the text, so a replica
with another chat template or tokenizer shows first as a different prompt-token count, and one
with other weights, dtype or sampling defaults as different text. Where the text agrees the
sampled tokens' log probabilities are compared with the majority's element-wise median: a
difference over ``tolerance`` (nats, on any token) names a numerical change (a quantized or
differently-kerneled replica) that greedy text alone can hide. A prompt where no answer has a
strict majority decides nothing and is reported as such, with who said what.

A replica asked several times (``--repeat``) is judged by the answer most of its runs gave.
Where its runs did not all answer alike it is listed as flipping on that prompt: when the answer
most gave is the reference, the runs that answered otherwise are a near-tie token that flips
from run to run, not a replica that answers otherwise, and are not held against it; when it is
not, the replica differs there, whether or not a few runs gave the reference. A run whose
request failed gave no answer: it is neither a flip nor a way of answering, but a failure,
reported as the error it is (as one failed request is without ``--repeat``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fleetwatch.engine_probe.probe.fingerprint.collect import Answer, ReplicaPrint
from fleetwatch.engine_probe.probe.fingerprint.prompts import PromptSet

__all__ = ["DEFAULT_LOGPROB_TOLERANCE", "Finding", "Judgement", "ModelReport", "judge"]

DEFAULT_LOGPROB_TOLERANCE = 0.05
_SNIPPET = 80


def snippet(text: str, start: int = 0) -> str:
    """``text`` from a little before ``start``, cut to a line's width, as repr."""
    lo = max(0, start - 20)
    cut = text[lo : lo + _SNIPPET]
    return ("…" if lo else "") + repr(cut)[1:-1] + ("…" if lo + _SNIPPET < len(text) else "")


@dataclass(frozen=True)
class Finding:
    """One prompt on which one replica differs from the reference."""

    url: str
    prompt_id: str
    kind: str
    """``error``, ``prompt tokens``, ``finish reason``, ``output`` or ``logprobs``."""
    detail: str
    this: str = ""
    reference: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt_id,
            "kind": self.kind,
            "detail": self.detail,
            "this": self.this,
            "reference": self.reference,
        }


@dataclass
class ModelReport:
    model: str
    replicas: list[str]
    reference_from: str
    """``majority`` or the path of the fingerprint compared against."""
    reference: dict[str, Answer] = field(default_factory=dict)
    no_majority: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Per prompt without a majority: each distinct answer (as a snippet) and who gave it."""
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    flips: dict[str, list[Finding]] = field(default_factory=dict)
    """Per replica asked several times, the prompts its runs answered unlike each other."""

    @property
    def alone(self) -> bool:
        return self.reference_from == "majority" and len(self.replicas) - len(self.failed) < 2

    @property
    def differing(self) -> list[str]:
        return [u for u in self.replicas if self.findings.get(u)]

    @property
    def verdict(self) -> str:
        if self.failed or self.differing:
            return "differ"
        if self.no_majority:
            return "no majority"
        return "alone" if self.alone else "agree"


@dataclass
class Judgement:
    models: list[ModelReport]
    unreachable: dict[str, str]
    """Replicas whose model could not be learnt (no --model and GET /v1/models failed)."""

    @property
    def ok(self) -> bool:
        return not self.unreachable and all(m.verdict in ("agree", "alone") for m in self.models)


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _compare(url: str, a: Answer, ref: Answer, tolerance: float) -> Finding | None:
    if a.key == ref.key:
        if a.logprobs is None or ref.logprobs is None or len(a.logprobs) != len(ref.logprobs):
            return None
        gaps = [abs(x - y) for x, y in zip(a.logprobs, ref.logprobs, strict=True)]
        worst = max(range(len(gaps)), key=gaps.__getitem__, default=None)
        if worst is None or gaps[worst] <= tolerance:
            return None
        return Finding(
            url,
            a.prompt_id,
            "logprobs",
            f"token {worst}: logprob {a.logprobs[worst]:.4f} vs {ref.logprobs[worst]:.4f} "
            f"(off by {gaps[worst]:.4f}, over the tolerance {tolerance:g}): same text, other numerics",
        )
    if a.error is not None:
        return Finding(url, a.prompt_id, "error", a.error, reference=snippet(ref.text))
    if ref.error is not None:
        return Finding(
            url,
            a.prompt_id,
            "output",
            f"answered where the reference failed ({ref.error})",
            snippet(a.text),
        )
    if a.prompt_tokens != ref.prompt_tokens:
        return Finding(
            url,
            a.prompt_id,
            "prompt tokens",
            f"{a.prompt_tokens} prompt tokens vs {ref.prompt_tokens}: another chat template or "
            "tokenizer",
            snippet(a.text),
            snippet(ref.text),
        )
    if a.text == ref.text or (a.sha256 == ref.sha256):
        return Finding(
            url,
            a.prompt_id,
            "finish reason",
            f"same text; finish_reason {a.finish_reason!r} vs {ref.finish_reason!r}, "
            f"{a.completion_tokens} completion tokens vs {ref.completion_tokens}",
        )
    at = _first_difference(a.text, ref.text)
    also = []
    if a.completion_tokens != ref.completion_tokens:
        also.append(f"{a.completion_tokens} completion tokens vs {ref.completion_tokens}")
    if a.finish_reason != ref.finish_reason:
        also.append(f"finish_reason {a.finish_reason!r} vs {ref.finish_reason!r}")
    return Finding(
        url,
        a.prompt_id,
        "output",
        f"text differs from character {at}" + (f" ({'; '.join(also)})" if also else ""),
        snippet(a.text, at),
        snippet(ref.text, at),
    )


def _flip(
    p: ReplicaPrint,
    i: int,
    others: Sequence[Answer],
    failed: Sequence[Answer],
    ref: Answer,
    tolerance: float,
) -> Finding:
    """How the answered runs of ``p`` on prompt ``i`` split (its failed runs are no answers):
    ``flip`` when some gave the reference answer and some did not, ``unstable`` when none did
    (its runs unlike each other and the reference)."""
    runs = [p.answers[i]] * (p.runs - len(others) - len(failed)) + list(others)
    diffs = [_compare(p.url, a, ref, tolerance) for a in runs]
    like = sum(d is None for d in diffs)
    first = next(d for d in diffs if d is not None)  # the runs are not all alike
    of = f"{len(runs)} runs" + (f" that answered ({len(failed)} failed)" if failed else "")
    if like:
        detail = f"{like} of {of} gave the reference; the others: {first.detail}"
    else:
        ways = len({a.key for a in runs})
        detail = f"its {of} answered {ways} ways, none the reference: {first.detail}"
    return Finding(
        p.url, first.prompt_id, "flip" if like else "unstable", detail, first.this, first.reference
    )


def _failed_runs(p: ReplicaPrint, i: int, failed: Sequence[Answer], ref: Answer) -> Finding:
    """The finding for the runs of ``p`` on prompt ``i`` whose request failed where the answer
    most of its runs gave is the reference: a failure, as one failed request is without
    ``--repeat``."""
    return Finding(
        p.url,
        p.answers[i].prompt_id,
        "error",
        f"{len(failed)} of {p.runs} runs failed: {failed[0].error}",
        reference=snippet(ref.text),
    )


def _median_logprobs(answers: Sequence[Answer]) -> tuple[float, ...] | None:
    series = [a.logprobs for a in answers if a.logprobs is not None]
    if not series or len({len(s) for s in series}) != 1:
        return None
    return tuple(statistics.median(col) for col in zip(*series, strict=True))


def _majority(
    prompt_id: str, answers: Mapping[str, Answer]
) -> tuple[Answer | None, dict[str, list[str]]]:
    """The answer a strict majority of the replicas that answered gave (a failed request does
    not vote: it is that replica's finding), or None and who said what."""
    counts = Counter(a.key for a in answers.values() if a.error is None)
    key, n = counts.most_common(1)[0] if counts else (None, 0)
    if counts and 2 * n > sum(counts.values()):
        members = [a for a in answers.values() if a.key == key]
        first = members[0]
        ref = Answer(
            prompt_id,
            text=first.text,
            prompt_tokens=first.prompt_tokens,
            completion_tokens=first.completion_tokens,
            finish_reason=first.finish_reason,
            logprobs=_median_logprobs(members),
            error=first.error,
            text_sha256=first.text_sha256,
        )
        return ref, {}
    said: dict[str, list[str]] = {}
    for url, a in answers.items():
        said.setdefault(a.error or snippet(a.text), []).append(url)
    return None, said


def judge(
    prints: Sequence[ReplicaPrint],
    prompts: PromptSet,
    *,
    tolerance: float = DEFAULT_LOGPROB_TOLERANCE,
    against: Mapping[str, Mapping[str, Answer]] | None = None,
    against_name: str = "",
) -> Judgement:
    """Judge every model's replicas; ``against`` maps model -> prompt id -> reference answer
    (an earlier fingerprint: every model here must be in it)."""
    unreachable = {p.url: p.error or "" for p in prints if p.model is None}
    by_model: dict[str, list[ReplicaPrint]] = {}
    for p in prints:
        if p.model is not None:
            by_model.setdefault(p.model, []).append(p)
    reports = []
    for model, group in by_model.items():
        rep = ModelReport(
            model,
            [p.url for p in group],
            "majority" if against is None else against_name,
            failed={p.url: p.error for p in group if p.error is not None},
        )
        live = [p for p in group if p.error is None]
        for i, prompt in enumerate(prompts.prompts):
            if against is not None:
                ref = against[model].get(prompt.id)
                if ref is None and live:
                    rep.no_majority[prompt.id] = {
                        f"no reference answer in {against_name}": [p.url for p in live]
                    }
            elif len(live) >= 2:
                ref, said = _majority(prompt.id, {p.url: p.answers[i] for p in live})
                if said:
                    rep.no_majority[prompt.id] = said
            else:
                ref = None
            if ref is None:
                continue
            rep.reference[prompt.id] = ref
            for p in live:
                # judged by the answer most runs gave: the flips are noted, never excuse it
                finding = _compare(p.url, p.answers[i], ref, tolerance)
                others = p.variants.get(prompt.id, [])
                failed = p.failures.get(prompt.id, [])
                if others:
                    flip = _flip(p, i, others, failed, ref, tolerance)
                    rep.flips.setdefault(p.url, []).append(flip)
                if failed and finding is None:
                    finding = _failed_runs(p, i, failed, ref)
                elif failed and finding is not None:
                    more = len(failed) + (p.answers[i].error is not None)
                    finding = replace(
                        finding, detail=f"{finding.detail} ({more} of {p.runs} runs failed)"
                    )
                if finding is not None:
                    rep.findings.setdefault(p.url, []).append(finding)
        reports.append(rep)
    return Judgement(reports, unreachable)
