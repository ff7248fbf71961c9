"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["SLOSpecError"]


class SLOSpecError(ValueError):
    """An SLO spec, a records file or a rules request is invalid; the message names the YAML path. The command line prints it as one line and exits with status 2."""
