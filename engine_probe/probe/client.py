"""The load driver: one aiohttp session sending OpenAI-compatible streaming requests, to the chat
API (``/v1/chat/completions``, the default) or the completions API (``/v1/completions``).

Built so the client is not the bottleneck at thousands of concurrent streams: a single session and
connection pool sized to the load (no hidden per-host cap of 100), raw chunk reads with our own SSE
parser (no line-length limit, no per-line await), and its own timing error measured on every request
(``send_lag_s``: actual send minus scheduled send). The clock and sleep are parameters.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from fleetwatch.engine_probe.probe.chat import API_PATHS, base_url, chat_body
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.measure import RequestResult, apportion_tokens
from fleetwatch.engine_probe.probe.rx import install, sink_for
from fleetwatch.engine_probe.probe.sse import SSEParser

__all__ = ["Prober", "RequestBody", "completion_body", "request_body"]

RequestBody = dict[str, Any]
OnDone = Callable[[RequestResult], None]


def completion_body(
    prompt: str | Sequence[int], max_tokens: int, *, model: str = "reference", **extra: Any
) -> RequestBody:
    """A streaming ``/v1/completions`` body that asks for usage in the last chunk.

    ``ignore_eos`` keeps output lengths as requested on servers that honour it (vLLM does).
    """
    body: RequestBody = {
        "model": model,
        "prompt": prompt if isinstance(prompt, str) else list(prompt),
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "ignore_eos": True,
    }
    body.update(extra)
    return body


def _content(choice: dict[str, Any]) -> str:
    """A choice's new text: completions ``text``, chat ``delta.content`` (streamed) or
    ``message.content`` (whole). A chat chunk with only the role carries none: it is no token."""
    for key in ("delta", "message"):
        part = choice.get(key)
        if isinstance(part, dict):
            text = part.get("content")
            return text if isinstance(text, str) else ""
    text = choice.get("text")
    return text if isinstance(text, str) else ""


def request_body(
    api: str, prompt: str | Sequence[int], max_tokens: int, *, model: str, **extra: Any
) -> RequestBody:
    """The probe's body for ``api`` (``chat`` or ``completions``)."""
    if api == "chat":
        if not isinstance(prompt, str):
            raise ProbeError("the chat API takes text prompts, not token ids")
        return chat_body(prompt, max_tokens, model=model, **extra)
    return completion_body(prompt, max_tokens, model=model, **extra)


@dataclass(slots=True)
class _Stream:
    """Mutable per-request state while its stream is read (one per in-flight request)."""

    times: list[float] = field(default_factory=list)
    explicit: list[int | None] = field(default_factory=list)
    text_len: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    usage_tokens: int | None = None
    server_queue_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False

    def take(self, now: float, payload: str) -> None:
        if payload == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            self.error = "bad SSE payload"
            return
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            err = obj["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c = choices[0]
            text = _content(c)
            ids = c.get("token_ids")
            k = len(ids) if isinstance(ids, list) else None
            if text or k:
                self.times.append(now)
                self.explicit.append(k)
                self.text_len.append(len(text) if isinstance(text, str) else 0)
            if c.get("finish_reason"):
                self.finish_reason = str(c["finish_reason"])
        timing = obj.get("timing")
        if isinstance(timing, dict) and isinstance(timing.get("queue_s"), int | float):
            self.server_queue_s = float(timing["queue_s"])
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage_tokens = int(usage.get("completion_tokens", 0) or 0)
            self.prompt_tokens = int(usage.get("prompt_tokens", 0) or 0)

    def tokens(self) -> tuple[list[int], int, bool]:
        """Tokens per chunk, total tokens, and whether the total came from usage."""
        if all(k is not None for k in self.explicit):
            per = [k or 0 for k in self.explicit]
            total = self.usage_tokens if self.usage_tokens is not None else sum(per)
            return per, total, self.usage_tokens is not None
        if self.usage_tokens is not None:
            return apportion_tokens(self.text_len, self.usage_tokens), self.usage_tokens, True
        return [1] * len(self.times), len(self.times), False


class Prober:
    """Sends requests to ``url`` (the server root, or a full endpoint URL) on ``api``: ``chat``
    (``/v1/chat/completions``) or ``completions`` (``/v1/completions``).

    Use as ``async with Prober(url) as p: results = await p.open_loop(offsets, bodies)``.
    """

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 2048,
        timeout_s: float = 600.0,
        headers: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        api: str = "completions",
        stamp_reads: bool = True,
    ) -> None:
        if api not in API_PATHS:
            raise ValueError(f"api must be chat or completions, got {api!r}")
        self.api = api
        self.url = base_url(url) + API_PATHS[api]
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.clock = clock
        self.sleep = sleep
        self.stamp_reads = stamp_reads
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Prober:
        connector = aiohttp.TCPConnector(
            limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300
        )
        if self.stamp_reads:
            install(connector, self.clock)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            read_bufsize=1 << 20,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def one(
        self,
        index: int,
        scheduled_s: float,
        body: RequestBody,
        *,
        headers: dict[str, str] | None = None,
    ) -> RequestResult:
        """Send one request now; ``scheduled_s`` is when it was due (probe clock)."""
        session = self._session
        if session is None:
            raise RuntimeError("Prober used outside 'async with'")
        request_id = f"probe-{index}"
        hdrs = {**self.headers, **(headers or {})}
        state = _Stream()
        http_status: int | None = None
        status = "ok"
        sent = self.clock()
        try:
            async with session.post(self.url, json=body, headers=hdrs) as resp:
                http_status = resp.status
                if resp.status != 200:
                    text = await resp.text()
                    state.error = f"HTTP {resp.status}: {text[:200]}"
                    status = "rejected" if resp.status in (429, 503) else "error"
                elif body.get("stream", True):
                    parser = SSEParser()
                    sink = sink_for(resp) if self.stamp_reads else None
                    async for data in resp.content.iter_any():
                        now = self.clock()
                        if sink is None:
                            for payload in parser.feed(data):
                                state.take(now, payload)
                            continue
                        for at, piece in sink.split(data, now):
                            for payload in parser.feed(piece):
                                state.take(at, payload)
                    if sink is not None:
                        sink.detach()
                    now = self.clock()
                    for payload in parser.close():
                        state.take(now, payload)
                    if state.error is not None:
                        status = "error"
                    elif not state.done:
                        status, state.error = "error", "stream ended before [DONE]"
                else:
                    payload = await resp.text()
                    state.take(self.clock(), payload)
                    state.done = True
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            status = "error"
            state.error = f"{type(exc).__name__}: {exc}"
        finished = self.clock()
        per, total, from_usage = state.tokens()
        return RequestResult(
            index=index,
            request_id=request_id,
            scheduled_s=scheduled_s,
            sent_s=sent,
            finished_s=finished,
            first_token_s=state.times[0] if state.times else None,
            chunk_times_s=tuple(state.times),
            chunk_tokens=tuple(per),
            prompt_tokens=state.prompt_tokens,
            output_tokens=total,
            tokens_from_usage=from_usage,
            status=status,
            http_status=http_status,
            error=state.error,
            finish_reason=state.finish_reason,
            server_queue_s=state.server_queue_s,
        )

    async def open_loop(
        self,
        offsets_s: Sequence[float],
        bodies: Sequence[RequestBody],
        *,
        max_concurrency: int | None = None,
        lead_s: float = 0.05,
        on_done: OnDone | None = None,
        start_s: float | None = None,
        indices: Sequence[int] | None = None,
    ) -> list[RequestResult]:
        """Send ``bodies[i]`` at ``offsets_s[i]`` after the start, without waiting for earlier ones.

        ``max_concurrency`` models a client with a bounded pool: a request due while all slots are
        busy is sent late, and the lateness shows in the schedule-based latencies. The start is
        ``start_s`` on the probe clock when given (workers sharing one schedule), else ``lead_s``
        from now; ``indices`` name the requests (default 0, 1, ...).
        """
        sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        t0 = self.clock() + lead_s if start_s is None else start_s
        names = range(len(offsets_s)) if indices is None else indices

        async def run(i: int, due: float) -> RequestResult:
            if sem is None:
                result = await self.one(names[i], due, bodies[i])
            else:
                async with sem:
                    result = await self.one(names[i], due, bodies[i])
            if on_done is not None:
                on_done(result)
            return result

        tasks: list[asyncio.Task[RequestResult]] = []
        for i, offset in enumerate(offsets_s):
            due = t0 + offset
            wait = due - self.clock()
            if wait > 0:
                await self.sleep(wait)
            tasks.append(asyncio.create_task(run(i, due)))
        return list(await asyncio.gather(*tasks))

    async def closed_loop(
        self,
        concurrency: int,
        bodies: Sequence[RequestBody],
        *,
        on_done: OnDone | None = None,
        indices: Sequence[int] | None = None,
    ) -> list[RequestResult]:
        """``concurrency`` workers, each sending its next request as soon as the last one ends."""
        results: list[RequestResult | None] = [None] * len(bodies)
        next_index = iter(range(len(bodies)))
        names = range(len(bodies)) if indices is None else indices

        async def worker() -> None:
            for i in next_index:
                r = await self.one(names[i], self.clock(), bodies[i])
                results[i] = r
                if on_done is not None:
                    on_done(r)

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        return [r for r in results if r is not None]
