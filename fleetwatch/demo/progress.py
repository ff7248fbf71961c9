"""How the demo reports progress: a small protocol, a silent default, and a rich display."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol

__all__ = ["Progress", "RichProgress", "SilentProgress"]


class Progress(Protocol):
    """Called from the event-loop thread only; must not block."""

    def phase(self, name: str, total: int | None = None) -> None:
        """A new phase starts (``total`` units of work when known)."""

    def advance(self, ok: bool = True) -> None:
        """One unit of the current phase is done (a request, a check)."""


class SilentProgress:
    """Shows nothing (``--quiet``, or output that is not a terminal)."""

    def phase(self, name: str, total: int | None = None) -> None:
        return None

    def advance(self, ok: bool = True) -> None:
        return None


class RichProgress:
    """A rich progress bar per phase, with ok/failed counts; use as a context manager."""

    def __init__(self, console: Any = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as _Bar

        self._bar = _Bar(
            TextColumn("[bold]{task.description:<34}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task: Any = None
        self._ok = 0
        self._failed = 0

    def __enter__(self) -> RichProgress:
        self._bar.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish()
        self._bar.__exit__(exc_type, exc, tb)

    def _finish(self) -> None:
        if self._task is not None:
            task = self._bar.tasks[-1]
            if task.total is None:
                self._bar.update(
                    self._task,
                    total=max(1, int(task.completed)),
                    completed=max(1, int(task.completed)),
                )
            else:
                self._bar.update(self._task, completed=task.total)

    def phase(self, name: str, total: int | None = None) -> None:
        self._finish()
        self._ok = self._failed = 0
        self._task = self._bar.add_task(name, total=total, note="")

    def advance(self, ok: bool = True) -> None:
        if self._task is None:
            return
        if ok:
            self._ok += 1
        else:
            self._failed += 1
        note = f"ok {self._ok} failed {self._failed}" if self._failed else f"ok {self._ok}"
        self._bar.update(self._task, advance=1, note=note)
