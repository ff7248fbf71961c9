"""Checking a ``/v1/completions`` body: a pure function from bytes to a request or a 4xx.

Bad input is never a 500: unparseable JSON is 400, a field of the wrong type or out of bounds is
422, an unknown model is 404; each answer names the field (``param``) and says what was wrong.
Fields this server does not use (``logprobs``, ``user``, ``ignore_eos``, …) are accepted and ignored,
as OpenAI-compatible servers do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from engine_probe.serve.text_ids import encode

__all__ = ["CompletionRequest", "InvalidRequest", "Limits", "parse_completion"]


class InvalidRequest(Exception):
    """A request the server refuses: HTTP ``status``, a message, and the offending field."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True, slots=True)
class Limits:
    """What the served model accepts: vocabulary, context positions, and its name."""

    vocab_size: int
    context_tokens: int
    model_name: str
    max_tokens_cap: int | None = None


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """A checked completion request; the prompt is already token ids."""

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
    """The body as canonical JSON: two requests with one idempotency key must match on it."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(
    body: dict[str, Any], name: str, default: float, lo: float, hi: float, lo_open: bool = False
) -> float:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InvalidRequest(422, f"'{name}' must be a number, got {json.dumps(v)[:40]}", name)
    if v > hi or v < lo or (lo_open and v == lo):
        side = "(" if lo_open else "["
        raise InvalidRequest(422, f"'{name}' must be in {side}{lo:g}, {hi:g}], got {v}", name)
    return float(v)


def _prompt(body: dict[str, Any], limits: Limits) -> tuple[list[int], bool]:
    if "prompt" not in body:
        raise InvalidRequest(422, "'prompt' is required", "prompt")
    p = body["prompt"]
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str | list):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        ids, text = encode(p, limits.vocab_size), True
    elif isinstance(p, list):
        if p and all(isinstance(x, list) for x in p):
            raise InvalidRequest(
                422, "batched prompts are not supported: send one prompt per request", "prompt"
            )
        for i, x in enumerate(p):
            if not _is_int(x):
                raise InvalidRequest(
                    422,
                    f"'prompt' token {i} must be an integer, got {json.dumps(x)[:40]}",
                    "prompt",
                )
            if not 0 <= x < limits.vocab_size:
                raise InvalidRequest(
                    422,
                    f"'prompt' token {i} = {x} is outside the vocabulary [0, {limits.vocab_size})",
                    "prompt",
                )
        ids, text = list(p), False
    else:
        raise InvalidRequest(422, "'prompt' must be a string or a list of token ids", "prompt")
    if not ids:
        raise InvalidRequest(422, "'prompt' is empty", "prompt")
    return ids, text


def parse_completion(raw: bytes, limits: Limits) -> CompletionRequest:
    """Parse and check a completion body; raise ``InvalidRequest`` with the right status."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise InvalidRequest(400, f"body is not valid JSON: {msg}") from None
    except RecursionError:
        raise InvalidRequest(400, "body is not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise InvalidRequest(400, "body must be a JSON object")
    model = body.get("model", limits.model_name)
    if not isinstance(model, str):
        raise InvalidRequest(422, "'model' must be a string", "model")
    if model != limits.model_name:
        raise InvalidRequest(
            404,
            f"model {model[:80]!r} is not served here (this server serves {limits.model_name!r})",
            "model",
        )
    ids, was_text = _prompt(body, limits)
    max_tokens = body.get("max_tokens", 16)
    if max_tokens is None:
        max_tokens = limits.context_tokens - len(ids)
    if not _is_int(max_tokens):
        raise InvalidRequest(
            422, f"'max_tokens' must be an integer, got {json.dumps(max_tokens)[:40]}", "max_tokens"
        )
    if max_tokens < 1:
        raise InvalidRequest(422, f"'max_tokens' must be >= 1, got {max_tokens}", "max_tokens")
    if limits.max_tokens_cap is not None and max_tokens > limits.max_tokens_cap:
        raise InvalidRequest(
            422, f"'max_tokens' must be <= {limits.max_tokens_cap}, got {max_tokens}", "max_tokens"
        )
    if len(ids) + max_tokens > limits.context_tokens:
        raise InvalidRequest(
            422,
            f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the context length ({limits.context_tokens})",
            "prompt" if len(ids) >= limits.context_tokens else "max_tokens",
        )
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise InvalidRequest(422, f"'seed' must be an integer, got {json.dumps(seed)[:40]}", "seed")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest(422, "'stream' must be true or false", "stream")
    n = body.get("n", 1)
    if n is not None and n != 1:
        raise InvalidRequest(422, "'n' must be 1: one completion per request", "n")
    opts = body.get("stream_options")
    include_usage = True
    if opts is not None:
        if not isinstance(opts, dict):
            raise InvalidRequest(422, "'stream_options' must be an object", "stream_options")
        inc = opts.get("include_usage", True)
        if not isinstance(inc, bool):
            raise InvalidRequest(
                422, "'stream_options.include_usage' must be true or false", "stream_options"
            )
        include_usage = inc
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return CompletionRequest(
        prompt_token_ids=tuple(ids),
        prompt_was_text=was_text,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        model=model,
        canonical=canonical,
    )
