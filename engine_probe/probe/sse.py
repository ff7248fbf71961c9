"""Incremental parser for Server-Sent Events as OpenAI-compatible servers stream them.

It is fed raw bytes as they arrive (``resp.content.iter_any()``), so a long event never hits the
client library's line-length limit and no bytes wait for a newline inside the library.
Only ``data:`` fields matter here; comments (``:``) and other fields are skipped.
"""

from __future__ import annotations

__all__ = ["SSEParser"]


class SSEParser:
    """Split a byte stream into the ``data`` payloads of its events (one string per event).

    >>> p = SSEParser()
    >>> p.feed(b'data: {"a": 1}\\n\\ndata: [DO')
    ['{"a": 1}']
    >>> p.feed(b'NE]\\n\\n')
    ['[DONE]']
    """

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Add bytes; return the payloads of every event completed by them, in order."""
        buf = self._buf + chunk
        events: list[str] = []
        pos = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                self._buf = buf[pos:]
                return events
            line = buf[pos:nl]
            pos = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                if value.startswith(b" "):
                    value = value[1:]
                self._data.append(value.decode("utf-8", errors="replace"))

    def close(self) -> list[str]:
        """End of stream: a final event without its blank line still counts."""
        events = self.feed(b"\n\n") if self._buf else []
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events
