"""The demo's HTML report: plots (inline SVG from matplotlib) and tables, one self-contained file.

Every function here is pure: values in, SVG or HTML text out. Nothing is computed here that the
run did not measure.
"""

from __future__ import annotations

import html
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

__all__ = [
    "Section",
    "burn_rate_svg",
    "latency_throughput_svg",
    "render_html",
    "replicas_svg",
    "table_html",
    "tail_svg",
]


def _figure(width: float = 7.5, height: float = 3.4) -> tuple[Figure, Axes]:
    # A Figure without pyplot: no global state, no display backend.
    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot()


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def latency_throughput_svg(
    points: Sequence[tuple[float, float, float]],
    *,
    bound: Sequence[tuple[float, float]] = (),
    label: str = "measured",
) -> str:
    """Latency (TPOT p50 and p99, ms) against output throughput (tokens/s), with the bound.

    ``points``: (tokens/s, TPOT p50 s, TPOT p99 s) per load level. ``bound``: (tokens/s, step
    time s) of the bandwidth bound at the same batch sizes: no point can lie left of and below it.
    """
    fig, ax = _figure()
    xs = [p[0] for p in points]
    ax.plot(xs, [p[1] * 1e3 for p in points], "o-", label=f"{label} TPOT p50")
    ax.plot(xs, [p[2] * 1e3 for p in points], "s--", label=f"{label} TPOT p99")
    if bound:
        ax.plot(
            [b[0] for b in bound],
            [b[1] * 1e3 for b in bound],
            "d:",
            color="crimson",
            label="bandwidth bound (same batch sizes)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("output throughput (tokens/s)")
    ax.set_ylabel("time per output token (ms)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _svg(fig)


def burn_rate_svg(
    times_s: Sequence[float],
    burn: Mapping[str, Sequence[float | None]],
    *,
    alert_intervals: Sequence[tuple[float, float, str]],
    threshold: float | None = None,
    marks: Sequence[tuple[float, float, str]] = (),
    extra: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> str:
    """Burn rate per window over time (seconds since the start) above, alert intervals below.

    ``alert_intervals``: (start, end, alert) drawn as bars, one lane per alert name; ``marks``:
    other intervals (the error burst), hatched in both panels; ``extra``: further series as
    (time, burn) points (e.g. the burn rate Prometheus recorded).
    """
    fig = Figure(figsize=(7.5, 4.6), dpi=100, layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=(3, 1.3))
    ax = fig.add_subplot(grid[0])
    lanes = fig.add_subplot(grid[1], sharex=ax)
    for name, values in burn.items():
        ys = [float("nan") if v is None else v for v in values]
        ax.plot(times_s, ys, label=name, linewidth=1.3)
    for name, pts in (extra or {}).items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ":", label=name, linewidth=1.6)
    if threshold is not None:
        ax.axhline(
            threshold, color="crimson", linestyle="--", linewidth=0.9, label=f"{threshold:g}x"
        )
    for start, end, name in marks:
        for a in (ax, lanes):
            a.axvspan(start, end, facecolor="none", edgecolor="grey", hatch="//", linewidth=0)
        ax.plot([], [], color="grey", linestyle="", marker="s", fillstyle="none", label=name)
    names = list(dict.fromkeys(n for _, _, n in alert_intervals))
    for start, end, name in alert_intervals:
        lane = names.index(name)
        lanes.broken_barh(
            [(start, max(end - start, 0.5))], (lane - 0.35, 0.7), color=f"C{lane + 3}"
        )
    lanes.set_yticks(range(len(names)))
    lanes.set_yticklabels(names, fontsize=7)
    lanes.set_ylim(-0.6, max(len(names), 1) - 0.4)
    lanes.invert_yaxis()
    lanes.set_xlabel("time since start (s)")
    lanes.grid(alpha=0.3, axis="x")
    ax.set_ylabel("burn rate (x budget)")
    ax.tick_params(labelbottom=False)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    return _svg(fig)


def replicas_svg(ratios: Mapping[str, Mapping[str, float]], *, flagged: Sequence[str] = ()) -> str:
    """Each replica's ratio to the fleet median, one group of bars per signal."""
    fig, ax = _figure()
    signals = list(ratios)
    replicas = sorted({r for per in ratios.values() for r in per})
    width = 0.8 / max(1, len(replicas))
    for i, replica in enumerate(replicas):
        xs = [j + i * width for j in range(len(signals))]
        ys = [ratios[s].get(replica, float("nan")) for s in signals]
        hatch = "//" if replica in flagged else None
        ax.bar(xs, ys, width=width, label=replica, hatch=hatch)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(replicas) - 1) / 2 for j in range(len(signals))])
    ax.set_xticklabels(signals)
    ax.set_ylabel("ratio to fleet median")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _svg(fig)


def tail_svg(components: Mapping[str, tuple[float, float]]) -> str:
    """Mean seconds per latency component, body against tail (stacked bars)."""
    fig, ax = _figure(width=6.0)
    bottom = [0.0, 0.0]
    for name, (body, tail) in components.items():
        ax.bar(["body", "tail"], [body, tail], bottom=bottom, label=name)
        bottom = [bottom[0] + body, bottom[1] + tail]
    ax.set_ylabel("mean seconds per request")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _svg(fig)


def table_html(rows: Sequence[Mapping[str, object]]) -> str:
    """A plain HTML table; columns from the first row."""
    if not rows:
        return "<p><em>none</em></p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Section:
    """One part of the report: a title, a sentence of findings, and raw HTML (plots, tables)."""

    title: str
    summary: str
    body: str


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
h1{font-size:1.6em} h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}
th{background:#f4f4f4} .summary{background:#f8f8ff;padding:.5em 1em;border-left:4px solid #66f}
svg{max-width:100%;height:auto}
"""


def render_html(title: str, intro: str, sections: Sequence[Section]) -> str:
    """The whole report as one self-contained HTML page."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>",
    ]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts.append(f"<p class='summary'>{html.escape(s.summary)}</p>")
        parts.append(s.body)
    parts.append("</body></html>")
    return "\n".join(parts)
