"""Tail attribution: why are the slowest requests slow?

Each request's latency is split into measured components (queue, prefill, decode, preemption
stall; they add up exactly). The tail cohort (at or above the chosen percentile of the target
latency, p99 by default) is compared with the body (the rest): the difference of their means is the
tail's *excess*, and the difference of each component's means says where it went.

Suspects are ranked by how many seconds of that excess each explains:

- queueing: the tail's extra queue time (measured);
- preemption: the tail's extra preemption stall (measured);
- prompt-length variance, output length, prefill interference, one bad replica: the service time
  (latency minus queue and stall) is fitted by least squares on uncached prompt tokens, output
  tokens, the prompt tokens of *other* long-prompt prefills running on the same replica while the
  request was in flight (an approximation of sharing steps with them), and an indicator for the
  replica most over-represented in the tail. Each factor explains coefficient × (tail mean − body
  mean) seconds, an Oaxaca-style decomposition; what is left is reported as unexplained.

Everything is vectorised (numpy sorts and one small least-squares solve): a million records take
well under two seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from fleet.errors import AnalysisError

__all__ = ["Component", "Suspect", "TailReport", "attribute_tail"]

F64 = np.ndarray[Any, np.dtype[np.float64]]
Target = Literal["e2e", "ttft"]


@dataclass(frozen=True, slots=True)
class Component:
    """Mean seconds of one latency component in the tail and in the body."""

    name: str
    tail_mean_s: float
    body_mean_s: float

    @property
    def delta_s(self) -> float:
        return self.tail_mean_s - self.body_mean_s


@dataclass(frozen=True, slots=True)
class Suspect:
    """One explanation: ``explained_s`` seconds of the tail's mean excess (``share`` of it)."""

    name: str
    explained_s: float
    share: float
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TailReport:
    """Tail versus body of one latency target, with suspects ranked by explained excess."""

    target: str
    percentile: float
    threshold_s: float
    n_tail: int
    n_body: int
    tail_mean_s: float
    body_mean_s: float
    components: tuple[Component, ...]
    suspects: tuple[Suspect, ...]
    unexplained_s: float

    @property
    def excess_s(self) -> float:
        return self.tail_mean_s - self.body_mean_s

    @property
    def top(self) -> Suspect | None:
        return self.suspects[0] if self.suspects else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "percentile": self.percentile,
            "threshold_s": self.threshold_s,
            "n_tail": self.n_tail,
            "n_body": self.n_body,
            "tail_mean_s": self.tail_mean_s,
            "body_mean_s": self.body_mean_s,
            "excess_s": self.excess_s,
            "components": [
                {
                    "name": c.name,
                    "tail_mean_s": c.tail_mean_s,
                    "body_mean_s": c.body_mean_s,
                    "delta_s": c.delta_s,
                }
                for c in self.components
            ],
            "suspects": [
                {
                    "name": s.name,
                    "explained_s": s.explained_s,
                    "share": s.share,
                    "evidence": list(s.evidence),
                }
                for s in self.suspects
            ],
            "unexplained_s": self.unexplained_s,
        }

    def render(self) -> str:
        lines = [
            f"{self.target} tail (>= p{self.percentile:g} = {self.threshold_s:.4g} s): "
            f"{self.n_tail} requests, mean {self.tail_mean_s:.4g} s vs body "
            f"{self.body_mean_s:.4g} s (excess {self.excess_s:.4g} s)",
            "components (tail mean / body mean / delta, s):",
        ]
        lines.extend(
            f"  {c.name:<18} {c.tail_mean_s:>9.4g} {c.body_mean_s:>9.4g} {c.delta_s:>+9.4g}"
            for c in self.components
        )
        lines.append("suspects, by share of the excess explained:")
        for i, s in enumerate(self.suspects, 1):
            lines.append(f"  {i}. {s.name:<24} {s.explained_s:>+9.4g} s  {s.share:>7.1%}")
            lines.extend(f"       - {e}" for e in s.evidence)
        share = self.unexplained_s / self.excess_s if self.excess_s else math.nan
        lines.append(f"  unexplained {self.unexplained_s:+.4g} s ({share:.1%})")
        return "\n".join(lines)


def _col(df: pd.DataFrame, name: str, default: float = 0.0) -> F64:
    if name not in df.columns:
        return np.full(len(df), default)
    return df[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _interference(
    codes: np.ndarray[Any, Any],
    start: F64,
    end: F64,
    pf_end: F64,
    uncached: F64,
    long_mask: np.ndarray[Any, Any],
) -> F64:
    """Prompt tokens of other long-prompt prefills on the same replica overlapping each request.

    A long prefill j overlaps request i when ``start_j < end_i`` and ``pf_end_j > start_i``;
    counting those with ``start_j < end_i`` minus those with ``pf_end_j <= start_i`` gives the sum
    in two sorted searches. Replicas are kept apart by offsetting each one's clock.
    """
    lo = float(np.nanmin(start))
    span = float(np.nanmax(np.fmax(end, pf_end))) - lo + 1.0
    off = codes.astype(np.float64) * 2.0 * span - lo
    s, e = start + off, end + off
    ls, le = (start + off)[long_mask], (pf_end + off)[long_mask]
    tok = uncached[long_mask]
    o1, o2 = np.argsort(ls, kind="stable"), np.argsort(le, kind="stable")
    ls_sorted, le_sorted = ls[o1], le[o2]
    c1 = np.concatenate(([0.0], np.cumsum(tok[o1])))
    c2 = np.concatenate(([0.0], np.cumsum(tok[o2])))
    total = (
        c1[np.searchsorted(ls_sorted, e, side="left")]
        - c2[np.searchsorted(le_sorted, s, side="right")]
    )
    own = np.where(long_mask & (pf_end > start), uncached, 0.0)
    out: F64 = np.maximum(total - own, 0.0)
    return out


def attribute_tail(
    df: pd.DataFrame,
    *,
    percentile: float = 99.0,
    target: Target = "e2e",
    long_prompt_quantile: float = 0.9,
) -> TailReport:
    """Attribute the ``target`` latency tail of ok requests in ``df`` (a records frame)."""
    if not 50.0 <= percentile < 100.0:
        raise AnalysisError(f"percentile must be in [50, 100), got {percentile}")
    if target not in ("e2e", "ttft"):
        raise AnalysisError(f"tail target must be 'e2e' or 'ttft', got {target!r}")
    need = ("arrival_s", "scheduled_s", "first_token_s", "finished_s", "prompt_tokens")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise AnalysisError(f"records lack column(s) {', '.join(missing)}")
    arrival = _col(df, "arrival_s")
    scheduled = _col(df, "scheduled_s")
    first = _col(df, "first_token_s")
    finished = _col(df, "finished_s")
    ok = ~(np.isnan(scheduled) | np.isnan(first))
    if "status" in df.columns:
        ok &= (df["status"] == "ok").to_numpy(dtype=bool, na_value=False)
    if ok.sum() < 20:
        raise AnalysisError(f"need at least 20 completed requests, got {int(ok.sum())}")
    idx = np.flatnonzero(ok)
    arrival, scheduled, first, finished = arrival[idx], scheduled[idx], first[idx], finished[idx]
    prompt = _col(df, "prompt_tokens")[idx]
    cached = np.nan_to_num(_col(df, "cached_prompt_tokens")[idx])
    uncached = prompt - cached
    out_tokens = _col(df, "output_tokens")[idx]
    stall = np.nan_to_num(_col(df, "preemption_stall_s")[idx])
    preempted = np.nan_to_num(_col(df, "preemptions")[idx]) > 0

    queue = scheduled - arrival
    prefill = first - scheduled
    decode = finished - first
    stall_decode = np.minimum(stall, decode) if target == "e2e" else np.zeros_like(stall)
    stall_prefill = np.minimum(stall - stall_decode, prefill)
    if target == "e2e":
        y = finished - arrival
        parts = {
            "queue": queue,
            "prefill": prefill - stall_prefill,
            "decode": decode - stall_decode,
            "preemption_stall": stall_prefill + stall_decode,
        }
    else:
        y = first - arrival
        parts = {
            "queue": queue,
            "prefill": prefill - stall_prefill,
            "preemption_stall": stall_prefill,
        }
    threshold = float(np.percentile(y, percentile))
    tail = y >= threshold
    if tail.all() or not tail.any():
        raise AnalysisError(f"{target} has no spread at p{percentile:g}: tail equals body")
    body = ~tail
    nt, nb = int(tail.sum()), int(body.sum())

    tail_w = tail.astype(np.float64)

    def tb(v: F64) -> tuple[float, float]:
        t_sum, all_sum = float(v @ tail_w), float(v.sum())
        return t_sum / nt, (all_sum - t_sum) / nb

    components = tuple(Component(k, *tb(v)) for k, v in parts.items())
    excess = float(y[tail].mean() - y[body].mean())

    # Features of the service-time model.
    if "replica" in df.columns:
        all_codes, uniques = pd.factorize(df["replica"])
        codes = all_codes[idx]
        names = [str(u) for u in uniques]
    else:
        codes, names = np.zeros(len(idx), dtype=np.int64), ["all"]
    q_long, q_mid = np.quantile(uncached, [long_prompt_quantile, 0.5])
    thr_long = max(float(q_long), 2.0 * float(q_mid), 1.0)
    long_mask = uncached >= thr_long
    # The window a request would have been in flight at the body's typical speed: using the
    # measured window would count more overlap for requests that were slow for other reasons.
    per_prompt = float(np.median(parts["prefill"][body] / np.maximum(uncached[body], 1.0)))
    nominal = scheduled + per_prompt * uncached
    if target == "e2e":
        per_out = float(np.median(parts["decode"][body] / np.maximum(out_tokens[body] - 1, 1.0)))
        nominal = nominal + per_out * np.maximum(out_tokens - 1.0, 0.0)
    interf = (
        _interference(codes, scheduled, nominal, first, uncached, long_mask)
        if long_mask.any()
        else np.zeros(len(idx))
    )
    features: dict[str, list[F64]] = {"prompt-length variance": [uncached]}
    if target == "e2e":
        features["output length"] = [np.maximum(out_tokens - 1.0, 0.0)]
    features["prefill interference"] = [interf]
    bad_name: str | None = None
    if len(names) > 1:
        counts_all = np.bincount(codes, minlength=len(names)).astype(np.float64)
        counts_tail = np.bincount(codes[tail], minlength=len(names)).astype(np.float64)
        lift = (counts_tail / nt) / (counts_all / len(codes))
        worst = int(np.argmax(lift))
        if lift[worst] >= 1.5 and counts_tail[worst] >= 2:
            bad_name = str(names[worst])
            on = (codes == worst).astype(np.float64)
            # A slow replica is slower per token, not by a constant: interact with the sizes.
            features["one bad replica"] = [on, *(on * v[0] for v in list(features.values())[:2])]
    service = y - parts["queue"] - parts["preemption_stall"]
    cols = [np.ones(len(y)), *(c for group in features.values() for c in group)]
    scale = np.array([max(float(np.abs(c).max()), 1e-12) for c in cols])
    design = np.column_stack(cols) / scale
    # Normal equations: a k×k solve instead of an n×k factorisation (k ≤ 9, n up to millions).
    gram = design.T @ design
    beta = np.linalg.lstsq(gram, design.T @ service, rcond=None)[0] / scale

    suspects: list[Suspect] = []

    def add(name: str, seconds: float, evidence: tuple[str, ...]) -> None:
        share = seconds / excess if excess > 0 else math.nan
        suspects.append(Suspect(name, seconds, share, evidence))

    q_t, q_b = tb(queue)
    slope = _trend(arrival, queue)
    growth = slope * float(arrival.max() - arrival.min())
    body_mean = float(y[body].mean())
    add(
        "queueing",
        q_t - q_b,
        (
            f"queue mean {q_t:.4g} s in the tail vs {q_b:.4g} s in the body",
            f"queue time trend over the run: {growth:+.4g} s end to end"
            + (
                " (growing by more than a typical request takes: arrivals exceed capacity)"
                if growth > body_mean
                else ""
            ),
        ),
    )
    s_t, s_b = tb(parts["preemption_stall"])
    p_t, p_b = float(preempted[tail].mean()), float(preempted[body].mean())
    add(
        "preemption",
        s_t - s_b,
        (
            f"stall mean {s_t:.4g} s in the tail vs {s_b:.4g} s in the body",
            f"preempted: {p_t:.1%} of the tail vs {p_b:.1%} of the body",
        ),
    )
    k = 1
    for name, group in features.items():
        seconds = 0.0
        for v in group:
            vt, vb = tb(v)
            seconds += float(beta[k] * (vt - vb))
            k += 1
        v = group[0]
        vt, vb = tb(v)
        b = float(beta[k - len(group)])
        if name == "prompt-length variance":
            ev: tuple[str, ...] = (
                f"uncached prompt tokens: tail mean {vt:.0f} vs body {vb:.0f}; "
                f"{b * 1000:.3g} ms per token",
                f"tail max {float(v[tail].max()):.0f} tokens; body p99 "
                f"{float(np.percentile(v[body], 99)):.0f}",
            )
        elif name == "output length":
            ev = (
                f"output tokens: tail mean {vt:.0f} vs body {vb:.0f}; {b * 1000:.3g} ms per token",
            )
        elif name == "prefill interference":
            ev = (
                f"prompt tokens of other long prefills (>= {thr_long:.0f} uncached tokens) "
                f"in flight on the same replica: tail mean {vt:.0f} vs body {vb:.0f}",
                f"{b * 1e6:.3g} µs of delay per such token",
            )
        else:
            ev = (f"replica {bad_name}: {vt:.1%} of the tail vs {vb:.1%} of the body",)
        add(name, seconds, ev)
    suspects.sort(key=lambda s: -s.explained_s)
    unexplained = excess - sum(s.explained_s for s in suspects)
    return TailReport(
        target=target,
        percentile=percentile,
        threshold_s=threshold,
        n_tail=nt,
        n_body=nb,
        tail_mean_s=float(y[tail].mean()),
        body_mean_s=float(y[body].mean()),
        components=components,
        suspects=tuple(suspects),
        unexplained_s=unexplained,
    )


def _trend(x: F64, y: F64) -> float:
    """Least-squares slope of ``y`` on ``x`` (0 when ``x`` has no spread)."""
    xc = x - x.mean()
    den = float(np.dot(xc, xc))
    return float(np.dot(xc, y - y.mean()) / den) if den > 0 else 0.0
