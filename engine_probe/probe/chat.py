"""The two OpenAI-compatible APIs the probe speaks, and finding the served model.

``chat`` (``POST /v1/chat/completions``) is the default: it is what users deploy and call (chat
models behind the chat endpoint, with the server's chat template around every prompt), so it is
what a latency number should describe. ``completions`` (``POST /v1/completions``) sends the
prompt as is. Both ask for ``usage`` in the last chunk (``stream_options.include_usage``), which
is where token counts come from; a chat stream's first chunk often carries only the assistant's
role, and is not a token: TTFT is taken at the first chunk with content.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import aiohttp

from fleetwatch.engine_probe.probe.errors import ProbeError

__all__ = [
    "API_PATHS",
    "FALLBACK_MODEL",
    "Api",
    "base_url",
    "chat_body",
    "discover_model",
    "resolve_model",
]

_log = logging.getLogger(__name__)

FALLBACK_MODEL = "default"
"""The model sent when none was given and the server lists none."""

Api = Literal["chat", "completions"]
API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def base_url(url: str) -> str:
    """The server root of ``url`` (a root, or a full endpoint URL of either API)."""
    url = url.rstrip("/")
    for path in API_PATHS.values():
        if url.endswith(path):
            return url[: -len(path)]
    return url


def chat_body(
    prompt: str, max_tokens: int, *, model: str = "reference", **extra: Any
) -> dict[str, Any]:
    """A streaming chat body with one user message that asks for usage in the last chunk.

    ``max_tokens`` (not ``max_completion_tokens``) because every OpenAI-compatible engine reads
    it; ``ignore_eos`` keeps output lengths as requested on servers that honour it (vLLM does).
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "ignore_eos": True,
    }
    body.update(extra)
    return body


async def discover_model(
    url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0
) -> str:
    """The first model ``GET /v1/models`` lists (the probe's default ``model``); raises
    ``ProbeError`` saying why there is none."""
    target = f"{base_url(url)}/v1/models"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s,
            s.get(target, headers=headers) as r,
        ):
            status = r.status
            data = await r.json(content_type=None) if status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ProbeError(f"GET {target} failed: {type(exc).__name__}: {exc}") from None
    if status != 200:
        raise ProbeError(f"GET {target} answered HTTP {status}")
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models[0], dict) or not isinstance(models[0].get("id"), str):
        raise ProbeError(f"GET {target} lists no model")
    return str(models[0]["id"])


async def resolve_model(url: str, headers: dict[str, str] | None = None) -> str:
    """``discover_model``, or ``FALLBACK_MODEL`` with a warning when the server lists none (it
    may be down: the run then measures that, counting every request as an error)."""
    try:
        return await discover_model(url, headers)
    except ProbeError as exc:
        _log.warning("no --model given and %s: sending model %r", exc, FALLBACK_MODEL)
        return FALLBACK_MODEL
