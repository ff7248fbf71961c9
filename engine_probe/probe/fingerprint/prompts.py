"""The fingerprint's prompt set: a named, versioned list of chat and completion prompts.

The set shipped (``fingerprint-v1.json``) mixes what changes a replica's answers: a system
message and several turns (the chat template), code and JSON (the tokenizer), plain text on the
completions API (no template at all), a short answer cut by ``max_tokens``. A user's own set
(``--prompts FILE``) has the same shape; it is checked whole before anything is sent, and a
fingerprint is only ever compared with one taken on the same set (name and version).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fleetwatch.engine_probe.probe.errors import ProbeError

__all__ = ["MAX_PROMPTS", "Prompt", "PromptSet", "load_prompt_set", "parse_prompt_set"]

MAX_PROMPTS = 500
_ROLES = ("system", "user", "assistant")
_MAX_TOKENS_LIMIT = 4096


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``messages`` for the chat API, or ``prompt`` for the completions API."""

    id: str
    max_tokens: int
    messages: tuple[tuple[str, str], ...] = ()
    prompt: str | None = None

    @property
    def api(self) -> str:
        return "completions" if self.prompt is not None else "chat"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "max_tokens": self.max_tokens}
        if self.prompt is not None:
            out["prompt"] = self.prompt
        else:
            out["messages"] = [{"role": r, "content": c} for r, c in self.messages]
        return out


@dataclass(frozen=True)
class PromptSet:
    name: str
    version: int
    seed: int
    prompts: tuple[Prompt, ...]

    @property
    def digest(self) -> str:
        """sha256 of the prompts as sent: two sets with one name and version but other prompts
        are not comparable."""
        text = json.dumps([p.to_dict() for p in self.prompts], sort_keys=True)
        return hashlib.sha256(f"{self.seed}\n{text}".encode()).hexdigest()

    def identity(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "seed": self.seed,
            "sha256": self.digest,
        }


def _int(value: Any, where: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProbeError(f"{where} must be an integer from {low} to {high}, got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ProbeError(f"{where} must be a non-empty string")
    return value


def _prompt(raw: Any, where: str, default_max: int) -> Prompt:
    if not isinstance(raw, dict):
        raise ProbeError(f"{where} must be an object")
    unknown = sorted(set(raw) - {"id", "messages", "prompt", "max_tokens"})
    if unknown:
        raise ProbeError(f"{where} has unknown key {unknown[0]!r}")
    pid = _text(raw.get("id"), f"{where}.id")
    max_tokens = _int(
        raw.get("max_tokens", default_max), f"{where}.max_tokens", 1, _MAX_TOKENS_LIMIT
    )
    if ("messages" in raw) == ("prompt" in raw):
        raise ProbeError(f"{where} needs 'messages' (chat) or 'prompt' (completions), one of them")
    if "prompt" in raw:
        return Prompt(pid, max_tokens, prompt=_text(raw["prompt"], f"{where}.prompt"))
    messages = raw["messages"]
    if not isinstance(messages, list) or not messages:
        raise ProbeError(f"{where}.messages must be a non-empty list")
    out = []
    for j, m in enumerate(messages):
        at = f"{where}.messages[{j}]"
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise ProbeError(f"{at} must be an object with 'role' and 'content' only")
        if m["role"] not in _ROLES:
            raise ProbeError(f"{at}.role must be one of {', '.join(_ROLES)}, got {m['role']!r}")
        out.append((str(m["role"]), _text(m["content"], f"{at}.content")))
    return Prompt(pid, max_tokens, messages=tuple(out))


def parse_prompt_set(data: Any, where: str) -> PromptSet:
    """A checked ``PromptSet`` from parsed JSON; ``ProbeError`` naming ``where`` and the field."""
    if not isinstance(data, dict):
        raise ProbeError(f"{where}: must be a JSON object")
    unknown = sorted(set(data) - {"name", "version", "seed", "max_tokens", "prompts"})
    if unknown:
        raise ProbeError(f"{where}: unknown key {unknown[0]!r}")
    name = _text(data.get("name"), f"{where}: name")
    version = _int(data.get("version"), f"{where}: version", 1, 2**31 - 1)
    seed = _int(data.get("seed", 0), f"{where}: seed", 0, 2**31 - 1)
    default_max = _int(data.get("max_tokens", 32), f"{where}: max_tokens", 1, _MAX_TOKENS_LIMIT)
    raw = data.get("prompts")
    if not isinstance(raw, list) or not raw:
        raise ProbeError(f"{where}: prompts must be a non-empty list")
    if len(raw) > MAX_PROMPTS:
        raise ProbeError(f"{where}: {len(raw)} prompts, more than {MAX_PROMPTS}")
    prompts = tuple(_prompt(p, f"{where}: prompts[{i}]", default_max) for i, p in enumerate(raw))
    seen: set[str] = set()
    for i, p in enumerate(prompts):
        if p.id in seen:
            raise ProbeError(f"{where}: prompts[{i}].id {p.id!r} is used twice")
        seen.add(p.id)
    return PromptSet(name, version, seed, prompts)


def load_prompt_set(path: Path | None) -> PromptSet:
    """The set in ``path``, or the shipped ``fingerprint-v1`` when ``path`` is None."""
    if path is None:
        text = resources.files(__package__).joinpath("fingerprint-v1.json").read_text()
        return parse_prompt_set(json.loads(text), "fingerprint-v1.json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeError(f"--prompts {path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"--prompts {path}: not JSON: line {exc.lineno}: {exc.msg}") from None
    return parse_prompt_set(data, f"--prompts {path}")
