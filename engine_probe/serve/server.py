"""The OpenAI-compatible HTTP server for the reference engine (aiohttp).

Routes: ``POST /v1/completions`` (SSE streaming with usage in the last chunk, or one JSON body),
``GET /metrics`` (the server's Prometheus registry: engine telemetry plus the HTTP counters below),
``GET /health`` and ``GET /v1/models``.

Behaviour that matters under load:

- Admission: at most ``max_queue`` requests may wait for their first token; beyond that the answer
  is 429 with ``Retry-After`` (seconds, from the recent mean request time). The engine's own
  rejection (``EngineConfig.max_waiting``) is answered 429 too. Headers are sent with the first
  output, so a request refused by the engine still gets a proper status code.
- A client that disconnects cancels its handler (aiohttp handler cancellation); when no reader is
  left the engine request is aborted and its KV blocks are freed at once.
- ``Idempotency-Key``: a request carrying a key seen within ``idempotency_ttl_s`` attaches to that
  request (in flight or finished ok) and replays its stream: the work is done once. The same key
  with a different body is refused (422); a key whose request was aborted or failed runs anew.
- Slow readers: a streaming reader more than ``max_lag`` outputs behind is dropped (its connection
  closed); if it was the only reader the request is aborted.
- ``traceparent`` (W3C) is handed to the engine, so the request's span continues the caller's trace.
- ``ServerHandle.stop()`` drains (``drain`` here): the listener closes and new requests get 503, in-flight streams finish (up to
  ``drain_timeout_s``), then the rest are aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from engine_probe.engine.errors import EngineConfigError
from engine_probe.serve.inflight import InFlight, Piece
from engine_probe.serve.queue_times import QueueTimes
from engine_probe.serve.text_ids import decode
from engine_probe.serve.validation import (
    CompletionRequest,
    InvalidRequest,
    Limits,
    parse_completion,
    valid_traceparent,
)

__all__ = ["CompletionServer", "ServerConfig"]

_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Limits of the HTTP front. Counts, seconds, bytes."""

    max_queue: int = 256
    """Requests admitted but without a first output yet; one more is answered 429."""
    max_lag: int = 512
    """Outputs a streaming reader may fall behind before it is dropped."""
    idempotency_ttl_s: float = 300.0
    idempotency_max_keys: int = 4096
    drain_timeout_s: float = 30.0
    max_body_bytes: int = 1 << 20
    max_tokens_cap: int | None = None
    write_buffer_bytes: int = 1 << 16
    """High-water mark of each connection's write buffer: beyond it a write waits (backpressure)."""
    socket_send_buffer_bytes: int | None = None
    """SO_SNDBUF for streaming connections (None: the kernel's default, usually megabytes)."""

    def __post_init__(self) -> None:
        for name in ("max_queue", "max_lag", "idempotency_max_keys", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerConfig.{name} must be >= 1")


class _HttpMetrics:
    """The server's own series (bounded labels: status codes and a fixed set of reasons)."""

    def __init__(self, registry: CollectorRegistry, replica: str) -> None:
        self.responses = Counter(
            "fleetwatch_http_responses",
            "HTTP responses by status code.",
            ["replica", "code"],
            registry=registry,
        )
        self.stream_ends = Counter(
            "fleetwatch_http_stream_aborts",
            "Requests aborted by the HTTP front, by reason (client_disconnect, slow_reader).",
            ["replica", "reason"],
            registry=registry,
        )
        self.joins = Counter(
            "fleetwatch_http_idempotent_joins",
            "Requests attached to an in-flight request by Idempotency-Key.",
            ["replica"],
            registry=registry,
        ).labels(replica)
        self.queue = Gauge(
            "fleetwatch_http_queue_depth",
            "Requests admitted by the HTTP front that have no output yet.",
            ["replica"],
            registry=registry,
        ).labels(replica)
        self.replica = replica

    def code(self, status: int) -> None:
        self.responses.labels(self.replica, str(status)).inc()

    def abort(self, reason: str) -> None:
        self.stream_ends.labels(self.replica, reason).inc()


class CompletionServer:
    """Serves one ``AsyncEngine`` (started by the caller). Build the app with ``app()``."""

    def __init__(
        self,
        aengine: Any,
        *,
        config: ServerConfig | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.aengine = aengine
        engine = aengine.engine
        self.engine = engine
        self.config = config or ServerConfig()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.wall_clock = wall_clock
        mc = engine.model_config
        self.limits = Limits(
            vocab_size=mc.vocab_size,
            context_tokens=mc.max_position_embeddings,
            model_name=engine.model_name,
            max_tokens_cap=self.config.max_tokens_cap,
        )
        self.metrics = _HttpMetrics(self.registry, engine.replica)
        self.queue_times = QueueTimes()
        self._detach_queue_times = engine.attach(self.queue_times)
        self.flights: set[InFlight] = set()
        self.waiting = 0
        self.draining = False
        self._keys: OrderedDict[str, tuple[InFlight, float]] = OrderedDict()
        self._ids = itertools.count()
        self._mean_e2e_s = 1.0

    # -- routes ---------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/metrics", self.metrics_route)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        return app

    async def health(self, request: web.Request) -> web.Response:
        e = self.engine
        body = {
            "status": "draining" if self.draining else "ok",
            "replica": e.replica,
            "model": e.model_name,
            "running": e.num_running,
            "waiting": e.num_waiting,
            "queue": self.waiting,
            "in_flight": len(self.flights),
            "kv_usage": e.kv_usage,
        }
        return web.json_response(body, status=503 if self.draining else 200)

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": self.limits.model_name, "object": "model", "owned_by": "fleetwatch"}]
        return web.json_response({"object": "list", "data": data})

    async def metrics_route(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = await asyncio.to_thread(generate_latest, self.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    def _error(self, exc: InvalidRequest, headers: dict[str, str] | None = None) -> web.Response:
        self.metrics.code(exc.status)
        return web.json_response(exc.body(), status=exc.status, headers=headers)

    def _retry_after(self) -> str:
        slots = max(1, getattr(self.engine.engine_config, "max_num_seqs", 1))
        return str(max(1, math.ceil(self._mean_e2e_s * (self.waiting + 1) / slots)))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if self.draining:
            return self._error(InvalidRequest(503, "server is shutting down"), {"Retry-After": "1"})
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._error(
                InvalidRequest(413, f"body exceeds {self.config.max_body_bytes} bytes")
            )
        try:
            req = parse_completion(raw, self.limits)
            key = request.headers.get("Idempotency-Key")
            if key is not None and not (0 < len(key) <= 255 and key.isprintable()):
                raise InvalidRequest(
                    422, "Idempotency-Key must be 1-255 printable characters", "Idempotency-Key"
                )
        except InvalidRequest as exc:
            return self._error(exc)
        traceparent = valid_traceparent(request.headers.get("traceparent"))
        if key is not None:
            flight = self._lookup(key)
            if flight is not None:
                if flight.canonical != req.canonical:
                    return self._error(
                        InvalidRequest(
                            422,
                            "Idempotency-Key was used with a different request body",
                            "Idempotency-Key",
                        )
                    )
                self.metrics.joins.inc()
                return await self._respond(request, flight, req)
        if self.waiting >= self.config.max_queue:
            return self._error(
                InvalidRequest(429, f"queue full ({self.waiting} requests waiting); retry later"),
                {"Retry-After": self._retry_after()},
            )
        rid = f"cmpl-{self.engine.replica}-{next(self._ids)}"
        flight = InFlight(rid, req.canonical, max_lag=self.config.max_lag)
        if key is not None:
            self._remember(key, flight)
        self.flights.add(flight)
        self.waiting += 1
        self.metrics.queue.set(self.waiting)
        flight.producer = asyncio.create_task(self._produce(flight, req, traceparent))
        return await self._respond(request, flight, req)

    # -- idempotency keys -----------------------------------------------------------------------

    def _lookup(self, key: str) -> InFlight | None:
        now = self.clock()
        while self._keys:
            old, (f, t) = next(iter(self._keys.items()))
            if f.done and now - t > self.config.idempotency_ttl_s:
                self._keys.pop(old)
            else:
                break
        hit = self._keys.get(key)
        if hit is None:
            return None
        flight, t = hit
        if flight.done and now - t > self.config.idempotency_ttl_s:
            self._keys.pop(key, None)
            return None
        if flight.done and flight.history and flight.history[-1].status != "ok":
            self._keys.pop(key, None)  # aborted, rejected or failed work is no result: run again
            return None
        return flight

    def _remember(self, key: str, flight: InFlight) -> None:
        self._keys[key] = (flight, self.clock())
        self._keys.move_to_end(key)
        while len(self._keys) > self.config.idempotency_max_keys:
            self._keys.popitem(last=False)

    # -- the engine side ------------------------------------------------------------------------

    def _envelope(self, flight: InFlight) -> dict[str, Any]:
        """The fields every completion body and chunk opens with."""
        return {
            "id": flight.request_id,
            "object": "text_completion",
            "created": int(self.wall_clock()),
            "model": self.limits.model_name,
        }

    def _chunk(self, flight: InFlight, tokens: tuple[int, ...], finish: str | None) -> bytes:
        """One SSE content chunk. The per-request head is rendered once; per token only the text,
        ids and finish reason are (this runs once per request per engine step)."""
        head = flight.sse_head
        if head is None:
            obj = self._envelope(flight)
            head = b"data: " + json.dumps(obj, separators=(",", ":")).encode()[:-1]
            head += b',"choices":[{"index":0,"text":'
            flight.sse_head = head
        ids = ",".join(map(str, tokens))
        fin = "null" if finish is None else json.dumps(finish)
        tail = f',"token_ids":[{ids}],"logprobs":null,"finish_reason":{fin}}}]}}\n\n'
        return head + json.dumps(decode(tokens)).encode() + tail.encode()

    def _usage_chunk(
        self, flight: InFlight, prompt: int, completion: int, queue_s: float | None
    ) -> bytes:
        obj: dict[str, Any] = {
            **self._envelope(flight),
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

    @staticmethod
    def _error_piece(status: str, message: str, error_type: str | None) -> Piece:
        body = {"error": {"message": message, "type": error_type or status, "code": status}}
        sse = b"data: " + json.dumps(body).encode() + b"\n\n" + _DONE
        reason = "abort" if status in ("aborted", "rejected") else "error"
        return Piece((), sse, True, status, reason, error_type, message)

    async def _produce(
        self, flight: InFlight, req: CompletionRequest, traceparent: str | None
    ) -> None:
        from engine_probe.engine import SamplingParams

        started = self.clock()
        first = True
        completion = 0
        sampling = SamplingParams(temperature=req.temperature, top_p=req.top_p, seed=req.seed)
        gen = self.aengine.generate(
            req.prompt_token_ids,
            max_tokens=req.max_tokens,
            sampling=sampling,
            request_id=flight.request_id,
            traceparent=traceparent,
        )
        try:
            async with contextlib.aclosing(gen):
                async for out in gen:
                    if first:
                        first = False
                        self.waiting -= 1
                        self.metrics.queue.set(self.waiting)
                    completion += len(out.new_token_ids)
                    if not out.finished:
                        if out.new_token_ids:
                            sse = self._chunk(flight, out.new_token_ids, None)
                            flight.push(Piece(out.new_token_ids, sse))
                    elif out.status == "ok":
                        sse = self._chunk(flight, out.new_token_ids, out.finish_reason)
                        flight.queue_s = self.queue_times.take(flight.request_id)
                        if req.include_usage:
                            sse += self._usage_chunk(
                                flight, len(req.prompt_token_ids), completion, flight.queue_s
                            )
                        flight.push(
                            Piece(out.new_token_ids, sse + _DONE, True, "ok", out.finish_reason)
                        )
                    else:
                        status = out.status or "error"
                        if out.new_token_ids:
                            sse = self._chunk(flight, out.new_token_ids, None)
                            flight.push(Piece(out.new_token_ids, sse))
                        flight.end(self._error_piece(status, f"request {status}", out.error_type))
                    if not flight.readers and not flight.done:
                        break  # every reader left (dropped as too slow): abort
        except asyncio.CancelledError:
            flight.end(self._error_piece("aborted", "request aborted", None))
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, EngineConfigError) else f"engine failed: {exc}"
            flight.end(self._error_piece("error", message, type(exc).__name__))
        finally:
            if first:
                self.waiting -= 1
                self.metrics.queue.set(self.waiting)
            flight.end(self._error_piece("aborted", "request aborted", None))
            self.flights.discard(flight)
            took = self.clock() - started
            self._mean_e2e_s = 0.9 * self._mean_e2e_s + 0.1 * took

    # -- the HTTP side --------------------------------------------------------------------------

    async def _respond(
        self, request: web.Request, flight: InFlight, req: CompletionRequest
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
                if head.error_type == "EngineConfigError":  # the engine refused the request itself
                    return self._error(InvalidRequest(422, head.message or "invalid request"))
                status = {"rejected": 429, "aborted": 503}.get(head.status or "", 500)
                headers = {"Retry-After": self._retry_after()} if status in (429, 503) else None
                message = {
                    429: "the engine's waiting queue is full; retry later",
                    503: "request aborted before it started",
                }.get(status, f"engine error: {head.error_type or 'unknown'}")
                return self._error(InvalidRequest(status, message), headers)
            if not req.stream:
                await flight.finished.wait()
                return self._whole(flight, req)
            resp = web.StreamResponse(
                status=200,
                headers={
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache",
                    "X-Request-Id": flight.request_id,
                },
            )
            await resp.prepare(request)
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

    def close(self) -> None:
        """Detach from the engine (after ``drain``)."""
        self._detach_queue_times()

    def _whole(self, flight: InFlight, req: CompletionRequest) -> web.Response:
        tokens = [t for p in flight.history for t in p.token_ids]
        last = flight.history[-1]
        if last.status != "ok":
            self.metrics.code(500)
            body = {
                "error": {
                    "message": f"request {last.status}",
                    "type": last.error_type or last.status,
                    "code": 500,
                }
            }
            return web.json_response(body, status=500)
        self.metrics.code(200)
        timing = {} if flight.queue_s is None else {"timing": {"queue_s": round(flight.queue_s, 6)}}
        return web.json_response(
            {
                **timing,
                **self._envelope(flight),
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
            },
            headers={"X-Request-Id": flight.request_id},
        )

    # -- shutdown -------------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> int:
        """Refuse new work and wait for in-flight requests; return how many were still running."""
        self.draining = True
        pending = [f.finished.wait() for f in list(self.flights)]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pending), timeout_s)
        left = [f for f in self.flights if not f.done]
        for f in left:
            if f.producer is not None:
                f.producer.cancel()
        return len(left)
