"""A completions server that emits tokens at known instants: the probe's measuring stick.

Each response follows a ``Script``: the first chunk after ``first_token_s``, then chunks after the
given gaps, each carrying a given number of tokens (several tokens per chunk included), then usage
and ``[DONE]``. It serves ``/v1/completions`` and ``/v1/chat/completions``; a chat stream opens at
once with a role-only chunk (as OpenAI and vLLM send it), which is no token: TTFT must not start
there. ``GET /v1/models`` lists ``model``. It records when it actually wrote every chunk (on the same clock the probe uses when
both live in one process), so tests compare the probe's numbers with the truth, not with a sleep's
good intentions; in its own process it shares the system-wide monotonic clock with the probe and
serves that record as JSON at ``GET /v1/scripted/truth`` (prompts, arrivals, write instants).
``stall`` freezes all output for a while, as a stalled engine would.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

__all__ = ["Script", "ScriptedServer"]


@dataclass(frozen=True, slots=True)
class Script:
    """``first_token_s`` after the request arrives, then ``chunks`` as (gap s, tokens) pairs.

    The first chunk carries ``first_chunk_tokens`` tokens.
    """

    first_token_s: float = 0.0
    first_chunk_tokens: int = 1
    chunks: tuple[tuple[float, int], ...] = ((0.0, 1),) * 7
    send_token_ids: bool = True

    @property
    def tokens(self) -> int:
        return self.first_chunk_tokens + sum(k for _, k in self.chunks)


@dataclass(slots=True)
class ScriptedServer:
    """aiohttp app serving ``/v1/completions`` by ``script``; ``start()`` returns its base URL."""

    script: Script = field(default_factory=Script)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    emitted: list[list[float]] = field(default_factory=list)
    """Per request, in arrival order: the instants its token chunks were written."""
    arrived: list[float] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """Per request, in arrival order: the request headers."""
    barrier: int = 0
    """Hold every response until this many requests have arrived (proves they were concurrent)."""
    model: str = "scripted"
    role_sent: list[float] = field(default_factory=list)
    """Per chat request, in arrival order: when its role-only first chunk was written."""
    prompts: list[str] = field(default_factory=list)
    """Per request, in arrival order: its prompt (completions) or messages (chat), as text."""
    _all_in: asyncio.Event | None = None
    _running: asyncio.Event | None = None
    _runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/scripted/truth", self._truth)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._running = asyncio.Event()
        self._running.set()
        self._all_in = asyncio.Event()
        if self.barrier <= 0:
            self._all_in.set()
        self._runner = web.AppRunner(self.app(), handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=4096)
        await site.start()
        sock_port = int(self._runner.addresses[0][1])
        return f"http://{host}:{sock_port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def stall(self, seconds: float) -> None:
        """Hold every response (new and in flight) for ``seconds``."""
        assert self._running is not None
        self._running.clear()
        await self.sleep(seconds)
        self._running.set()

    async def _emit(
        self, resp: web.StreamResponse, times: list[float], k: int, chat: bool = False
    ) -> None:
        assert self._running is not None
        await self._running.wait()
        chunk: dict[str, object] = {"index": 0, "finish_reason": None}
        if chat:
            chunk["delta"] = {"content": "x" * k}
        else:
            chunk["text"] = "x" * k
        if self.script.send_token_ids:
            chunk["token_ids"] = [120] * k
        kind = "chat.completion.chunk" if chat else "text_completion"
        data = json.dumps({"object": kind, "choices": [chunk]})
        times.append(self.clock())
        await resp.write(f"data: {data}\n\n".encode())

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "scripted"}]
        return web.json_response({"object": "list", "data": data})

    async def _truth(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"prompts": self.prompts, "arrived": self.arrived, "emitted": self.emitted}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._completions(request, chat=True)

    async def _completions(self, request: web.Request, chat: bool = False) -> web.StreamResponse:
        body = await request.json()
        self.arrived.append(self.clock())
        self.headers.append(dict(request.headers))
        self.prompts.append(str(body.get("messages", "")) if chat else str(body.get("prompt", "")))
        times: list[float] = []
        self.emitted.append(times)
        s = self.script
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if chat:
            delta = {"role": "assistant", "content": ""}
            role = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            self.role_sent.append(self.clock())
            await resp.write(f"data: {json.dumps(role)}\n\n".encode())
        assert self._all_in is not None
        if len(self.arrived) >= self.barrier:
            self._all_in.set()
        await self._all_in.wait()
        await self.sleep(s.first_token_s)
        await self._emit(resp, times, s.first_chunk_tokens, chat)
        for gap, k in s.chunks:
            await self.sleep(gap)
            await self._emit(resp, times, k, chat)
        prompt = body.get("prompt", "") if not chat else str(body.get("messages", ""))
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": s.tokens,
            "total_tokens": len(prompt) + s.tokens,
        }
        end: dict[str, object] = {"delta": {}} if chat else {"text": ""}
        last = {"choices": [{**end, "index": 0, "finish_reason": "length"}], "usage": usage}
        await resp.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> None:
    """Run a scripted server in its own process (benchmarks): prints its URL, serves until killed.

    ``python -m fleetwatch.engine_probe.probe.scripted_server [first_token_s gap_s chunks tokens_per_chunk]``
    """
    import sys

    args = [float(a) for a in (sys.argv[1:] if argv is None else argv)]
    first, gap, chunks, per = (args + [0.05, 0.02, 16, 1][len(args) :])[:4]
    script = Script(
        first_token_s=first, first_chunk_tokens=int(per), chunks=((gap, int(per)),) * int(chunks)
    )

    async def serve() -> None:
        server = ScriptedServer(script)
        url = await server.start()
        print(url, flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
