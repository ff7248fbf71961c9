"""An engine lacking some of DuckDB's capabilities, as Spark's or a dataset of JSON lines, so a
test can run the path such an engine takes on the same files and compare."""

from __future__ import annotations


class Lacking:
    """``engine`` without the attributes ``names``: ``spans`` (the outliers' summary then reads
    the times), ``by_file`` (counts are then the grouping sets of the replica's name), ``table``
    (a group's rows then come as frames), ``tallies`` (the outliers' summary is then a
    scan's)."""

    def __init__(self, engine: object, *names: str) -> None:
        self._engine = engine
        self._names = names

    def __getattr__(self, name: str) -> object:
        if name in self._names:
            raise AttributeError(name)
        return getattr(self._engine, name)
