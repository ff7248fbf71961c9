"""Chat completions on the wire: ``chat.completion.chunk`` events and the ``chat.completion`` body.

A stream opens with the assistant's role (``delta: {"role": "assistant", "content": ""}``), sent
with the first content so that a refusal still gets its status code; then one chunk per step
with ``delta.content``. Chunks carry the step's ``token_ids`` beside the delta (an extension that
OpenAI clients ignore and the probe uses to count tokens per chunk).
"""

from __future__ import annotations

import json
from typing import Any

from fleetwatch.engine_probe.serve.inflight import InFlight
from fleetwatch.engine_probe.serve.wire.render import Renderer

__all__ = ["ChatRenderer"]

_OPEN = b',"choices":[{"index":0,"delta":{"content":'
_ROLE = (
    b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
    b'"logprobs":null,"finish_reason":null}]}\n\n'
)


class ChatRenderer(Renderer):
    object_name = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def chunk(
        self, flight: InFlight, tokens: tuple[int, ...], text: str, finish: str | None
    ) -> bytes:
        first = flight.sse_head is None
        head = self._head(flight, _OPEN)
        role = b""
        if first:
            role = head[: -len(_OPEN)] + _ROLE
        ids = ",".join(map(str, tokens))
        fin = "null" if finish is None else json.dumps(finish)
        tail = f'}},"token_ids":[{ids}],"logprobs":null,"finish_reason":{fin}}}]}}\n\n'
        return role + head + json.dumps(text).encode() + tail.encode()

    def choice(self, text: str, tokens: list[int], finish: str | None) -> dict[str, Any]:
        return {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "token_ids": tokens,
            "logprobs": None,
            "finish_reason": finish,
        }
