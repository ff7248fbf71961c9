"""`fleetwatch engine serve` as a real process: serves, answers, drains on SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleetwatch.engine_probe.engine import EngineConfigError
from fleetwatch.engine_probe.serve.command.cli import serve

_LAUNCH = (
    "import typer; from fleetwatch.engine_probe.serve.command.cli import serve; typer.run(serve)"
)


def test_serve_process_answers_and_drains_on_sigint() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, "--port", "0", "--num-blocks", "256", "--replicas", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        assert all("serving reference" in line for line in lines), lines
        urls = [line.split(" on ")[1].split()[0] for line in lines]
        assert "(replica-0-1)" in lines[1] and urls[0] != urls[1]
        url = urls[1]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
            assert json.loads(r.read())["status"] == "ok"
        body = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(
            f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 4
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            metrics = r.read()
        assert b"fleetwatch_http_responses_total" in metrics
        # No --goodput: no goodput counter (a counter stuck at 0 would burn goodput SLOs).
        assert b"fleetwatch_goodput_requests_total" not in metrics
        # The GPU sampler runs per replica: 1, or 0 with the reason on a host without a GPU.
        gpu = [x for x in metrics.splitlines() if x.startswith(b"fleetwatch_gpu_available{")]
        assert len(gpu) == 1 and b'replica="replica-0-1"' in gpu[0] and b"reason=" in gpu[0]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert "stopped (0 requests cut off" in out
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_rejects_a_bad_port() -> None:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve", "--port", "70000"])
    assert isinstance(result.exception, EngineConfigError)
    assert "--port" in str(result.exception)


@pytest.mark.parametrize("flag", ["--max-queue", "--max-lag", "--replicas"])
def test_serve_rejects_non_positive_limits(flag: str) -> None:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve", flag, "0"])
    assert isinstance(result.exception, EngineConfigError)
    assert flag in str(result.exception)


def test_serve_with_a_goodput_target_exports_the_goodput_counter() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, "--port", "0", "--num-blocks", "256", "--goodput", "30,30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" on ")[1].split()[0]
        body = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(
            f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 4
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        line = next(
            x for x in metrics.splitlines() if x.startswith("fleetwatch_goodput_requests_total{")
        )
        assert line.endswith(" 1.0"), line
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("value", ["0.5", "0.5,x", "0.5,0"])
def test_serve_rejects_a_malformed_goodput_target(value: str) -> None:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve", "--goodput", value])
    assert isinstance(result.exception, EngineConfigError)
    assert "--goodput" in str(result.exception)


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--model", "chat"], "--model"),
        (["--model", "a=default", "--model", "a=default"], "twice"),
        (["--model", "a=default", "--replicas", "2"], "--replicas"),
        (["--model-cache-bytes", "100"], "--model-cache-bytes needs --model"),
    ],
)
def test_serve_rejects_bad_model_flags(args: list[str], where: str) -> None:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve", *args])
    assert isinstance(result.exception, EngineConfigError)
    assert where in str(result.exception)


def test_serve_several_models_loads_on_demand_and_drains_on_sigint(tmp_path: Path) -> None:
    small = tmp_path / "small.json"
    small.write_text(
        json.dumps(
            {
                "vocab_size": 512,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
            }
        )
    )
    argv = ["--port", "0", "--num-blocks", "256", "--model", f"small={small}"]
    argv += ["--model", "ref=default"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving 2 models"), line
        url = line.split(" on ")[1].split()[0]
        body = json.dumps({"model": "small", "prompt": "hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(
            f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["model"] == "small"
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        loads = [
            x for x in metrics.splitlines() if x.startswith("fleetwatch_model_cache_loads_total{")
        ]
        assert any('model="small"' in x and x.endswith(" 1.0") for x in loads), loads
        assert any('model="ref"' in x and x.endswith(" 0.0") for x in loads), loads
        assert "fleetwatch_gpu_available{" in metrics
        assert 'fleetwatch_engine_startup_seconds{model="small",phase="warmup"' in metrics
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert out.rstrip().endswith("stopped")
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
