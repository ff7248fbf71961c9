"""The engine side of a request: run it on the ``AsyncEngine`` and turn its outputs into the
``Piece``s every reader of the ``InFlight`` replays.

A request leaves the front door's queue at its first output (or when it ends without one). It
ends with an error piece when the engine refuses or fails it, or when it is cancelled (the last
reader left, or the drain timed out), which aborts the engine request.

Stop strings: output text goes through a ``StopScanner``, which holds back text that could be
the start of a stop string. When one appears the answer ends there with ``finish_reason:
"stop"`` (the stop string not returned) and the engine is told to finish the request as ok at
once (``AsyncEngine.finish``), so its record says ``stop`` with the tokens the answer used.
The reference tokenizer decodes one character per token, so held characters are held tokens.

With per-tenant limits on (``tenants``), a request first waits for its turn in the fair queue
(``Hold.wait``) and is settled with the tokens it produced when it ends (``Hold.done``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from fleetwatch.engine_probe.engine.errors import EngineConfigError
from fleetwatch.engine_probe.serve.front.admission import FrontDoor
from fleetwatch.engine_probe.serve.front.tenants import Hold
from fleetwatch.engine_probe.serve.inflight import InFlight, Piece
from fleetwatch.engine_probe.serve.queue_times import QueueTimes
from fleetwatch.engine_probe.serve.request_context import RequestContext
from fleetwatch.engine_probe.serve.wire.completions import CompletionRequest
from fleetwatch.engine_probe.serve.wire.render import DONE, Renderer, error_piece
from fleetwatch.engine_probe.serve.wire.stop import StopScanner
from fleetwatch.engine_probe.serve.wire.text_ids import decode

__all__ = ["Producer", "TextCutter"]


class TextCutter:
    """Output tokens to (tokens, text) that may be sent now, cutting at the first stop string."""

    __slots__ = ("_held", "_scan", "stop_end")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._scan = StopScanner(stops) if stops else None
        self._held: list[int] = []
        self.stop_end: int | None = None
        """Tokens consumed up to the end of the stop string, once one was found."""

    def feed(self, ids: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
        if self._scan is None:
            return ids, decode(ids)
        text, end = self._scan.feed(decode(ids))
        pool = self._held + list(ids)
        out = tuple(pool[: len(text)])
        self._held = [] if end is not None else pool[len(pool) - len(self._scan.held) :]
        self.stop_end = end
        return out, text

    def flush(self) -> tuple[tuple[int, ...], str]:
        if self._scan is None:
            return (), ""
        out, self._held = tuple(self._held), []
        return out, self._scan.flush()


class Producer:
    """Runs requests on one ``AsyncEngine``; ``run`` is each request's producer task."""

    def __init__(
        self,
        aengine: Any,
        door: FrontDoor,
        render: Renderer,
        queue_times: QueueTimes,
        clock: Callable[[], float],
    ) -> None:
        self.aengine = aengine
        self.door = door
        self.render = render
        self.queue_times = queue_times
        self.clock = clock

    def _final(
        self,
        flight: InFlight,
        req: CompletionRequest,
        render: Renderer,
        ids: tuple[int, ...],
        text: str,
        finish: str | None,
    ) -> None:
        sse = render.chunk(flight, ids, text, finish)
        flight.queue_s = self.queue_times.take(flight.request_id)
        if req.include_usage:
            sse += render.usage_chunk(
                flight, len(req.prompt_token_ids), flight.completion_tokens, flight.queue_s
            )
        flight.push(Piece(ids, sse + DONE, True, "ok", finish, text=text))

    async def run(
        self,
        flight: InFlight,
        req: CompletionRequest,
        context: RequestContext,
        render: Renderer | None = None,
        hold: Hold | None = None,
    ) -> None:
        from fleetwatch.engine_probe.engine import RequestParams, SamplingParams

        render = render or self.render
        started = self.clock()
        first = True
        generated = 0
        cut = TextCutter(req.stop)
        params = RequestParams(
            sampling=SamplingParams(temperature=req.temperature, top_p=req.top_p, seed=req.seed),
            request_id=flight.request_id,
            traffic_class=context.traffic_class,
            tenant=context.tenant,
            traceparent=context.traceparent,
            tracestate=context.tracestate,
            operation=req.operation,
            arrival_s=flight.arrival_s,
            http=context.http,
        )
        gen = self.aengine.generate(req.prompt_token_ids, max_tokens=req.max_tokens, params=params)
        try:
            if hold is not None:
                await hold.wait()
            async with contextlib.aclosing(gen):
                async for out in gen:
                    if first:
                        first = False
                        self.door.started()
                    generated += len(out.new_token_ids)
                    if out.finished and out.status != "ok":
                        status = out.status or "error"
                        flight.end(error_piece(status, f"request {status}", out.error_type))
                        break
                    ids, text = cut.feed(out.new_token_ids)
                    if cut.stop_end is not None:
                        flight.completion_tokens = cut.stop_end
                        self._final(flight, req, render, ids, text, "stop")
                        if not out.finished:
                            self.aengine.finish(flight.request_id, "stop", cut.stop_end)
                        break
                    if out.finished:
                        more, rest = cut.flush()
                        flight.completion_tokens = generated
                        self._final(flight, req, render, ids + more, text + rest, out.finish_reason)
                    elif ids:
                        flight.push(Piece(ids, render.chunk(flight, ids, text, None), text=text))
                    if not flight.readers and not flight.done:
                        break  # every reader left (dropped as too slow): abort
        except asyncio.CancelledError:
            flight.end(error_piece("aborted", "request aborted", None))
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, EngineConfigError) else f"engine failed: {exc}"
            flight.end(error_piece("error", message, type(exc).__name__))
        finally:
            if hold is not None:  # no output: the engine refused or never ran it, no charge
                hold.done(generated, ran=generated > 0)
            if first:
                self.door.started()
            flight.end(error_piece("aborted", "request aborted", None))
            self.door.left(flight, self.clock() - started)
