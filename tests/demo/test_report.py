"""The report's plots and page: pure functions from values to SVG/HTML text."""

from __future__ import annotations

from fleetwatch.demo.report import (
    Section,
    burn_rate_svg,
    latency_throughput_svg,
    render_html,
    replicas_svg,
    table_html,
    tail_svg,
)


def test_every_plot_is_inline_svg() -> None:
    plots = [
        latency_throughput_svg([(100.0, 0.01, 0.02), (300.0, 0.02, 0.03)], bound=[(1e3, 1e-3)]),
        burn_rate_svg(
            [0.0, 1.0, 2.0],
            {"burn 1m": [0.0, None, 20.0]},
            alert_intervals=[(1.0, 2.0, "Page")],
            threshold=14.4,
            marks=[(0.5, 1.5, "error burst")],
            extra={"Prometheus": [(0.0, 0.0), (2.0, 10.0)]},
        ),
        replicas_svg({"tpot": {"r0": 1.0, "r1": 3.0}}, flagged=["r1"]),
        tail_svg({"queue": (0.1, 0.2), "decode": (0.3, 1.5)}),
    ]
    for svg in plots:
        assert svg.startswith("<svg")
        assert svg.rstrip().endswith("</svg>")


def test_burn_plot_names_each_alert_lane() -> None:
    svg = burn_rate_svg(
        [0.0, 1.0],
        {"burn 5s": [0.0, 1.0]},
        alert_intervals=[
            (0.0, 1.0, "SLOAvailabilityFastBurn"),
            (0.0, 1.0, "SLOAvailabilitySlowBurn"),
        ],
    )
    assert "SLOAvailabilityFastBurn" in svg and "SLOAvailabilitySlowBurn" in svg


def test_table_escapes_cells_and_formats_floats() -> None:
    text = table_html([{"name": "<b>", "value": 1.234567}])
    assert "&lt;b&gt;" in text and "<b>" not in text
    assert "1.235" in text
    assert table_html([]) == "<p><em>none</em></p>"


def test_page_escapes_titles_and_keeps_section_bodies() -> None:
    page = render_html("t <1>", "intro & more", [Section("A & B", "s < t", "<svg>x</svg>")])
    assert page.startswith("<!doctype html>")
    assert "t &lt;1&gt;" in page and "intro &amp; more" in page
    assert "A &amp; B" in page and "s &lt; t" in page
    assert "<svg>x</svg>" in page
