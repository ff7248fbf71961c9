"""What the runs answered, not how fast: the output shape, judged by counts.

A model update, a chat template, a tokenizer or a kernel can change what a server answers while
every latency and the error rate stay put. The records say enough to see it:

- each **finish reason**'s share of the ok requests that name one (``length`` rising: answers cut
  at ``max_tokens``; ``stop`` rising: answers ending early);
- the share of ok requests with **empty output** (no token);
- each **error type**'s share of all requests (one kind of failure replacing another);
- each other **status**'s share of all requests (``aborted``: clients giving up; ``rejected``:
  the server refusing).

Each share gets the error rate's verdict by its counts (``decision.error_verdict``: Fisher's exact
test, a change of ``min_effect`` of the before share, 0.1 point at least, Newcombe's interval of the
rise), the p-values adjusted by Holm across the signals, so the chance that two runs of one system
list any moved share stays at most ``alpha``. A share that **rose** is a regression of the run;
finish reasons share one whole, so a fall of one is a rise of another and is seen there. The
output-length distribution is already tested among the workload checks (``output_tokens``); where
it moved with the prompts unchanged, the report says so beside these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleetwatch.fleet.compare.decision import error_verdict, holm
from fleetwatch.fleet.compare.statistics import error_rates_from_counts

__all__ = [
    "MAX_NAMES",
    "ShapeCounts",
    "ShapeSignal",
    "fold_rare",
    "judge_shape",
    "shape_counts",
    "shape_from_tallies",
]

MAX_NAMES = 12
"""Finish reasons, error types and statuses judged one by one per kind, the most common over
both runs; the rarer are counted as ``other`` (values come from servers and clients: their
number is not ours to trust)."""


@dataclass(frozen=True, slots=True)
class ShapeCounts:
    """One run's counts: each signal's requests, and per kind of signal what it is a share of
    (``finish_reason``: ok requests naming one; ``empty output``: ok requests; ``error_type``:
    all requests)."""

    signals: dict[str, int]
    of: dict[str, int]


_WORDS = {"regressed": "rose", "improved": "fell"}
"""A share moves, it does not get better or worse by itself: ``stop`` rising is ``length`` falling."""


def _kind(name: str) -> str:
    return name.split("=", 1)[0]


@dataclass(frozen=True, slots=True)
class ShapeSignal:
    name: str
    """``finish_reason=length``, ``empty output`` or ``error_type=timeout``."""
    before: tuple[int, int]
    after: tuple[int, int]
    p_value: float
    p_adjusted: float
    verdict: str
    """``rose``, ``fell`` (significant and material), ``unchanged`` (the interval rules a
    material rise out), ``inconclusive`` or ``insufficient``."""
    rise_ci: tuple[float, float]

    @property
    def share_before(self) -> float:
        return self.before[0] / self.before[1] if self.before[1] else math.nan

    @property
    def share_after(self) -> float:
        return self.after[0] / self.after[1] if self.after[1] else math.nan

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "signal": self.name,
            "before": {
                "count": self.before[0],
                "of": self.before[1],
                "share": num(self.share_before),
            },
            "after": {"count": self.after[0], "of": self.after[1], "share": num(self.share_after)},
            "p_value": num(self.p_value),
            "p_adjusted": num(self.p_adjusted),
            "verdict": self.verdict,
            "rise_ci": [num(self.rise_ci[0]), num(self.rise_ci[1])],
        }


def _named(kind: str, counts: Mapping[str, int]) -> dict[str, int]:
    return {f"{kind}={k}": int(v) for k, v in counts.items()}


def fold_rare(
    a: Mapping[str, int], b: Mapping[str, int], limit: int = MAX_NAMES
) -> tuple[dict[str, int], dict[str, int]]:
    """``a`` and ``b`` (counts by ``kind=value``) with the same names: per kind, the values
    beyond the ``limit`` most common over both folded into ``kind=other`` in each alike (names
    without ``=`` kept as they are)."""
    pooled: dict[str, int] = {}
    for side in (a, b):
        for k, v in side.items():
            pooled[k] = pooled.get(k, 0) + int(v)
    rare: set[str] = set()
    for kind in {_kind(k) for k in pooled if "=" in k}:
        names = sorted(
            (k for k in pooled if _kind(k) == kind and "=" in k), key=lambda k: (-pooled[k], k)
        )
        rare.update(names[limit:])

    def fold(side: Mapping[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for k, v in side.items():
            name = f"{_kind(k)}=other" if k in rare else k
            out[name] = out.get(name, 0) + int(v)
        return out

    return fold(a), fold(b)


def shape_from_tallies(
    reasons: Mapping[str, int],
    empty: int | None,
    ok: int,
    errors: Mapping[str, int],
    requests: int,
    statuses: Mapping[str, int] | None = None,
) -> ShapeCounts:
    """The counts from one run's tallies: ok requests per finish reason, empty ok outputs (None:
    output tokens not recorded), ok requests, errored requests per named error type, all
    requests; ``statuses``: requests per status other than ok and error (aborted, rejected).
    Errors without a type are the error rate's, not a shape."""
    signals = {
        **_named("finish_reason", reasons),
        **_named("error_type", errors),
        **_named("status", statuses or {}),
    }
    of = {
        "finish_reason": sum(int(v) for v in reasons.values()),
        "error_type": requests,
        "status": requests,
    }
    if empty is not None:
        signals["empty output"] = int(empty)
        of["empty output"] = ok
    return ShapeCounts(signals, of)


def _tally(values: pd.Series) -> dict[str, int]:
    return {str(k): int(v) for k, v in values.value_counts(dropna=True).items()}


def shape_counts(df: pd.DataFrame) -> ShapeCounts:
    """A record frame's counts (a column it lacks gives no signal)."""
    status = (
        df["status"].astype("string") if "status" in df.columns else pd.Series("ok", index=df.index)
    )
    ok = (status == "ok").fillna(False).to_numpy(dtype=bool)
    err = (status == "error").fillna(False).to_numpy(dtype=bool)
    has = df.columns.__contains__
    return shape_from_tallies(
        _tally(df.loc[ok, "finish_reason"]) if has("finish_reason") else {},
        int((df.loc[ok, "output_tokens"] == 0).sum()) if has("output_tokens") else None,
        int(ok.sum()),
        _tally(df.loc[err, "error_type"]) if has("error_type") else {},
        len(df),
        _tally(status[~(ok | err)]),  # value_counts leaves missing statuses out, as SQL does
    )


def judge_shape(
    before: ShapeCounts,
    after: ShapeCounts,
    *,
    alpha: float,
    min_effect: float,
    confidence: float,
) -> tuple[ShapeSignal, ...]:
    """Every signal either run has, judged by its counts; Holm across the signals."""
    rows = []
    signals_b, signals_a = fold_rare(before.signals, after.signals)
    for name in sorted(set(signals_b) | set(signals_a)):
        kind = _kind(name)
        b = (signals_b.get(name, 0), before.of.get(kind, 0))
        a = (signals_a.get(name, 0), after.of.get(kind, 0))
        if b[0] or a[0]:  # a share nil in both runs says nothing
            rows.append((name, b, a, error_rates_from_counts(b, a)[2]))
    adjusted = holm([p for *_, p in rows])
    out = []
    for (name, b, a, p), p_adj in zip(rows, adjusted, strict=True):
        verdict, low, high = error_verdict(
            b, a, p_adj, alpha=alpha, min_effect=min_effect, confidence=confidence
        )
        verdict = _WORDS.get(verdict, verdict)
        out.append(ShapeSignal(name, b, a, p, p_adj, verdict, (low, high)))
    return tuple(out)
