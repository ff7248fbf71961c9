"""Completions on the wire: SSE content chunks, the usage chunk, error pieces, and the JSON body
of a non-streaming answer. Bytes and dicts only; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine_probe.serve.inflight import InFlight, Piece
from engine_probe.serve.text_ids import decode
from engine_probe.serve.validation import CompletionRequest

__all__ = ["DONE", "Renderer", "error_piece"]

DONE = b"data: [DONE]\n\n"
"""The SSE event that ends every stream."""


def error_piece(status: str, message: str, error_type: str | None) -> Piece:
    """The final piece of a request that ended with ``status`` other than ok."""
    body = {"error": {"message": message, "type": error_type or status, "code": status}}
    sse = b"data: " + json.dumps(body).encode() + b"\n\n" + DONE
    reason = "abort" if status in ("aborted", "rejected") else "error"
    return Piece((), sse, True, status, reason, error_type, message)


class Renderer:
    """Renders one model's completions; ``wall_clock`` gives the ``created`` second."""

    def __init__(self, model_name: str, wall_clock: Callable[[], float]) -> None:
        self.model_name = model_name
        self.wall_clock = wall_clock

    def envelope(self, flight: InFlight) -> dict[str, Any]:
        """The fields every completion body and chunk opens with."""
        return {
            "id": flight.request_id,
            "object": "text_completion",
            "created": int(self.wall_clock()),
            "model": self.model_name,
        }

    def chunk(self, flight: InFlight, tokens: tuple[int, ...], finish: str | None) -> bytes:
        """One SSE content chunk. The per-request head is rendered once; per token only the text,
        ids and finish reason are (this runs once per request per engine step)."""
        head = flight.sse_head
        if head is None:
            obj = self.envelope(flight)
            head = b"data: " + json.dumps(obj, separators=(",", ":")).encode()[:-1]
            head += b',"choices":[{"index":0,"text":'
            flight.sse_head = head
        ids = ",".join(map(str, tokens))
        fin = "null" if finish is None else json.dumps(finish)
        tail = f',"token_ids":[{ids}],"logprobs":null,"finish_reason":{fin}}}]}}\n\n'
        return head + json.dumps(decode(tokens)).encode() + tail.encode()

    def usage_chunk(
        self, flight: InFlight, prompt: int, completion: int, queue_s: float | None
    ) -> bytes:
        """The last SSE chunk: no choices, the token usage, and the queue time when known."""
        obj: dict[str, Any] = {
            **self.envelope(flight),
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        if queue_s is not None:
            obj["timing"] = {"queue_s": round(queue_s, 6)}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def whole(self, flight: InFlight, req: CompletionRequest) -> dict[str, Any]:
        """The JSON body of a non-streaming answer to a request that finished ok."""
        tokens = [t for p in flight.history for t in p.token_ids]
        last = flight.history[-1]
        timing = {} if flight.queue_s is None else {"timing": {"queue_s": round(flight.queue_s, 6)}}
        return {
            **timing,
            **self.envelope(flight),
            "choices": [
                {
                    "index": 0,
                    "text": decode(tokens),
                    "token_ids": tokens,
                    "logprobs": None,
                    "finish_reason": last.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": len(req.prompt_token_ids),
                "completion_tokens": len(tokens),
                "total_tokens": len(req.prompt_token_ids) + len(tokens),
            },
        }
