"""Asking every replica the same prompts: greedy, seeded, one request at a time.

Each replica gets the prompts in order, one in flight (so no replica's answers depend on what it
batched them with), non-streaming, at temperature 0 with the set's seed, asking for the sampled
tokens' log probabilities. A server that refuses log probabilities (HTTP 400 naming them) is asked
again without, and its answers are compared on text and token counts only. Replicas are asked
concurrently. What the server says of itself is kept beside the answers: ``GET /version`` where
it has one (vLLM, SGLang), and the model's ``root`` and ``max_model_len`` from ``/v1/models``.

With ``repeat`` above one the whole set is asked that many times over, in order: a replica's
answer to a prompt is the one most of its runs gave, and the runs that answered otherwise are
kept beside it (``variants``), so a near-tie token that flips from run to run (kernels that are
not deterministic under load) can be told from a replica that always answers otherwise. A run
whose request failed gave no answer: it is kept apart (``failures``), never among the variants.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from fleetwatch.engine_probe.probe.chat import API_PATHS, base_url, discover_model
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.fingerprint.prompts import Prompt, PromptSet

__all__ = ["Answer", "ReplicaPrint", "collect", "fingerprint_replica", "keep", "parse_answer"]

_ERROR_CHARS = 200


@dataclass(frozen=True)
class Answer:
    """One replica's answer to one prompt (``error`` set, and nothing else, when it gave none)."""

    prompt_id: str
    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    logprobs: tuple[float, ...] | None = None
    error: str | None = None
    text_sha256: str | None = None
    """The text's digest where ``text`` is cut short (an answer read back from a fingerprint file)."""

    @property
    def sha256(self) -> str:
        if self.text_sha256 is not None:
            return self.text_sha256
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def key(self) -> tuple[Any, ...]:
        """What two replicas must share to agree: token counts, why it stopped, the text."""
        if self.error is not None:
            return ("error", self.error)
        return (self.prompt_tokens, self.completion_tokens, self.finish_reason, self.sha256)


@dataclass
class ReplicaPrint:
    """One replica's fingerprint: what it serves and its answers, in prompt order."""

    url: str
    model: str | None = None
    served: dict[str, Any] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    logprobs: bool = True
    error: str | None = None
    runs: int = 1
    """How many times each prompt was asked (``--repeat``)."""
    variants: dict[str, list[Answer]] = field(default_factory=dict)
    """Per prompt id, the runs that answered unlike the one kept (one entry a run)."""
    failures: dict[str, list[Answer]] = field(default_factory=dict)
    """Per prompt id, the runs whose request failed, bar the one kept where every run failed."""


def keep(runs: Sequence[Answer]) -> tuple[Answer, list[Answer], list[Answer]]:
    """The answer most of ``runs`` (one prompt's, in run order) gave — among those that
    answered, when any did; the earliest on a tie — the runs that answered unlike it, and the
    runs that failed besides it (a failed request is no answer, so never a variant)."""
    answered = [i for i, a in enumerate(runs) if a.error is None] or range(len(runs))
    counts = Counter(runs[i].key for i in answered)
    top = max(counts.values())
    at = next(i for i in answered if counts[runs[i].key] == top)
    kept = runs[at]
    failed = [a for i, a in enumerate(runs) if a.error is not None and i != at]
    return kept, [a for a in runs if a.error is None and a.key != kept.key], failed


def _body(p: Prompt, model: str, seed: int, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": p.max_tokens,
        "temperature": 0.0,
        "seed": seed,
        "stream": False,
    }
    if p.prompt is not None:
        body["prompt"] = p.prompt
        if logprobs:
            body["logprobs"] = 1
    else:
        body["messages"] = [{"role": r, "content": c} for r, c in p.messages]
        if logprobs:
            body["logprobs"] = True
    return body


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_answer(p: Prompt, data: Any) -> Answer:
    """An ``Answer`` from a non-streaming response body of either API."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Answer(p.id, error="response has no choices")
    choice = choices[0]
    if p.prompt is not None:
        text = choice.get("text")
    else:
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    lp = choice.get("logprobs")
    values: list[Any] | None = None
    if isinstance(lp, dict):
        if isinstance(lp.get("token_logprobs"), list):  # completions
            values = lp["token_logprobs"]
        elif isinstance(lp.get("content"), list):  # chat
            values = [t.get("logprob") if isinstance(t, dict) else None for t in lp["content"]]
    logprobs = (
        tuple(float(v) for v in values)
        if values is not None
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        else None
    )
    reason = choice.get("finish_reason")
    return Answer(
        p.id,
        text=text if isinstance(text, str) else "",
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        finish_reason=reason if isinstance(reason, str) else None,
        logprobs=logprobs,
    )


async def _get_json(s: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    try:
        async with s.get(url, headers=headers) as r:
            return await r.json(content_type=None) if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _served(
    s: aiohttp.ClientSession, root: str, model: str, headers: dict[str, str]
) -> dict[str, Any]:
    served: dict[str, Any] = {}
    version = await _get_json(s, f"{root}/version", headers)
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        served["version"] = version["version"][:100]
    models = await _get_json(s, f"{root}/v1/models", headers)
    for m in models.get("data", []) if isinstance(models, dict) else []:
        if isinstance(m, dict) and m.get("id") == model:
            for key in ("root", "max_model_len", "owned_by"):
                if isinstance(m.get(key), str | int) and not isinstance(m.get(key), bool):
                    served[key] = m[key] if isinstance(m[key], int) else str(m[key])[:300]
    return served


async def _ask(
    s: aiohttp.ClientSession, root: str, p: Prompt, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int | None, Any, str]:
    try:
        async with s.post(f"{root}{API_PATHS[p.api]}", json=body, headers=headers) as r:
            raw = await r.read()
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, None, f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
    text = raw.decode("utf-8", "replace")
    if status != 200:
        return status, None, text
    try:
        return status, json.loads(text), ""
    except ValueError:
        return status, None, "response is not JSON"


async def _answer(
    s: aiohttp.ClientSession,
    root: str,
    p: Prompt,
    out: ReplicaPrint,
    model: str,
    seed: int,
    hdrs: dict[str, str],
) -> Answer:
    """One prompt's answer; a 400 naming logprobs turns them off for the replica's later asks."""
    body = _body(p, model, seed, out.logprobs)
    status, data, err = await _ask(s, root, p, body, hdrs)
    if status == 400 and out.logprobs and "logprob" in err.lower():
        out.logprobs = False
        body = _body(p, model, seed, False)
        status, data, err = await _ask(s, root, p, body, hdrs)
    if status == 200 and data is not None:
        return parse_answer(p, data)
    what = f"HTTP {status}: " if status is not None else ""
    detail = " ".join(err.split())[:_ERROR_CHARS]
    return Answer(p.id, error=f"{what}{detail}")


async def fingerprint_replica(
    url: str,
    prompts: PromptSet,
    *,
    model: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    repeat: int = 1,
) -> ReplicaPrint:
    """Ask one replica every prompt, ``repeat`` times over; a replica that cannot be reached is
    returned with ``error``."""
    root, hdrs = base_url(url), dict(headers or {})
    out = ReplicaPrint(url=root, runs=repeat)
    got: list[list[Answer]] = [[] for _ in prompts.prompts]
    try:
        out.model = name = model or await discover_model(root, hdrs, timeout_s)
    except ProbeError as exc:
        out.error = str(exc)
        return out
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        out.served = await _served(s, root, out.model, hdrs)
        for _ in range(repeat):
            for i, p in enumerate(prompts.prompts):
                got[i].append(await _answer(s, root, p, out, name, prompts.seed, hdrs))
    for p, runs in zip(prompts.prompts, got, strict=True):
        kept, others, failed = keep(runs)
        out.answers.append(kept)
        if others:
            out.variants[p.id] = others
        if failed:
            out.failures[p.id] = failed
    if all(a.error is not None for a in out.answers):
        out.error = f"no prompt answered; first: {out.answers[0].error}"
    return out


async def collect(
    urls: Sequence[str],
    prompts: PromptSet,
    *,
    model: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    repeat: int = 1,
) -> list[ReplicaPrint]:
    """Every replica's fingerprint, in ``urls`` order (replicas asked concurrently)."""
    return list(
        await asyncio.gather(
            *(
                fingerprint_replica(
                    u, prompts, model=model, headers=headers, timeout_s=timeout_s, repeat=repeat
                )
                for u in urls
            )
        )
    )
