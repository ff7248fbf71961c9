"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["SLOSpecError"]


class SLOSpecError(ValueError):
    """An SLO spec, a records file or a rules request is invalid; the message names the YAML path.

    ``path`` is the YAML path of the offending value (``slos[2].objective``), or None when the
    problem is not tied to one value. The command line prints the message as one line and exits
    with status 2.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)
