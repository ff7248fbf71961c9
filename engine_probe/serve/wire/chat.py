"""Checking a ``/v1/chat/completions`` body: messages to a prompt through the chat template.

``messages`` holds system, developer, user and assistant messages; ``content`` is a string or a
list of text parts (``{"type": "text", "text": ...}``, joined with newlines as vLLM does).
Images, audio, tool calls and tool results are refused with a 400, as are the fields that would
change the result and are not supported (``logprobs``, ``tools``, ``n`` > 1, penalties, …; see
``completions.COMMON_UNSUPPORTED``). ``max_completion_tokens`` wins over the older ``max_tokens``;
with neither, the answer may fill the context (vLLM's default). ``stop``, ``seed``,
``temperature``, ``top_p`` and ``stream_options.include_usage`` behave as on completions.
"""

from __future__ import annotations

import json
from typing import Any

from fleetwatch.engine_probe.serve.wire import options as o
from fleetwatch.engine_probe.serve.wire.chat_template import ChatMessage, render_chat
from fleetwatch.engine_probe.serve.wire.completions import (
    COMMON_UNSUPPORTED,
    CompletionRequest,
    checked_request,
    encode_checked,
)
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest
from fleetwatch.engine_probe.serve.wire.options import Limits

__all__ = ["parse_chat", "parse_messages"]

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MAX_MESSAGES = 4096

_CHAT_UNSUPPORTED: tuple[tuple[str, o.Neutral, str], ...] = (
    ("logprobs", lambda v: v is False, "this server does not return log probabilities"),
    (
        "top_logprobs",
        lambda v: o.is_int(v) and v == 0,
        "this server does not return log probabilities",
    ),
    ("tools", lambda v: v == [], "tool calling is not supported by this server"),
    ("functions", lambda v: v == [], "function calling is not supported by this server"),
    (
        "tool_choice",
        lambda v: v in ("none", "auto"),
        "tool calling is not supported by this server",
    ),
    (
        "function_call",
        lambda v: v in ("none", "auto"),
        "function calling is not supported by this server",
    ),
    ("modalities", lambda v: v == ["text"], "this server returns text only"),
    ("audio", lambda v: False, "this server returns text only"),
    ("prediction", lambda v: False, "predicted outputs are not supported by this server"),
    ("web_search_options", lambda v: False, "web search is not available"),
    ("echo", lambda v: v is False, "echoing the prompt is not supported by this server"),
    ("continue_final_message", lambda v: v is False, "only a new assistant message"),
    ("add_generation_prompt", lambda v: v is True, "the generation prompt is always added"),
    ("chat_template", lambda v: False, "the reference engine has one fixed template"),
)


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        o.utf8(content, "messages")
        return content
    if not isinstance(content, list):
        raise o.bad("messages", f"{where}.content must be a string or a list of text parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise o.bad("messages", f"{where}.content[{j}] must be an object")
        kind = part.get("type")
        if kind != "text":
            raise InvalidRequest(
                400,
                f"{where}.content[{j}] has type {json.dumps(kind)[:40]}: only text parts are "
                "supported by this server",
                "messages",
                code="unsupported_parameter",
                reason="UnsupportedParameter",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise o.bad("messages", f"{where}.content[{j}].text must be a string")
        o.utf8(text, "messages")
        texts.append(text)
    return "\n".join(texts)


def parse_messages(raw: Any) -> list[ChatMessage]:
    """Checked messages, or a 400 naming the message and what is wrong with it."""
    if not isinstance(raw, list) or not raw:
        raise o.bad("messages", "'messages' must be a non-empty list")
    if len(raw) > _MAX_MESSAGES:
        raise o.bad("messages", f"'messages' may hold at most {_MAX_MESSAGES} messages")
    out = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise o.bad("messages", f"{where} must be an object")
        role = m.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            if role in ("tool", "function"):
                raise InvalidRequest(
                    400,
                    f"{where} has role {role!r}: tool calling is not supported by this server",
                    "messages",
                    code="unsupported_parameter",
                    reason="UnsupportedParameter",
                )
            raise o.bad(
                "messages",
                f"{where}.role must be one of system, developer, user, assistant; "
                f"got {json.dumps(role)[:40]}",
            )
        if m.get("tool_calls") or m.get("function_call"):
            raise InvalidRequest(
                400,
                f"{where} carries tool calls: tool calling is not supported by this server",
                "messages",
                code="unsupported_parameter",
                reason="UnsupportedParameter",
            )
        content = m.get("content")
        if content is None and role != "assistant":
            raise o.bad("messages", f"{where}.content is required")
        text = "" if content is None else _text(content, where)
        name = m.get("name")
        if name is not None and (not isinstance(name, str) or not name.isprintable()):
            raise o.bad("messages", f"{where}.name must be a printable string")
        if name is not None:
            o.utf8(name, "messages")
        out.append(ChatMessage(_ROLES[role], text, name or None))
    return out


def parse_chat(raw: bytes, limits: Limits) -> CompletionRequest:
    """Parse and check a chat body; raise ``InvalidRequest`` with the right status."""
    body = o.load_body(raw)
    model = o.check_model(body, limits)
    if "messages" not in body:
        raise o.bad("messages", "'messages' is required")
    prompt = render_chat(parse_messages(body["messages"]))
    ids = encode_checked(prompt, limits.vocab_size, "messages")
    o.refuse_unsupported(body, COMMON_UNSUPPORTED + _CHAT_UNSUPPORTED)
    names = ("max_completion_tokens", "max_tokens")
    max_tokens = o.max_tokens(body, names, None, len(ids), limits)
    used = next((n for n in names if body.get(n) is not None), "max_tokens")
    o.check_fits(len(ids), max_tokens, limits, "messages", used)
    return checked_request(body, ids, max_tokens, model, api="chat", prompt_was_text=True)
