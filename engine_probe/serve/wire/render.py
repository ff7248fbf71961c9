"""Completions on the wire: SSE content chunks, the usage chunk, error pieces, and the JSON body
of a non-streaming answer. Bytes and dicts only; no I/O. ``chat_render`` does the same for chat.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fleetwatch.engine_probe.serve.inflight import InFlight, Piece
from fleetwatch.engine_probe.serve.wire.completions import CompletionRequest

__all__ = ["DONE", "Renderer", "error_piece"]

DONE = b"data: [DONE]\n\n"
"""The SSE event that ends every stream."""


def error_piece(status: str, message: str, error_type: str | None) -> Piece:
    """The final piece of a request that ended with ``status`` other than ok: an OpenAI error
    object as the last event (the SDK raises ``APIError`` on it), then ``[DONE]``."""
    body = {
        "error": {
            "message": message,
            "type": "server_error",
            "param": None,
            "code": error_type or status,
        }
    }
    sse = b"data: " + json.dumps(body).encode() + b"\n\n" + DONE
    reason = "abort" if status in ("aborted", "rejected") else "error"
    return Piece((), sse, True, status, reason, error_type, message)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Renderer:
    """Renders one model's completions; ``wall_clock`` gives the ``created`` second."""

    object_name = "text_completion"
    chunk_object = "text_completion"

    def __init__(self, model_name: str, wall_clock: Callable[[], float]) -> None:
        self.model_name = model_name
        self.wall_clock = wall_clock

    def envelope(self, flight: InFlight, object_name: str | None = None) -> dict[str, Any]:
        """The fields every body and chunk opens with."""
        return {
            "id": flight.request_id,
            "object": object_name or self.chunk_object,
            "created": int(self.wall_clock()),
            "model": self.model_name,
        }

    def _head(self, flight: InFlight, opening: bytes) -> bytes:
        head = flight.sse_head
        if head is None:
            obj = self.envelope(flight)
            head = b"data: " + json.dumps(obj, separators=(",", ":")).encode()[:-1] + opening
            flight.sse_head = head
        return head

    def chunk(
        self, flight: InFlight, tokens: tuple[int, ...], text: str, finish: str | None
    ) -> bytes:
        """One SSE content chunk. The per-request head is rendered once; per chunk only the text,
        ids and finish reason are (this runs once per request per engine step)."""
        head = self._head(flight, b',"choices":[{"index":0,"text":')
        ids = ",".join(map(str, tokens))
        fin = "null" if finish is None else json.dumps(finish)
        tail = f',"token_ids":[{ids}],"logprobs":null,"finish_reason":{fin}}}]}}\n\n'
        return head + json.dumps(text).encode() + tail.encode()

    def usage_chunk(
        self, flight: InFlight, prompt: int, completion: int, queue_s: float | None
    ) -> bytes:
        """The last SSE chunk when the client asked for usage: no choices, the token usage, and
        the queue time when known."""
        obj: dict[str, Any] = {
            **self.envelope(flight),
            "choices": [],
            "usage": _usage(prompt, completion),
        }
        if queue_s is not None:
            obj["timing"] = {"queue_s": round(queue_s, 6)}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def choice(self, text: str, tokens: list[int], finish: str | None) -> dict[str, Any]:
        return {
            "index": 0,
            "text": text,
            "token_ids": tokens,
            "logprobs": None,
            "finish_reason": finish,
        }

    def whole(self, flight: InFlight, req: CompletionRequest) -> dict[str, Any]:
        """The JSON body of a non-streaming answer to a request that finished ok."""
        tokens = [t for p in flight.history for t in p.token_ids]
        text = "".join(p.text for p in flight.history)
        last = flight.history[-1]
        timing = {} if flight.queue_s is None else {"timing": {"queue_s": round(flight.queue_s, 6)}}
        return {
            **self.envelope(flight, self.object_name),
            "choices": [self.choice(text, tokens, last.finish_reason)],
            "usage": _usage(len(req.prompt_token_ids), flight.completion_tokens),
            **timing,
        }
