"""Requests an on-call can look up: the slowest of the tail, and the tail requests each suspect
points at, with their request and trace ids.

Each list holds at most ``EXAMPLES`` tail requests (at or above the threshold), ordered by what
its cohort is about, ties by the latency (slowest first) and then the request id:

- ``tail``: the slowest;
- ``prompt-length variance``: the most uncached prompt tokens;
- ``output length`` (e2e): the most output tokens;
- ``one bad replica``: the over-represented replica's slowest.

The in-memory path takes them from the requests' arrays (``from_requests``). Through an engine the
second pass keeps the tail requests that may be listed (``Candidates``: per cohort those at or
above its ``EXAMPLES``-th, ties kept, a few dozen whatever the rows), and only their ids are read
(``from_candidates``: the files of their replicas, the hours of their arrivals); where a cohort's
candidates lack ids and others may be listed instead, one query over the tail's rows picks them
(``in_engine``). All order them alike, so they give the same lists. Records without request ids
give none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetwatch.fleet.tail.sums import OUTPUT, PROMPT, REPLICA, Plan

if TYPE_CHECKING:
    import pandas as pd

    from fleetwatch.fleet.tail.cohorts import F64, Requests
    from fleetwatch.records.engine import Engine

__all__ = ["EXAMPLES", "Candidates", "Example", "from_candidates", "from_requests", "in_engine"]

EXAMPLES = 10
"""Requests listed a cohort."""

Example = dict[str, Any]
"""One request: ``request_id``, ``trace_id`` (None where the span was not sampled),
``replica``, ``latency_s``, ``uncached_prompt_tokens``, ``output_tokens``."""

_KEYS = {"tail": "latency_s", PROMPT: "uncached_prompt_tokens", OUTPUT: "output_tokens"}


def _cohorts(plan: Plan) -> dict[str, tuple[str, bool]]:
    """Each cohort listed: the field it is ordered by, and whether it is the worst replica's."""
    out = {"tail": ("latency_s", False), PROMPT: ("uncached_prompt_tokens", False)}
    if plan.target == "e2e":
        out[OUTPUT] = ("output_tokens", False)
    if plan.worst is not None:
        out[REPLICA] = ("latency_s", True)
    return out


def _text(x: Any) -> str | None:
    import pandas as pd

    return None if x is None or (not isinstance(x, str) and pd.isna(x)) else str(x)


def _listed(rows: pd.DataFrame, plan: Plan) -> dict[str, list[Example]]:
    """The cohorts from the tail's rows (any order): each sorted and cut to ``EXAMPLES``."""
    out: dict[str, list[Example]] = {}
    for name, (key, own) in _cohorts(plan).items():
        mine = rows[rows["replica"].astype(str) == plan.worst] if own else rows
        ordered = mine.sort_values(
            [key, "latency_s", "request_id"], ascending=[False, False, True], kind="stable"
        ).head(EXAMPLES)
        out[name] = [
            {
                "request_id": str(rid),
                "trace_id": _text(trace),
                "replica": str(replica),
                "latency_s": float(latency),
                "uncached_prompt_tokens": int(prompt),
                "output_tokens": int(output),
            }
            for rid, trace, replica, latency, prompt, output in zip(
                ordered["request_id"].tolist(),
                ordered["trace_id"].tolist(),
                ordered["replica"].tolist(),
                ordered["latency_s"].to_numpy(np.float64).tolist(),
                ordered["uncached_prompt_tokens"].to_numpy(np.int64).tolist(),
                ordered["output_tokens"].to_numpy(np.int64).tolist(),
                strict=True,
            )
        ]
    return out


def from_requests(
    df: pd.DataFrame, idx: np.ndarray[Any, Any], y: F64, uncached: F64, out_tokens: F64, plan: Plan
) -> dict[str, list[Example]]:
    """The cohorts of the ok requests at rows ``idx`` of ``df`` (``y`` their target latency);
    none when the records carry no request ids."""
    import pandas as pd

    if "request_id" not in df.columns:
        return {}
    tail = np.flatnonzero(y >= plan.threshold)
    tail = tail[df["request_id"].iloc[idx[tail]].notna().to_numpy()]
    rows = df.iloc[idx[tail]]
    trace = rows["trace_id"] if "trace_id" in rows.columns else pd.Series(None, index=rows.index)
    frame = pd.DataFrame(
        {
            "request_id": rows["request_id"].astype(str).to_numpy(),
            "trace_id": trace.to_numpy(dtype=object),
            "replica": rows["replica"].astype(str).to_numpy(),
            "latency_s": y[tail],
            "uncached_prompt_tokens": np.nan_to_num(uncached[tail]),
            "output_tokens": np.nan_to_num(out_tokens[tail]),
        }
    )
    return _listed(frame, plan)


def in_engine(
    engine: Engine, base: str, y: str, uncached: str, plan: Plan
) -> dict[str, list[Example]]:
    """The cohorts of the ok requests of ``base`` (``FROM records WHERE …``, or ``FROM`` an
    engine's ``with_deferred`` rows where its table holds no id) from one query: each
    cohort's first ``EXAMPLES`` in its order, over the tail's rows only (DuckDB keeps them once,
    a materialised common table; they are about 1 % of the rows)."""
    materialized = "MATERIALIZED " if engine.name == "duckdb" else ""
    from fleetwatch.records.filters import sql_string

    picks = []
    for i, (key, own) in enumerate(_cohorts(plan).values()):
        only = f" WHERE replica = {sql_string(plan.worst or '')}" if own else ""
        picks.append(
            f"SELECT * FROM (SELECT {i} AS c, * FROM tail{only} ORDER BY {key} DESC, "
            f"latency_s DESC, request_id ASC LIMIT {EXAMPLES}) AS c{i}"
        )
    got = engine.query(
        f"WITH tail AS {materialized}(SELECT request_id, trace_id, replica, {y} AS latency_s, "
        f"CAST(coalesce({uncached}, 0) AS BIGINT) AS uncached_prompt_tokens, "
        f"coalesce(output_tokens, 0) AS output_tokens {base} AND {y} >= {plan.threshold!r} "
        f"AND request_id IS NOT NULL) " + " UNION ALL ".join(picks)
    )
    return {name: _listed(got[got["c"] == i], plan)[name] for i, name in enumerate(_cohorts(plan))}


_KEPT = (
    "replica",
    "arrival_s",
    "finished_s",
    "latency_s",
    "uncached_prompt_tokens",
    "output_tokens",
)


def _top(key: F64, latency: F64) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The rows at or above the ``EXAMPLES``-th largest by ``key`` then ``latency`` (ties kept):
    whatever ids sort the ties, the first ``EXAMPLES`` in a cohort's order are among them."""
    if len(key) <= EXAMPLES:
        return np.ones(len(key), dtype=bool)
    kth = np.lexsort((latency, key))[-EXAMPLES]
    out: np.ndarray[Any, np.dtype[np.bool_]] = (key > key[kth]) | (
        (key == key[kth]) & (latency >= latency[kth])
    )
    return out


@dataclass
class Candidates:
    """The tail requests that may be listed, over the groups of the second pass so far: in each
    cohort those at or above its ``EXAMPLES``-th (``_top``), with the cohort's count of tail
    requests (``held``). Memory: a few rows a cohort."""

    plan: Plan
    rows: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    member: dict[str, np.ndarray[Any, np.dtype[np.bool_]]] = field(default_factory=dict)
    held: Counter[str] = field(default_factory=Counter)

    def add(self, req: Requests, y: F64) -> None:
        """Count one group's requests (``y`` their target latency)."""
        at = np.flatnonzero(y >= self.plan.threshold)
        new = {
            "replica": np.asarray(req.replicas, dtype=object)[req.codes[at]],
            "arrival_s": req.arrival[at],
            "finished_s": req.finished[at],
            "latency_s": y[at],
            "uncached_prompt_tokens": np.nan_to_num(req.uncached[at]),
            "output_tokens": np.nan_to_num(req.out_tokens[at]),
        }
        pool = {k: np.concatenate([self.rows[k], v]) if self.rows else v for k, v in new.items()}
        member = {}
        for name, (key, own) in _cohorts(self.plan).items():
            mine = pool["replica"] == self.plan.worst if own else np.ones(len(at) + self.kept, bool)
            self.held[name] += int(np.count_nonzero(mine[self.kept :]))
            idx = np.flatnonzero(mine)
            member[name] = np.zeros(len(mine), dtype=bool)
            member[name][idx[_top(pool[key][idx], pool["latency_s"][idx])]] = True
        keep = np.logical_or.reduce(list(member.values()))
        self.rows = {k: v[keep] for k, v in pool.items()}
        self.member = {k: v[keep] for k, v in member.items()}

    @property
    def kept(self) -> int:
        return len(self.rows["replica"]) if self.rows else 0

    def complete(self, listed: pd.DataFrame) -> bool:
        """Whether ``listed`` (the tail's rows read again around the candidates: ``replica``,
        ``arrival_s``, ``finished_s``, ``has_id``) lists every cohort as a query over the whole
        tail would: each cohort has ``EXAMPLES`` candidates with ids, or all its tail requests
        are candidates. A candidate has an id where its replica and times are one row's alone,
        and that row has one (two requests alike in those are told apart by nothing else)."""
        if not self.rows:
            return True
        seen = Counter(
            zip(listed["replica"], listed["arrival_s"], listed["finished_s"], strict=True)
        )
        keys = {
            key
            for key, has in zip(
                zip(listed["replica"], listed["arrival_s"], listed["finished_s"], strict=True),
                listed["has_id"],
                strict=True,
            )
            if has and seen[key] == 1
        }
        own = np.array(
            [
                (r, a, f) in keys
                for r, a, f in zip(
                    self.rows["replica"],
                    self.rows["arrival_s"],
                    self.rows["finished_s"],
                    strict=True,
                )
            ],
            dtype=bool,
        )
        return all(
            np.count_nonzero(own & m) >= EXAMPLES or np.count_nonzero(m) >= self.held[name]
            for name, m in self.member.items()
        )

    def listed(self, rows: pd.DataFrame) -> dict[str, list[Example]]:
        """The cohorts from the candidates' rows with ids (``request_id``, ``trace_id``,
        ``replica``, ``latency_s``, ``uncached_prompt_tokens``, ``output_tokens``)."""
        return _listed(rows, self.plan)


_IDS = (
    "request_id",
    "trace_id",
    "replica",
    "arrival_s",
    "first_token_s",
    "finished_s",
    "prompt_tokens",
    "cached_prompt_tokens",
    "output_tokens",
)
"""The columns the listed requests are read with."""


def from_candidates(
    engine: Engine, where: str, y: str, uncached: str, plan: Plan, candidates: Candidates
) -> dict[str, list[Example]]:
    """The requests listed, from the candidates the second pass kept among the ok requests
    ``where`` (SQL) keeps, ``y`` their target latency: their rows read again with their ids,
    from the files of their replicas (the hours around their arrivals, by the files'
    statistics), the tail's rows only; one query over the tail's rows (``in_engine``) where
    candidates lack ids, or where a candidate's replica and times are another tail request's
    too (where the engine's table of JSON lines holds no id, that query reads again every
    file holding a tail row: about as much as opening the dataset)."""
    import pandas as pd

    from fleetwatch.records.filters import sql_string

    rows = candidates.rows
    names = sorted({str(r) for r in rows["replica"]}) if rows else []
    frames: list[pd.DataFrame] = []
    # a bound a hair below the threshold: the literal's rounding keeps no tail row out (the
    # exact test is below)
    bound = plan.threshold - abs(plan.threshold) * 1e-12
    if names:
        terms = []
        for name in names:
            a = rows["arrival_s"][rows["replica"] == name]
            lo, hi = float(a.min()) - 1.0, float(a.max()) + 1.0  # the rows matched exactly below
            terms.append(
                f"(replica = {sql_string(name)} AND arrival_s >= {lo!r} AND arrival_s <= {hi!r})"
            )
        # only the tail's rows, so memory is the candidates' replicas' share of the tail,
        # never a whole replica
        cond = f"{where} AND {y} >= {bound!r} AND ({' OR '.join(terms)})"
        frames = list(engine.frames(_IDS, cond, replicas=names))
    got = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(_IDS))
    end = got["finished_s" if plan.target == "e2e" else "first_token_s"].to_numpy(np.float64)
    latency = end - got["arrival_s"].to_numpy(np.float64)
    tail = latency >= plan.threshold
    got = got[tail]
    listed = pd.DataFrame(
        {
            "has_id": got["request_id"].notna().to_numpy(),
            "request_id": got["request_id"].astype(str).to_numpy(),
            "trace_id": got["trace_id"].to_numpy(dtype=object),
            "replica": got["replica"].astype(str).to_numpy(),
            "arrival_s": got["arrival_s"].to_numpy(np.float64),
            "finished_s": got["finished_s"].to_numpy(np.float64),
            "latency_s": latency[tail],
            "uncached_prompt_tokens": (
                got["prompt_tokens"].to_numpy(np.float64)
                - got["cached_prompt_tokens"].fillna(0).to_numpy(np.float64)
            ),
            "output_tokens": got["output_tokens"].fillna(0).to_numpy(np.float64),
        }
    )
    if not candidates.complete(listed):
        deferred = getattr(engine, "with_deferred", None)  # ids not held: the tail's files
        source = "records" if deferred is None else deferred(f"{where} AND {y} >= {bound!r}")
        return in_engine(engine, f"FROM {source} WHERE {where}", y, uncached, plan)
    return candidates.listed(listed[listed["has_id"]].drop(columns="has_id"))
