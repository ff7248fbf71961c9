"""The request fields ``/v1/completions`` and ``/v1/chat/completions`` share, checked the same way.

Every problem is an ``InvalidRequest`` with OpenAI's status: 400 naming the field (``param``), 404
for a model not served here. Fields that would change the result but are not supported
(``logprobs``, penalties, ``n`` > 1, tools, …) are refused with a 400 that says so, never
ignored; at their neutral values (``n: 1``, ``presence_penalty: 0``, ``logprobs: false``) they
are accepted. Fields this server does not know are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest

__all__ = [
    "MAX_STOP",
    "Limits",
    "Neutral",
    "bad",
    "check_fits",
    "check_model",
    "is_int",
    "load_body",
    "max_tokens",
    "number",
    "refuse_unsupported",
    "seed",
    "stop_strings",
    "stream_flags",
    "utf8",
]

MAX_STOP = 16
"""Stop sequences per request (OpenAI allows 4, vLLM any number)."""
_MAX_STOP_CHARS = 256


@dataclass(frozen=True, slots=True)
class Limits:
    """What the served model accepts: vocabulary, context positions, its name, and the KV pool."""

    vocab_size: int
    context_tokens: int
    model_name: str
    max_tokens_cap: int | None = None
    kv_blocks: int | None = None
    """KV blocks in the pool; a request needing more can never run (None: no check)."""
    block_size: int = 16

    @property
    def kv_tokens(self) -> int | None:
        return None if self.kv_blocks is None else self.kv_blocks * self.block_size


def _show(v: Any) -> str:
    return json.dumps(v)[:40]


def bad(name: str, message: str) -> InvalidRequest:
    return InvalidRequest(400, message, name, code="invalid_value")


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``, or a 400."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise InvalidRequest(400, f"body is not valid JSON: {msg}", code="invalid_json") from None
    except RecursionError:
        raise InvalidRequest(
            400, "body is not valid JSON: nested too deeply", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest(400, "body must be a JSON object", code="invalid_json")
    return body


def utf8(text: str, name: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (``"\\ud800"``, legal in JSON, not in UTF-8) is a 400."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad(
            name, f"'{name}' holds a lone surrogate at character {exc.start}: not valid Unicode"
        ) from None


def check_model(body: dict[str, Any], limits: Limits) -> str:
    model = body.get("model", limits.model_name)
    if model is None:
        return limits.model_name
    if not isinstance(model, str):
        raise bad("model", "'model' must be a string")
    if model != limits.model_name:
        raise InvalidRequest(
            404,
            f"model {model[:80]!r} is not served here (this server serves {limits.model_name!r})",
            "model",
        )
    return model


def number(
    body: dict[str, Any], name: str, default: float, lo: float, hi: float, lo_open: bool = False
) -> float:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise bad(name, f"'{name}' must be a number, got {_show(v)}")
    if v > hi or v < lo or (lo_open and v == lo):
        side = "(" if lo_open else "["
        raise bad(name, f"'{name}' must be in {side}{lo:g}, {hi:g}], got {v}")
    return float(v)


def seed(body: dict[str, Any]) -> int | None:
    s = body.get("seed")
    if s is not None and not is_int(s):
        raise bad("seed", f"'seed' must be an integer, got {_show(s)}")
    return s


def stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage). A usage chunk is streamed only when the client asked for it with
    ``stream_options.include_usage``, as OpenAI and vLLM do; ``stream_options`` without
    ``stream`` is a 400 (vLLM's behaviour)."""
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad("stream", "'stream' must be true or false")
    opts = body.get("stream_options")
    if opts is None:
        return stream, False
    if not isinstance(opts, dict):
        raise bad("stream_options", "'stream_options' must be an object")
    if not stream:
        raise bad("stream_options", "'stream_options' is only allowed when 'stream' is true")
    inc = opts.get("include_usage", False)
    if inc is None:
        inc = False
    if not isinstance(inc, bool):
        raise bad("stream_options", "'stream_options.include_usage' must be true or false")
    return stream, inc


def stop_strings(body: dict[str, Any]) -> tuple[str, ...]:
    """``stop`` as a tuple: a string, a list of up to ``MAX_STOP`` strings, or null."""
    v = body.get("stop")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad("stop", "'stop' must be a string or a list of strings")
    if len(items) > MAX_STOP:
        raise bad("stop", f"'stop' may hold at most {MAX_STOP} strings, got {len(items)}")
    for s in items:
        if not s:
            raise bad("stop", "'stop' strings must not be empty")
        if len(s) > _MAX_STOP_CHARS:
            raise bad("stop", f"'stop' strings must be at most {_MAX_STOP_CHARS} characters")
        utf8(s, "stop")
    return tuple(dict.fromkeys(items))


Neutral = Callable[[Any], bool]


def refuse_unsupported(body: dict[str, Any], fields: Sequence[tuple[str, Neutral, str]]) -> None:
    """A 400 for the first field present at a value that is not neutral: (name, is_neutral, why)."""
    for name, neutral, why in fields:
        if name in body and body[name] is not None and not neutral(body[name]):
            raise InvalidRequest(
                400,
                f"'{name}': {why} (got {_show(body[name])})",
                name,
                code="unsupported_parameter",
                reason="UnsupportedParameter",
            )


def max_tokens(
    body: dict[str, Any], names: Sequence[str], default: int | None, prompt: int, limits: Limits
) -> int:
    """The output limit: the first of ``names`` present, else ``default`` (None: as many as fit)."""
    name = next((n for n in names if body.get(n) is not None), names[0])
    v = body.get(name)
    fit = limits.context_tokens - prompt
    if limits.kv_tokens is not None:
        fit = min(fit, limits.kv_tokens - prompt)
    cap = limits.max_tokens_cap
    if v is None:
        v = max(1, fit) if default is None else default
        return min(v, cap) if cap is not None else v
    if not is_int(v):
        raise bad(name, f"'{name}' must be an integer, got {_show(v)}")
    if v < 1:
        raise bad(name, f"'{name}' must be >= 1, got {v}")
    if cap is not None and v > cap:
        raise bad(name, f"'{name}' must be <= {cap}, got {v}")
    return int(v)


def check_fits(prompt: int, out: int, limits: Limits, prompt_param: str, out_param: str) -> None:
    """A 400 naming the limit when prompt + output can never be served: the model's context, or
    the whole KV pool. Retrying cannot help, so this is never a 429."""
    ctx = limits.context_tokens
    param = prompt_param if prompt >= ctx else out_param
    if prompt + out > ctx:
        raise InvalidRequest(
            400,
            f"this model's maximum context length is {ctx} tokens; the prompt has {prompt} "
            f"tokens and {out_param} asks for {out} more ({prompt + out} in all)",
            param,
            code="context_length_exceeded",
            reason="ContextLengthExceeded",
        )
    kv = limits.kv_tokens
    if kv is not None and prompt + out > kv:
        raise InvalidRequest(
            400,
            f"the prompt ({prompt} tokens) + {out_param} ({out}) needs "
            f"{-(-(prompt + out) // limits.block_size)} KV blocks of {limits.block_size} tokens; "
            f"the KV cache holds {limits.kv_blocks} blocks ({kv} tokens) in all",
            prompt_param if prompt >= kv else out_param,
            code="context_length_exceeded",
            reason="KVCapacityExceeded",
        )
