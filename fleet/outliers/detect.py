"""The detector: judge the fleet in passes, then merge and rank what they found.

Find replicas that stand out from their fleet, and say whether the replica or its traffic is to
blame.

Identical replicas serving identical traffic should produce identical numbers, so the fleet median
is the reference. A cell (replica, signal) is a finding when both gates pass: the robust z-score is
beyond the n-aware cutoff and the effect is at least the signal's ``min_effect`` (see ``signals``).
Replicas below ``min_requests`` are listed as insufficient and neither judged nor counted in the
fleet median. The statistics are vectorised over the whole table; only flagged cells become
``Finding`` objects, so a healthy fleet of 10,000 replicas costs a few matrix operations.

Masking. In a small fleet two replicas that stand out on the same signal hide each other: with four
replicas, a slowed one and one sent only long prompts (both high on TTFT) pull the median up and
inflate the MAD, so neither passes the cutoff. The detector therefore judges in passes, each over
the same table filtered to fewer replicas (so it works for every source), never below
``min_fleet`` replicas:

1. ``fleet``: every judged replica against the whole fleet.
2. ``peers``: only the replicas whose traffic is like the fleet's (``traffic.different_traffic``:
   prompt length, prefix-cache hit rate, request rate), so a replica sent different traffic cannot
   hide a slow one.
3. ``unmasked``: the replicas blamed replica-side so far set aside and the rest judged against each
   other (what an operator does after draining the bad replica); repeated while it blames someone
   new, at most ``_MAX_UNMASK_ROUNDS`` times.

Findings are merged: one per (replica, signal), the earliest pass's, and a replica blamed
replica-side in any pass keeps no workload-side findings. Each finding's evidence ends with
the pass that found it, and ``Finding.found_in`` names it. The fleet statistics in the report are
the first pass's. A pass only runs when it has someone to set aside, so a healthy fleet of
like traffic is judged once.

The false-alarm rate is stated for the whole report (see ``stats``): the family is every
(signal, replica) cell of every pass, at the family-wise level ``DetectorConfig.alpha``. The
passes that run on a healthy fleet share it (Bonferroni): the fleet pass alone, or the fleet and
peers passes when the traffic differs (decided before any judging, from the workload columns).
``unmasked`` passes run only after a replica-side finding, so they cannot turn a healthy fleet
into one with a finding; they re-test the remaining replicas at the same per-pass level, a
step-down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.config import DetectorConfig
from fleetwatch.fleet.outliers.judging.causes import Side
from fleetwatch.fleet.outliers.judging.judge import Judgement, judge
from fleetwatch.fleet.outliers.judging.traffic import different_traffic
from fleetwatch.fleet.outliers.report import Finding, OutlierReport
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["detect"]

_MAX_UNMASK_ROUNDS = 3
"""Re-judgements with blamed replicas set aside; each sets aside at least one more replica."""


def _blamed(findings: list[Finding]) -> set[str]:
    return {f.replica for f in findings if f.side is Side.REPLICA}


def _merge(passes: list[Judgement]) -> list[Finding]:
    """One finding per (replica, signal), the earliest pass's; a replica blamed replica-side in
    any pass keeps no workload-side findings (its traffic is noted in their evidence)."""
    every = [f for p in passes for f in p.findings]
    blamed = _blamed(every)
    out: dict[tuple[str, str], Finding] = {}
    for f in every:
        if f.replica in blamed and f.side is Side.WORKLOAD:
            continue
        out.setdefault((f.replica, f.signal), f)
    return list(out.values())


def _severity(f: Finding) -> tuple[int, float]:
    if math.isfinite(f.ratio) and f.ratio > 0:
        s = abs(math.log(f.ratio))
    elif math.isfinite(f.robust_z):
        s = math.log1p(abs(f.robust_z) / max(f.cutoff, 1.0))
    else:
        s = 0.0
    return (0 if f.side is Side.REPLICA else 1, -s)


def _names(replicas: Iterable[str]) -> str:
    return ", ".join(sorted(replicas))


def _host_notes(findings: list[Finding], table: FleetTable) -> list[str]:
    """One line per contended host (or replica of unknown host): who stands out, and that nobody
    is blamed for it."""
    hosts = {} if table.host is None else table.host.dropna().astype(str).to_dict()
    groups: dict[str, tuple[set[str], set[str]]] = {}
    for f in findings:
        if f.side is Side.HOST:
            h = hosts.get(f.replica)
            reps, sigs = groups.setdefault(
                f"host {h}" if h else f"the host of {f.replica}", (set(), set())
            )
            reps.add(f.replica)
            sigs.add(f.signal)
    return [
        f"{where}: {_names(reps)} stand out on {_names(sigs)}: host contention, no replica blamed"
        for where, (reps, sigs) in sorted(groups.items())
    ]


def detect(table: FleetTable, config: DetectorConfig | None = None) -> OutlierReport:
    """Judge every replica in ``table`` against its fleet; see the module docstring."""
    cfg = config or DetectorConfig()
    if cfg.min_fleet < 3:
        raise AnalysisError("min_fleet must be at least 3 (a median of two outvotes nobody)")
    volume = table.volume_array()
    ok = ~(volume < cfg.min_requests).to_numpy()
    judged = table.replicas[ok]
    insufficient = tuple((str(r), float(volume[r])) for r in table.replicas[~ok])
    notes = list(table.notes)
    if cfg.noise_shape == "normal":
        notes.append(
            "cutoffs hold the level only for normal noise between healthy replicas (noise shape: "
            "normal; heavy-tailed or clustered noise raises the false-alarm rate)"
        )
    # String-typed names are str already; anything else (object, numbers) is converted.
    raw = judged.tolist()
    plain = isinstance(judged.dtype, pd.StringDtype) and not judged.hasnans
    names = tuple(raw if plain else map(str, raw))
    if len(judged) < cfg.min_fleet:
        notes.append(
            f"only {len(judged)} replica(s) with at least {cfg.min_requests} requests; "
            f"need {cfg.min_fleet} to judge"
        )
        return OutlierReport(
            "insufficient data",
            (),
            names,
            insufficient,
            {},
            cfg.min_requests,
            table.source,
            tuple(notes),
        )
    base = table if len(names) == len(table.replicas) else table.keep(ok, names)
    # Passes after the first re-judge part of the fleet: rows set aside by position.
    # ``where``: the rows of the replicas with findings so far (every row when traffic differs).
    where: dict[str, int] = {}

    def without(aside: Iterable[str]) -> tuple[FleetTable, npt.NDArray[np.intp]]:
        aside = list(aside)
        if any(r not in where for r in aside):
            where.update(zip(names, range(len(names)), strict=True))
        rows = np.ones(len(names), dtype=bool)
        rows[np.array([where[r] for r in aside], dtype=np.intp)] = False
        return base.keep(rows), np.flatnonzero(rows)

    def noted(found: Judgement, at: npt.NDArray[np.intp] | None = None) -> Judgement:
        for r, i in found.rows.items():
            where.setdefault(r, i if at is None else int(at[i]))
        return found

    differ = set(different_traffic(base, cfg))
    peers = len(names) - len(differ)  # names are unique and differ is drawn from them
    with_peers = bool(differ) and peers >= cfg.min_fleet
    m = 2 if with_peers else 1
    how = f"judged against the whole fleet ({len(names)} replicas)"
    first = noted(judge(base, cfg, "fleet", how, m))
    passes = [first]

    # Pass 2: only the replicas whose traffic is like the fleet's.
    if with_peers:
        how = (
            f"judged against peers with like traffic ({peers} replicas; set aside, traffic "
            f"differs: {_names(differ)})"
        )
        part, at = without(differ)
        passes.append(noted(judge(part, cfg, "peers", how, m, base), at))
        notes.append(f"re-judged without {_names(differ)} (traffic differs from the fleet's)")

    # Pass 3 and on: the replicas blamed so far set aside, until nobody new is blamed.
    blamed = _blamed([f for p in passes for f in p.findings])
    aside: set[str] = set()
    for _ in range(_MAX_UNMASK_ROUNDS):
        if not blamed - aside:
            break
        rest = len(names) - len(blamed)
        if rest < cfg.min_fleet:
            notes.append(
                f"not re-judged without {_names(blamed)}: {rest} replica(s) would remain, "
                f"need {cfg.min_fleet}"
            )
            break
        aside = set(blamed)
        how = (
            f"judged with blamed replicas set aside ({rest} replicas; set aside, blamed "
            f"replica-side: {_names(aside)})"
        )
        part, at = without(blamed)
        found = noted(judge(part, cfg, "unmasked", how, m, base), at)
        passes.append(found)
        blamed |= _blamed(found.findings)
        notes.append(f"re-judged without {_names(aside)} (blamed replica-side)")

    findings = sorted(_merge(passes), key=_severity)
    notes.extend(_host_notes(findings, base))
    return OutlierReport(
        "outliers" if findings else "no outlier",
        tuple(findings),
        names,
        insufficient,
        first.fleet,
        cfg.min_requests,
        table.source,
        tuple(notes),
    )
