"""The chat template of the reference engine: messages to the one prompt string it is fed.

Each message becomes a header line naming its role (and the sender's ``name``, when given), its
text, and an end marker; a final assistant header asks the model to answer (the generation
prompt, which every chat server adds by default)::

    <|system|>
    You are terse.<|end|>
    <|user|>
    Hi<|end|>
    <|assistant|>

The rendered string is encoded with the engine's byte-level tokenizer (``text_ids.encode``), so
``usage.prompt_tokens`` counts the template's tokens too, as every OpenAI-compatible server does.
``developer`` (OpenAI's newer name for the system role) renders as ``system``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["END", "GENERATION_PROMPT", "ChatMessage", "render_chat"]

END = "<|end|>"
GENERATION_PROMPT = "<|assistant|>\n"


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One checked message: role (system, user or assistant), its text, the sender's name."""

    role: str
    content: str
    name: str | None = None


def render_chat(messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
    """The prompt string for ``messages``.

    >>> render_chat([ChatMessage("user", "Hi")])
    '<|user|>\\nHi<|end|>\\n<|assistant|>\\n'
    """
    parts = []
    for m in messages:
        head = m.role if m.name is None else f"{m.role} name={m.name}"
        parts.append(f"<|{head}|>\n{m.content}{END}\n")
    if add_generation_prompt:
        parts.append(GENERATION_PROMPT)
    return "".join(parts)
