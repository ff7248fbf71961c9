"""The tail report: components and ranked suspects, and its text and JSON rendering."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Component", "Suspect", "TailReport"]


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
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Requests to look up (``fleet.tail.examples``): the slowest of the tail, and the tail
    requests each suspect points at, with request and trace ids."""

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
            "examples": self.examples,
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
        slowest = self.examples.get("tail", [])
        if slowest:
            first = slowest[0]
            trace = f", trace {first['trace_id']}" if first["trace_id"] else ""
            lines.append(
                f"slowest: request {first['request_id']} on {first['replica']}, "
                f"{first['latency_s']:.4g} s{trace} (more, and each suspect's: --json examples)"
            )
        return "\n".join(lines)
