"""One engine request and every HTTP reader attached to it.

The engine's outputs are rendered once into ``Piece``s and appended to a history; each reader keeps a
cursor into it. This gives three behaviours with one mechanism:

- an idempotent retry attaches to the request in flight and replays what it missed, then follows;
- a slow reader whose cursor falls more than ``max_lag`` pieces behind is dropped (its connection is
  closed), so memory per reader is bounded and one stuck client cannot hold the others back;
- when the last reader leaves before the end, the producer is cancelled, which aborts the engine
  request and frees its KV blocks at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["InFlight", "Piece", "Reader"]


@dataclass(frozen=True, slots=True)
class Piece:
    """A step's output for one request, already rendered as SSE bytes (``sse``)."""

    token_ids: tuple[int, ...]
    sse: bytes
    final: bool = False
    status: str | None = None
    finish_reason: str | None = None
    error_type: str | None = None
    message: str | None = None
    text: str = ""
    """The text these tokens add to the answer (stop strings already cut out)."""


@dataclass(eq=False, slots=True)
class Reader:
    """One HTTP response following an ``InFlight``; ``cursor`` indexes the history."""

    cursor: int = 0
    dropped: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    on_drop: Callable[[], None] | None = None
    bounded: bool = True
    """Streaming readers are bounded; a non-streaming one waits for the end and keeps up by design."""


class InFlight:
    """The shared state of one engine request (see the module docstring)."""

    def __init__(self, request_id: str, canonical: str, *, max_lag: int) -> None:
        self.request_id = request_id
        self.canonical = canonical
        self.max_lag = max_lag
        self.history: list[Piece] = []
        self.readers: set[Reader] = set()
        self.done = False
        self.first = asyncio.Event()
        """Set when the first piece (tokens, or a rejection/error) exists."""
        self.finished = asyncio.Event()
        self.producer: asyncio.Task[None] | None = None
        self.queue_s: float | None = None
        """Time the request waited in the engine's queue (seconds), once known."""
        self.sse_head: bytes | None = None
        """The rendered start of this request's SSE chunks (id, model, created)."""
        self.nbytes = len(canonical)
        """Bytes this request holds for replays: its canonical body and rendered pieces."""
        self.arrival_s: float | None = None
        """When the HTTP request arrived (engine clock): the start of its record."""
        self.completion_tokens = 0
        """Output tokens the answer used (up to the end of a stop string), for ``usage``."""

    def attach(self, on_drop: Callable[[], None] | None = None, *, bounded: bool = True) -> Reader:
        reader = Reader(on_drop=on_drop, bounded=bounded)
        self.readers.add(reader)
        return reader

    def detach(self, reader: Reader) -> bool:
        """Remove a reader; return True when that left the request unread and unfinished."""
        self.readers.discard(reader)
        return not self.readers and not self.done

    def push(self, piece: Piece) -> None:
        """Append a piece, wake readers, drop the ones too far behind."""
        self.history.append(piece)
        self.nbytes += len(piece.sse)
        if piece.final:
            self.done = True
            self.finished.set()
        self.first.set()
        n = len(self.history)
        for reader in list(self.readers):
            if reader.bounded and n - reader.cursor > self.max_lag and not piece.final:
                self.drop(reader)
            reader.wake.set()

    def drop(self, reader: Reader) -> None:
        if reader.dropped:
            return
        reader.dropped = True
        self.readers.discard(reader)
        reader.wake.set()
        if reader.on_drop is not None:
            reader.on_drop()

    def end(self, piece: Piece) -> None:
        """Finish with ``piece`` unless already finished (used on cancellation and failure)."""
        if not self.done:
            self.push(piece)

    async def next_pieces(self, reader: Reader) -> list[Piece]:
        """Everything the reader has not seen yet (waiting for at least one); [] once dropped."""
        while True:
            if reader.dropped:
                return []
            if reader.cursor < len(self.history):
                out = self.history[reader.cursor :]
                reader.cursor = len(self.history)
                return out
            reader.wake.clear()
            await reader.wake.wait()
