"""One fleet per model: records split by their ``model``, and a report that holds one per model.

Replicas of different models are not alike (a 70B model is slower than an 8B one on every
request), so every records analysis compares a replica only with replicas of its own model and
reports each model on its own. A dataset of one model gets the single report it always got.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import pandas as pd

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.records.engine.reductions import UNNAMED

__all__ = ["UNNAMED", "ByModel", "Report", "by_model", "gathered", "per_model", "split_models"]


class Report(Protocol):
    """What a per-model analysis returns: a JSON-ready dict and terminal text."""

    def to_dict(self) -> dict[str, Any]: ...

    def render(self) -> str: ...


R = TypeVar("R", bound=Report)


def split_models(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``df``'s records per model, models sorted by name; one group (named for its model, or
    ``UNNAMED``) when the records have no ``model`` column or only one model."""
    if "model" not in df.columns:
        return [(UNNAMED, df)]
    model = df["model"].astype("string").fillna(UNNAMED).to_numpy()
    names = sorted(set(model.tolist()))
    if len(names) <= 1:
        return [(names[0] if names else UNNAMED, df)]
    return [(m, df[model == m]) for m in names]


@dataclass(frozen=True, slots=True)
class ByModel(Generic[R]):
    """One report per model, in model order; text and JSON grouped by model."""

    reports: tuple[tuple[str, R], ...]
    notes: tuple[str, ...] = ()
    """Models left out, each with why (e.g. in one run only, or too few records)."""

    def __iter__(self) -> Iterator[tuple[str, R]]:
        return iter(self.reports)

    def __getitem__(self, model: str) -> R:
        for m, r in self.reports:
            if m == model:
                return r
        raise KeyError(model)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.reports)

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": [{"model": m, **r.to_dict()} for m, r in self.reports],
            "notes": list(self.notes),
        }

    def render(self) -> str:
        parts = []
        for m, r in self.reports:
            body = "\n".join(f"  {line}" if line else line for line in r.render().splitlines())
            parts.append(f"model {m}:\n{body}")
        notes = "".join(f"\nnote: {n}" for n in self.notes)
        return "\n\n".join(parts) + ("\n" + notes if notes else "")


def by_model(df: pd.DataFrame, analyse: Callable[[str, pd.DataFrame], R]) -> R | ByModel[R]:
    """``analyse`` run on each model's records: its one report when ``df`` holds one model,
    else a ``ByModel`` of them."""
    groups = split_models(df)
    if len(groups) == 1:
        return analyse(*groups[0])
    return gathered([(m, partial(analyse, m, part)) for m, part in groups], [])


def gathered(runs: list[tuple[str, Callable[[], R]]], notes: list[str]) -> ByModel[R]:
    """Each model's report; a model its analysis refuses is a note, unless every model is."""
    done: list[tuple[str, R]] = []
    for m, run in runs:
        try:
            done.append((m, run()))
        except AnalysisError as exc:
            notes.append(f"model {m}: not analysed ({exc})")
    if not done:
        raise AnalysisError("no model could be analysed: " + "; ".join(notes))
    return ByModel(tuple(done), tuple(notes))


def per_model(
    before: pd.DataFrame,
    after: pd.DataFrame,
    analyse: Callable[[str, pd.DataFrame, pd.DataFrame], R],
) -> R | ByModel[R]:
    """``analyse`` run on each model's before and after records, matched by model: one report
    when each run holds one model (the two runs compared whatever their models are named), else
    a ``ByModel`` over the models in both runs; a model in one run only is a note."""
    b, a = dict(split_models(before)), dict(split_models(after))
    if len(b) == 1 and len(a) == 1:
        ((m, bm),), ((n, am),) = b.items(), a.items()
        return analyse(m if m == n else f"{m} -> {n}", bm, am)
    notes = [
        f"model {m}: only in the {'before' if m in b else 'after'} run, not compared"
        for m in sorted(b.keys() ^ a.keys())
    ]
    both = sorted(b.keys() & a.keys())
    return gathered([(m, partial(analyse, m, b[m], a[m])) for m in both], notes)
