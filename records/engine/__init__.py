"""Query engines over a record dataset: the heavy reductions run where the records are.

An engine exposes one SQL view, ``records``, over the files of a dataset: the stored columns of
the record schema (``COLUMNS``, typed the same in every engine) with the dataset's filter
applied. The reductions an analysis needs are portable SQL over that view (``reductions``): only
counts, sums, minima, maxima and fixed-bucket histograms, so DuckDB and Spark compute the same
exact tables, and the statistics run on those reduced tables in pandas.

- ``duckdb`` (the default): in process, out of core, over local files.
- ``spark``: a Spark cluster through PySpark (a ``spark://`` master or a Spark Connect ``sc://``
  URL), for datasets beyond one machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "ENGINES", "Engine"]

ENGINES = ("duckdb", "spark", "memory")
"""What ``--engine`` accepts: ``memory`` reads every record into pandas (the reference path)."""

COLUMNS: dict[str, str] = {
    "request_id": "VARCHAR",
    "replica": "VARCHAR",
    "model": "VARCHAR",
    "traffic_class": "VARCHAR",
    "tenant": "VARCHAR",
    "arrival_s": "DOUBLE",
    "scheduled_s": "DOUBLE",
    "first_token_s": "DOUBLE",
    "finished_s": "DOUBLE",
    "intended_s": "DOUBLE",
    "prompt_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "cached_prompt_tokens": "BIGINT",
    "preemptions": "BIGINT",
    "preemption_stall_s": "DOUBLE",
    "max_itl_s": "DOUBLE",
    "status": "VARCHAR",
    "finish_reason": "VARCHAR",
    "error_type": "VARCHAR",
}
"""The columns of the ``records`` view and their SQL types (``itl_buckets`` is not read)."""


class Engine(Protocol):
    """A query engine holding the ``records`` view of one dataset."""

    name: str

    def query(self, sql: str) -> pd.DataFrame:
        """The result of ``sql`` (portable SQL over the view ``records``) as a DataFrame."""
        ...

    def close(self) -> None:
        """Release the engine (a session, a connection)."""
        ...
