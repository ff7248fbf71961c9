"""One request's mutable state inside the engine, and the value handed back per step."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from fleetwatch.engine_probe.engine.config import SamplingParams

__all__ = ["Request", "RequestOutput", "RequestState"]


class RequestState(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one step produced for one request.

    ``new_token_ids`` are the tokens generated since the previous output for this request.
    ``status`` ("ok" | "error" | "aborted" | "rejected") and ``finish_reason``
    ("stop" | "length" | "abort" | "error") are set once ``finished``.
    """

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    status: str | None = None
    finish_reason: str | None = None
    error_type: str | None = None


class Request:
    """Mutable per-request state owned by the scheduler (not thread-safe; step-loop only).

    ``tokens`` is prompt + generated so far. ``num_computed`` counts tokens whose K/V sit in the
    cache. While ``num_computed < prefill_target`` the request is prefilling (its prompt, or on a
    resume its prompt + generated tokens); after that each step computes one token.
    ``num_emitted`` counts output tokens already handed out (0: no first token yet); a request
    restarted after preemption regenerates tokens without handing them out again, and
    ``replay`` holds the tokens it had handed out: its regenerated positions take those tokens
    (replayed, not re-sampled), so the restart cannot contradict what a client was streamed.
    """

    __slots__ = (
        "block_hashes",
        "block_table",
        "cached_prompt_tokens",
        "chunk_cached",
        "error_at_first_token",
        "max_tokens",
        "num_computed",
        "num_emitted",
        "num_prompt",
        "prefill_target",
        "replay",
        "request_id",
        "sampling",
        "scheduled_once",
        "state",
        "tokens",
    )

    def __init__(
        self,
        request_id: str,
        prompt: list[int],
        max_tokens: int,
        sampling: SamplingParams,
        error_at_first_token: bool,
    ) -> None:
        self.request_id = request_id
        self.tokens = prompt
        self.num_prompt = len(prompt)
        self.max_tokens = max_tokens
        self.sampling = sampling
        self.error_at_first_token = error_at_first_token
        self.state = RequestState.WAITING
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []
        self.num_computed = 0
        self.prefill_target = len(prompt)
        self.num_emitted = 0
        self.replay: list[int] = []
        self.cached_prompt_tokens = 0
        self.chunk_cached = 0
        self.scheduled_once = False

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.num_prompt
