"""Checking a ``/v1/completions`` body: a pure function from bytes to a request or an error.

Bad input is never a 500: unparseable JSON, a field of the wrong type or out of bounds, a field
that is not supported, and a request that can never fit (context or KV pool) are all 400 with
the field named (``param``); an unknown model is 404. The shared checks live in ``options``;
chat bodies are checked in ``chat``. ``ignore_eos``, ``user`` and unknown fields are accepted
and ignored (this engine has no end-of-sequence token).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fleetwatch.engine_probe.serve.wire import options as o
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest
from fleetwatch.engine_probe.serve.wire.options import Limits
from fleetwatch.engine_probe.serve.wire.text_ids import encode

__all__ = [
    "COMMON_UNSUPPORTED",
    "CompletionRequest",
    "InvalidRequest",
    "Limits",
    "parse_completion",
]


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """A checked request (completions or chat); the prompt is already token ids."""

    prompt_token_ids: tuple[int, ...]
    prompt_was_text: bool
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stream: bool
    include_usage: bool
    model: str
    canonical: str
    """The API and body as canonical JSON: two requests with one idempotency key must match."""
    stop: tuple[str, ...] = ()
    api: str = "completions"
    """``completions`` or ``chat``."""

    @property
    def operation(self) -> str:
        """The GenAI operation name spans carry."""
        return "chat" if self.api == "chat" else "text_completion"


def _num(neutral: float) -> o.Neutral:
    return lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v == neutral


def _never(v: Any) -> bool:
    return False


COMMON_UNSUPPORTED: tuple[tuple[str, o.Neutral, str], ...] = (
    (
        "n",
        lambda v: o.is_int(v) and v == 1,
        "must be 1: this server returns one choice per request",
    ),
    ("presence_penalty", _num(0), "penalties are not supported by this server"),
    ("frequency_penalty", _num(0), "penalties are not supported by this server"),
    ("repetition_penalty", _num(1), "penalties are not supported by this server"),
    ("logit_bias", lambda v: v == {}, "logit bias is not supported by this server"),
    (
        "top_k",
        lambda v: o.is_int(v) and v in (-1, 0),
        "top-k sampling is not supported by this server",
    ),
    ("min_p", _num(0), "min-p sampling is not supported by this server"),
    ("min_tokens", _num(0), "a minimum output length is not supported by this server"),
    ("response_format", lambda v: v == {"type": "text"}, "this server returns plain text only"),
    ("guided_json", _never, "structured output is not supported by this server"),
    ("guided_regex", _never, "structured output is not supported by this server"),
    ("guided_choice", _never, "structured output is not supported by this server"),
    ("guided_grammar", _never, "structured output is not supported by this server"),
)

_COMPLETION_UNSUPPORTED: tuple[tuple[str, o.Neutral, str], ...] = (
    (
        "best_of",
        lambda v: o.is_int(v) and v == 1,
        "must be 1: this server returns one choice per request",
    ),
    ("echo", lambda v: v is False, "echoing the prompt is not supported by this server"),
    ("logprobs", lambda v: v is False, "this server does not return log probabilities"),
    ("prompt_logprobs", lambda v: v is False, "this server does not return log probabilities"),
    ("suffix", lambda v: v == "", "suffixes (insertion) are not supported by this server"),
)


def _prompt(body: dict[str, Any], limits: Limits) -> tuple[list[int], bool]:
    if "prompt" not in body:
        raise o.bad("prompt", "'prompt' is required")
    p = body["prompt"]
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str | list):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        ids, text = encode_checked(p, limits.vocab_size, "prompt"), True
    elif isinstance(p, list):
        if p and all(isinstance(x, str | list) for x in p):
            raise InvalidRequest(
                400,
                f"a list of {len(p)} prompts is not supported: this server serves one prompt "
                "per request, so send them as separate requests",
                "prompt",
                code="unsupported_parameter",
                reason="UnsupportedParameter",
            )
        for i, x in enumerate(p):
            if not o.is_int(x):
                raise o.bad(
                    "prompt", f"'prompt' token {i} must be an integer, got {json.dumps(x)[:40]}"
                )
            if not 0 <= x < limits.vocab_size:
                raise o.bad(
                    "prompt",
                    f"'prompt' token {i} = {x} is outside the vocabulary [0, {limits.vocab_size})",
                )
        ids, text = list(p), False
    else:
        raise o.bad("prompt", "'prompt' must be a string or a list of token ids")
    if not ids:
        raise o.bad("prompt", "'prompt' is empty")
    return ids, text


def encode_checked(text: str, vocab_size: int, param: str) -> list[int]:
    """Token ids of ``text``; a lone surrogate is a 400 naming ``param``."""
    o.utf8(text, param)
    return encode(text, vocab_size)


def parse_completion(raw: bytes, limits: Limits) -> CompletionRequest:
    """Parse and check a completion body; raise ``InvalidRequest`` with the right status."""
    body = o.load_body(raw)
    model = o.check_model(body, limits)
    ids, was_text = _prompt(body, limits)
    o.refuse_unsupported(body, COMMON_UNSUPPORTED + _COMPLETION_UNSUPPORTED)
    max_tokens = o.max_tokens(body, ("max_tokens",), 16, len(ids), limits)
    o.check_fits(len(ids), max_tokens, limits, "prompt", "max_tokens")
    return checked_request(
        body, ids, max_tokens, model, api="completions", prompt_was_text=was_text
    )


def checked_request(
    body: dict[str, Any],
    ids: list[int],
    max_tokens: int,
    model: str,
    *,
    api: str,
    prompt_was_text: bool,
) -> CompletionRequest:
    """The request from a body whose prompt, output limit and model the caller checked; the
    fields both APIs share (stream flags, sampling, stop strings) are checked here. ``api``
    (``completions`` or ``chat``) is kept and opens the canonical form."""
    stream, include_usage = o.stream_flags(body)
    return CompletionRequest(
        prompt_token_ids=tuple(ids),
        prompt_was_text=prompt_was_text,
        max_tokens=max_tokens,
        temperature=o.number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=o.number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=o.seed(body),
        stream=stream,
        include_usage=include_usage,
        model=model,
        canonical=f"{api}:" + json.dumps(body, sort_keys=True, separators=(",", ":")),
        stop=o.stop_strings(body),
        api=api,
    )
