"""The HTTP side of a request: follow its ``InFlight`` and answer with an SSE stream or one
JSON body, or with the right status when the engine refused or failed it before any output.

Headers go out with the first output, so a refusal still gets a proper code: the engine's own
rejection is 429 (``QueueFull``) or 400 when the request can never fit (``KVCapacityExceeded``:
retrying cannot help), an abort before the start 503 (both retryable ones with ``Retry-After``),
an invalid request 400, an engine error 500. These requests were seen by the engine, which
records them itself. A streaming connection gets a bounded write buffer (backpressure); a
reader too far behind is hung up on. When the last reader leaves early the producer is cancelled.
"""

from __future__ import annotations

import socket

from aiohttp import web

from fleetwatch.engine_probe.serve.front.admission import FrontDoor
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.http_metrics import HttpMetrics
from fleetwatch.engine_probe.serve.inflight import InFlight
from fleetwatch.engine_probe.serve.wire.completions import CompletionRequest
from fleetwatch.engine_probe.serve.wire.errors import PREPARED, InvalidRequest
from fleetwatch.engine_probe.serve.wire.render import Renderer

__all__ = ["Responder"]


class Responder:
    """Answers HTTP requests from the ``InFlight`` they follow."""

    def __init__(self, config: ServerConfig, metrics: HttpMetrics, door: FrontDoor) -> None:
        self.config = config
        self.metrics = metrics
        self.door = door

    async def respond(
        self, request: web.Request, flight: InFlight, req: CompletionRequest, render: Renderer
    ) -> web.StreamResponse:
        transport = request.transport

        def hang_up() -> None:
            self.metrics.abort("slow_reader")
            if transport is not None:
                transport.abort()

        reader = flight.attach(hang_up, bounded=req.stream)
        resp: web.StreamResponse | None = None
        try:
            await flight.first.wait()
            head = flight.history[0]
            if head.final and not head.token_ids and head.status != "ok":
                return self._refused(head.status, head.error_type, head.message)
            if not req.stream:
                await flight.finished.wait()
                return self._whole(flight, req, render)
            resp = web.StreamResponse(
                status=200,
                headers={
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache",
                    "X-Request-Id": flight.request_id,
                },
            )
            await resp.prepare(request)
            request[PREPARED] = True
            self.metrics.code(200)
            if transport is not None:
                transport.set_write_buffer_limits(high=self.config.write_buffer_bytes)
                sock = transport.get_extra_info("socket")
                if sock is not None and self.config.socket_send_buffer_bytes is not None:
                    sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_send_buffer_bytes
                    )
            while True:
                pieces = await flight.next_pieces(reader)
                if not pieces:
                    break
                await resp.write(b"".join(p.sse for p in pieces))
                if pieces[-1].final:
                    await resp.write_eof()
                    break
            return resp
        except (ConnectionResetError, ConnectionError):
            return resp if resp is not None else web.Response(status=499)
        finally:
            if flight.detach(reader) and flight.producer is not None:
                if not reader.dropped:
                    self.metrics.abort("client_disconnect")
                flight.producer.cancel()

    def _refused(
        self, status: str | None, error_type: str | None, message: str | None
    ) -> web.Response:
        """The answer to a request that ended before its first output."""
        if error_type in ("EngineConfigError", "KVCapacityExceeded"):  # never servable: no retry
            text = message or "the request can never be served by this engine"
            if error_type == "KVCapacityExceeded":
                text = "prompt + max_tokens is larger than the whole KV cache"
            return self.metrics.error(
                InvalidRequest(400, text, code="context_length_exceeded", reason=error_type)
            )
        code = {"rejected": 429, "aborted": 503}.get(status or "", 500)
        headers = {"Retry-After": self.door.retry_after()} if code in (429, 503) else None
        text = {
            429: "the engine's waiting queue is full; retry later",
            503: "request aborted before it started",
        }.get(code, f"engine error: {error_type or 'unknown'}")
        return self.metrics.error(InvalidRequest(code, text), headers)

    def _whole(self, flight: InFlight, req: CompletionRequest, render: Renderer) -> web.Response:
        last = flight.history[-1]
        if last.status != "ok":
            code = 503 if last.status == "aborted" else 500
            err = InvalidRequest(code, f"request {last.status}", code=last.error_type)
            return self.metrics.error(err, {"X-Request-Id": flight.request_id})
        self.metrics.code(200)
        return web.json_response(
            render.whole(flight, req), headers={"X-Request-Id": flight.request_id}
        )
