"""The engine side of a request: run it on the ``AsyncEngine`` and turn its outputs into the
``Piece``s every reader of the ``InFlight`` replays.

A request leaves the front door's queue at its first output (or when it ends without one). It
ends with an error piece when the engine refuses or fails it, or when it is cancelled (the last
reader left, or the drain timed out), which aborts the engine request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from engine_probe.engine.errors import EngineConfigError
from engine_probe.serve.front_door import FrontDoor
from engine_probe.serve.inflight import InFlight, Piece
from engine_probe.serve.queue_times import QueueTimes
from engine_probe.serve.render import DONE, Renderer, error_piece
from engine_probe.serve.request_context import RequestContext
from engine_probe.serve.validation import CompletionRequest

__all__ = ["Producer"]


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

    async def run(self, flight: InFlight, req: CompletionRequest, context: RequestContext) -> None:
        from engine_probe.engine import SamplingParams

        render = self.render
        started = self.clock()
        first = True
        completion = 0
        sampling = SamplingParams(temperature=req.temperature, top_p=req.top_p, seed=req.seed)
        gen = self.aengine.generate(
            req.prompt_token_ids,
            max_tokens=req.max_tokens,
            sampling=sampling,
            request_id=flight.request_id,
            traffic_class=context.traffic_class,
            traceparent=context.traceparent,
            tracestate=context.tracestate,
            http=context.http,
        )
        try:
            async with contextlib.aclosing(gen):
                async for out in gen:
                    if first:
                        first = False
                        self.door.started()
                    completion += len(out.new_token_ids)
                    if not out.finished:
                        if out.new_token_ids:
                            sse = render.chunk(flight, out.new_token_ids, None)
                            flight.push(Piece(out.new_token_ids, sse))
                    elif out.status == "ok":
                        sse = render.chunk(flight, out.new_token_ids, out.finish_reason)
                        flight.queue_s = self.queue_times.take(flight.request_id)
                        if req.include_usage:
                            sse += render.usage_chunk(
                                flight, len(req.prompt_token_ids), completion, flight.queue_s
                            )
                        flight.push(
                            Piece(out.new_token_ids, sse + DONE, True, "ok", out.finish_reason)
                        )
                    else:
                        status = out.status or "error"
                        if out.new_token_ids:
                            sse = render.chunk(flight, out.new_token_ids, None)
                            flight.push(Piece(out.new_token_ids, sse))
                        flight.end(error_piece(status, f"request {status}", out.error_type))
                    if not flight.readers and not flight.done:
                        break  # every reader left (dropped as too slow): abort
        except asyncio.CancelledError:
            flight.end(error_piece("aborted", "request aborted", None))
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, EngineConfigError) else f"engine failed: {exc}"
            flight.end(error_piece("error", message, type(exc).__name__))
        finally:
            if first:
                self.door.started()
            flight.end(error_piece("aborted", "request aborted", None))
            self.door.left(flight, self.clock() - started)
