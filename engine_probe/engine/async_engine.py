"""``AsyncEngine``: an asyncio front for servers. The step loop runs on its own thread (so a
forward pass never blocks the event loop); each request streams its outputs to an asyncio queue.

All engine calls (add, abort, step) happen on the step-loop thread, so observers see every
event on that one thread as ``hooks`` promises. The thread waits on a condition when idle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from fleetwatch.engine_probe.engine.errors import EngineConfigError
from fleetwatch.engine_probe.engine.llm_engine import LLMEngine
from fleetwatch.engine_probe.engine.params import RequestParams
from fleetwatch.engine_probe.engine.request import RequestOutput
from fleetwatch.telemetry.hooks import RequestInfo

__all__ = ["AsyncEngine"]

_Item = RequestOutput | BaseException


class AsyncEngine:
    """Runs ``engine`` in a background thread; ``generate`` streams one request.

    Example::

        async with AsyncEngine(LLMEngine()) as aengine:
            async for out in aengine.generate([1, 2, 3], max_tokens=8):
                print(out.new_token_ids)
    """

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._cond = threading.Condition()
        self._commands: list[Callable[[], None]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, asyncio.Queue[_Item]] = {}
        self._failure: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"engine-{self.engine.replica}", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Abort what is in flight (streams end with status "aborted") and join the step thread."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify()
        await asyncio.to_thread(thread.join)
        self._thread = None

    async def __aenter__(self) -> AsyncEngine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _submit(self, command: Callable[[], None]) -> None:
        if self._thread is None:
            raise EngineConfigError("AsyncEngine is not started (use 'async with' or start())")
        with self._cond:
            self._commands.append(command)
            self._cond.notify()

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        params: RequestParams = RequestParams(),
    ) -> AsyncIterator[RequestOutput]:
        """Stream a request's outputs (``LLMEngine.add_request`` takes the same arguments); the
        last one has ``finished=True``. Leaving the loop early (break, cancellation) aborts the
        request and frees its blocks."""
        if self._failure is not None:
            raise self._failure
        engine = self.engine
        engine.validate_request(prompt_token_ids, max_tokens, params.sampling)
        rid = params.request_id if params.request_id is not None else engine.new_request_id()
        if params.request_id is None:
            params = replace(params, request_id=rid)
        if rid in self._streams:
            raise EngineConfigError(f"request: id {rid!r} is already streaming")
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._streams[rid] = queue
        prompt = list(prompt_token_ids)

        def add() -> None:
            try:
                engine.add_request(prompt, max_tokens=max_tokens, params=params)
            except Exception as exc:
                self._deliver_threadsafe([(rid, exc)])

        finished = False
        try:
            self._submit(add)
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finished:
                    finished = True
                yield item
                if finished:
                    return
        finally:
            self._streams.pop(rid, None)
            if not finished and self._thread is not None:

                def drop() -> None:
                    engine.abort(rid)

                self._submit(drop)

    async def abort(self, request_id: str) -> bool:
        """Abort a request (its stream ends with status "aborted"); False if unknown/finished."""
        fut: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def run() -> None:
            fut.set_result(self.engine.abort(request_id))

        self._submit(run)
        return await asyncio.wrap_future(fut)

    def finish(
        self, request_id: str, finish_reason: str = "stop", output_tokens: int | None = None
    ) -> None:
        """End a streaming request early as finished ok (``LLMEngine.finish``); its stream's last
        output says so. Returns at once; a request already finished is left as it ended."""

        def run() -> None:
            self.engine.finish(request_id, finish_reason, output_tokens)

        self._submit(run)

    def refuse(
        self,
        info: RequestInfo,
        error_type: str,
        status: str = "rejected",
        arrival_s: float | None = None,
    ) -> None:
        """Report a request refused before reaching the engine (``LLMEngine.refuse``) on the
        step-loop thread, where observers expect every event; called directly when not running."""
        if not self.running:
            self.engine.refuse(info, error_type, status, arrival_s)
            return

        def run() -> None:
            self.engine.refuse(info, error_type, status, arrival_s)

        self._submit(run)

    # -- the step-loop thread -----------------------------------------------------------------

    def _deliver_threadsafe(self, items: list[tuple[str, _Item]]) -> None:
        loop = self._loop
        if loop is not None and items and not loop.is_closed():
            loop.call_soon_threadsafe(self._deliver, items)

    def _deliver(self, items: list[tuple[str, _Item]]) -> None:
        for rid, item in items:
            queue = self._streams.get(rid)
            if queue is not None:
                queue.put_nowait(item)

    def _run(self) -> None:
        engine = self.engine
        cond = self._cond
        try:
            while True:
                with cond:
                    while not self._commands and not self._stopping and not engine.has_unfinished():
                        cond.wait()
                    commands, self._commands = self._commands, []
                    stopping = self._stopping
                for command in commands:
                    command()
                if stopping:
                    for rid in engine.unfinished_request_ids():
                        engine.abort(rid)
                    self._deliver_threadsafe([(o.request_id, o) for o in engine.step()])
                    return
                if engine.has_unfinished():
                    outs = engine.step()
                    self._deliver_threadsafe([(o.request_id, o) for o in outs])
        except BaseException as exc:  # a bug in the engine: end every stream with it
            self._failure = exc
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._fail_all, exc)

    def _fail_all(self, exc: BaseException) -> None:
        for queue in self._streams.values():
            queue.put_nowait(exc)

    def __repr__(self) -> str:
        state: Any = "running" if self.running else "stopped"
        return f"AsyncEngine({self.engine.replica!r}, {state})"
