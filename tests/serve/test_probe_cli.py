"""`fleetwatch probe run`: sweeps, outputs (JSON, CSV, records), errors; arrivals; capacity."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.cli import main
from fleetwatch.engine_probe.probe.arrivals import (
    constant_arrivals,
    gamma_arrivals,
    poisson_arrivals,
)
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.stats import RunSummary, SLOTargets, capacity, distribution
from fleetwatch.engine_probe.serve.wire.chat_template import ChatMessage, render_chat
from fleetwatch.records import read_records


@pytest.mark.parametrize("argv", [["--engine", "reference"], ["run", "--engine", "reference"]])
def test_probe_without_run_means_run(tmp_path: Path, argv: list[str]) -> None:
    out = tmp_path / "run.json"
    common = ["-c", "2", "-n", "2", "--prompt-tokens", "8", "--max-tokens", "4", "--no-progress"]
    assert main(["probe", *argv, *common, "--json", str(out)]) == 0
    assert [lv["ok"] for lv in json.loads(out.read_text())["levels"]] == [2]


def test_probe_bound_is_still_a_subcommand_and_bad_flags_exit_2() -> None:
    assert main(["probe", "bound", "--help"]) == 0
    assert main(["probe", "--no-such-flag"]) == 2


def test_probe_run_in_process_writes_json_csv_and_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    rc = main(
        [
            "probe",
            "run",
            "--engine",
            "reference",
            "-c",
            "1,3",
            "-n",
            "6",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "8",
            "--gpu",
            "H100-SXM",
            "--no-progress",
            "--json",
            str(out),
            "--csv",
            str(tmp_path / "run.csv"),
            "--records",
            str(tmp_path / "run.jsonl"),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    assert [lv["label"] for lv in data["levels"]] == ["c=1", "c=3"]
    assert all(lv["ok"] == 6 for lv in data["levels"])
    assert data["levels"][0]["ttft"]["n"] == 6
    assert data["levels"][0]["itl"]["n"] == 6 * 7
    assert 0 < data["levels"][0]["bound_fraction"] < 1
    assert data["capacity"] == 3 and data["capacity_unit"] == "concurrency"
    rows = list(csv.DictReader((tmp_path / "run.csv").open()))
    assert len(rows) == 2 and float(rows[1]["ttft_p99"]) > 0
    df = read_records(tmp_path / "run.jsonl")
    assert len(df) == 12
    # --api chat (the default): the chat template's tokens count in the prompt, as usage says
    templated = len(render_chat([ChatMessage("user", "x" * 16)]).encode())
    assert (df["output_tokens"] == 8).all() and (df["prompt_tokens"] == templated).all()
    assert df["intended_s"].notna().all()
    assert df["scheduled_s"].notna().all()  # from the server's reported queue time
    assert (df["queue_s"] >= 0).all() and (df["queue_s"] <= df["ttft_s"]).all()
    assert (df["tpot_s"] > 0).all()
    assert "capacity" in capsys.readouterr().out


def test_probe_run_open_loop_gamma(tmp_path: Path) -> None:
    out = tmp_path / "open.json"
    rc = main(
        [
            "probe",
            "run",
            "--engine",
            "reference",
            "--rate",
            "40",
            "--arrivals",
            "gamma",
            "--burstiness",
            "0.5",
            "-n",
            "8",
            "--prompt-tokens",
            "8",
            "--max-tokens",
            "4",
            "--no-progress",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["plan"]["mode"] == "gamma" and data["capacity_unit"] == "requests/s"
    assert data["levels"][0]["requests"] == 8


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["probe", "run"], "either a URL or --engine"),
        (
            ["probe", "run", "http://127.0.0.1:1", "--engine", "reference"],
            "either a URL or --engine",
        ),
        (["probe", "run", "--engine", "vllm"], "only 'reference'"),
        (["probe", "run", "--engine", "reference", "-c", "1", "-r", "2"], "not both"),
        (["probe", "run", "--engine", "reference", "-c", "two"], "--concurrency"),
        (["probe", "run", "--engine", "reference", "-c", "1.5"], "whole number"),
        (["probe", "run", "--engine", "reference", "-r", "0"], "> 0"),
        (
            ["probe", "run", "--engine", "reference", "-r", "1", "--arrivals", "uniform"],
            "--arrivals",
        ),
        (["probe", "run", "http://127.0.0.1:1", "--gpu", "H100"], "--config"),
        (["probe", "run", "http://127.0.0.1:1", "-H", "no colon"], "--header"),
        (["probe", "run", "http://127.0.0.1:1", "--warmup", "-1"], "--warmup"),
    ],
)
def test_probe_run_bad_input_is_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_unreachable_endpoint_counts_errors_and_exits_2_naming_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "down.json"
    assert (
        main(
            [
                "probe",
                "run",
                "http://127.0.0.1:9",
                "-c",
                "1",
                "-n",
                "2",
                "--no-progress",
                "--json",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "all 2 requests failed: " in err and "(x2)" in err
    data = json.loads(out.read_text())
    assert data["levels"][0]["ok"] == 0 and data["levels"][0]["errors"] == 2
    assert data["capacity"] is None


def test_arrival_processes_have_the_asked_rate_and_burstiness() -> None:
    rng = np.random.default_rng(0)
    p = np.diff(poisson_arrivals(10.0, 20000, rng=rng))
    assert p.mean() == pytest.approx(0.1, rel=0.03)
    assert p.std() / p.mean() == pytest.approx(1.0, rel=0.05)
    g = np.diff(gamma_arrivals(10.0, 20000, burstiness=0.25, rng=rng))
    assert g.mean() == pytest.approx(0.1, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.08)
    assert constant_arrivals(4.0, 3) == [0.0, 0.25, 0.5]
    assert poisson_arrivals(5.0, 10, rng=np.random.default_rng(1)) == poisson_arrivals(
        5.0, 10, rng=np.random.default_rng(1)
    )
    with pytest.raises(ProbeError):
        gamma_arrivals(1.0, 3, burstiness=0, rng=rng)


def _summary(load: float, attainment: float) -> RunSummary:
    d = distribution([])
    return RunSummary(
        f"{load}",
        "poisson",
        load,
        None,
        10,
        10,
        0,
        0,
        1.0,
        1.0,
        1.0,
        d,
        d,
        d,
        d,
        d,
        d,
        d,
        1.0,
        attainment,
        SLOTargets(),
    )


def test_capacity_is_the_highest_load_with_90_percent_meeting_both_and_all_below_too() -> None:
    assert capacity([_summary(1, 1.0), _summary(2, 0.95), _summary(4, 0.8), _summary(8, 0.91)]) == 2
    assert capacity([_summary(1, 0.5)]) is None
    assert capacity([_summary(1, 0.9)]) == 1


def test_percentiles_interpolate_and_empty_is_nan() -> None:
    d = distribution([float(i) for i in range(1, 1001)])
    assert d.p50 == pytest.approx(500.5)
    assert d.p999 == pytest.approx(999.001)
    assert d.n == 1000 and d.max == 1000
    assert np.isnan(distribution([]).p99)


def test_probe_records_feed_fleet_tail_and_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = []
    for name, conc in (("a", "1"), ("b", "4")):
        path = tmp_path / f"{name}.jsonl"
        argv = [
            "probe",
            "run",
            "--engine",
            "reference",
            "-c",
            conc,
            "-n",
            "24",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "6",
            "--no-progress",
            "--records",
            str(path),
        ]
        assert main(argv) == 0
        runs.append(str(path))
    capsys.readouterr()
    assert main(["fleet", "tail", runs[1], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["fleet", "compare", runs[0], runs[1], "--json", "--draws", "200"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_warmup_is_not_counted_and_headers_reach_the_server(tmp_path: Path) -> None:
    import asyncio
    import threading

    from fleetwatch.engine_probe.probe.scripted_server import Script, ScriptedServer

    loop = asyncio.new_event_loop()
    server = ScriptedServer(Script(chunks=((0.0, 1),)))
    url = loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        out = tmp_path / "w.json"
        argv = [
            "probe",
            "run",
            url,
            "-c",
            "1",
            "-n",
            "3",
            "--warmup",
            "2",
            "--no-progress",
            "-H",
            "Authorization: Bearer s3cret",
            "--json",
            str(out),
        ]
        assert main(argv) == 0
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
    data = json.loads(out.read_text())
    assert data["levels"][0]["requests"] == 3 and data["plan"]["warmup"] == 2
    assert len(server.arrived) == 5
    assert all(h.get("Authorization") == "Bearer s3cret" for h in server.headers)
    assert "s3cret" not in out.read_text()
