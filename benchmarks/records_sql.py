"""The records benchmark's baseline: what a competent user writes instead of fleetwatch, one DuckDB
SQL script per command, run as its own process.

``python -m benchmarks.records_sql COMMAND FORMAT PATH... [--model M]`` runs it (``SET
threads=2``; the JSON-lines reader told the columns it reads, so nothing is inferred; Parquet
read with hive partitioning) and prints the result rows as JSON lines. Derived latencies as the
record schema defines them: ttft = first_token_s - arrival_s, e2e = finished_s - arrival_s,
tpot = (finished_s - first_token_s) / (output_tokens - 1) where output_tokens >= 2.

- ``outliers``: per (model, replica) the request count, the error rate (status other than ok)
  and the p50 (``quantile_cont``) of ttft, tpot and e2e;
- ``tail``: per model the e2e p99, and each replica's share of the requests at or above it;
- ``compare`` (two paths: before, after): per model and half the p50, p90 and p99 of ttft,
  tpot and e2e;
- ``backtest``: the model's good (status ok) and total requests per 5-minute bin of finish time.

The script holds no Python work beyond printing: pandas and numpy are not imported.
"""

from __future__ import annotations

import json
import sys
from typing import Literal

__all__ = ["COMMANDS", "Format", "script", "source"]

COMMANDS = ("outliers", "tail", "compare", "backtest")
Format = Literal["jsonl", "parquet"]

_COLUMNS = (
    "{model: 'VARCHAR', replica: 'VARCHAR', arrival_s: 'DOUBLE', first_token_s: 'DOUBLE', "
    "finished_s: 'DOUBLE', output_tokens: 'BIGINT', status: 'VARCHAR'}"
)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def source(path: str, fmt: Format) -> str:
    """The table function reading every record file under ``path`` (a folder)."""
    if fmt == "jsonl":
        glob = _quote(f"{path.rstrip('/')}/**/*.jsonl")
        return f"read_json({glob}, format='newline_delimited', columns={_COLUMNS})"
    glob = _quote(f"{path.rstrip('/')}/**/*.parquet")
    return f"read_parquet({glob}, hive_partitioning=true)"


def _latencies(src: str) -> str:
    return f"""SELECT model, replica, status, finished_s,
           first_token_s - arrival_s AS ttft,
           CASE WHEN output_tokens >= 2
                THEN (finished_s - first_token_s) / (output_tokens - 1) END AS tpot,
           finished_s - arrival_s AS e2e
    FROM {src}"""


def script(command: str, paths: list[str], fmt: Format, model: str | None = None) -> str:
    """The whole SQL script of ``command``; its last statement's rows are the result."""
    return "SET threads=2;\n" + _query(command, paths, fmt, model)


def _query(command: str, paths: list[str], fmt: Format, model: str | None) -> str:
    if command == "outliers":
        return f"""WITH r AS ({_latencies(source(paths[0], fmt))})
SELECT model, replica, count(*) AS requests,
       avg(CASE WHEN status = 'ok' THEN 0.0 ELSE 1.0 END) AS error_rate,
       quantile_cont(ttft, 0.5) AS ttft_p50,
       quantile_cont(tpot, 0.5) AS tpot_p50,
       quantile_cont(e2e, 0.5) AS e2e_p50
FROM r GROUP BY model, replica ORDER BY model, replica;"""
    if command == "tail":
        return f"""WITH r AS ({_latencies(source(paths[0], fmt))}),
threshold AS (SELECT model, quantile_cont(e2e, 0.99) AS p99 FROM r GROUP BY model)
SELECT model, replica, p99, count(*) AS tail_requests,
       count(*) / sum(count(*)) OVER (PARTITION BY model) AS tail_share
FROM r JOIN threshold USING (model) WHERE e2e >= p99
GROUP BY model, replica, p99 ORDER BY model, tail_share DESC, replica;"""
    if command == "compare":
        halves = " UNION ALL ".join(
            f"SELECT {_quote(half)} AS half, * FROM ({_latencies(source(path, fmt))})"
            for half, path in zip(("before", "after"), paths, strict=True)
        )
        return f"""WITH r AS ({halves})
SELECT half, model, count(*) AS requests,
       quantile_cont(ttft, [0.5, 0.9, 0.99]) AS ttft,
       quantile_cont(tpot, [0.5, 0.9, 0.99]) AS tpot,
       quantile_cont(e2e, [0.5, 0.9, 0.99]) AS e2e
FROM r GROUP BY half, model ORDER BY half DESC, model;"""
    if command == "backtest":
        where = "" if model is None else f" WHERE model = {_quote(model)}"
        return f"""SELECT CAST(floor(finished_s / 300) AS BIGINT) * 300 AS bin_start_s,
       count(*) FILTER (WHERE status = 'ok') AS good, count(*) AS total
FROM {source(paths[0], fmt)}{where}
GROUP BY bin_start_s ORDER BY bin_start_s;"""
    raise ValueError(f"unknown command {command!r}; known: {', '.join(COMMANDS)}")


def main(argv: list[str]) -> int:
    import duckdb

    model = None
    if "--model" in argv:
        at = argv.index("--model")
        model, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    command, kind, *paths = argv
    if kind not in ("jsonl", "parquet"):
        raise SystemExit(f"format must be jsonl or parquet, got {kind!r}")
    fmt: Format = "jsonl" if kind == "jsonl" else "parquet"
    rows = duckdb.connect().execute(script(command, paths, fmt, model)).fetchall()
    out = sys.stdout
    for row in rows:
        out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
