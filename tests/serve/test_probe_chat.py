"""The probe on the chat API: TTFT at the first content (not the role chunk), both APIs against the
real server with the model taken from ``/v1/models``, and its numbers beside the server's own
records of the same requests."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetwatch.cli import main
from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
from fleetwatch.engine_probe.probe.chat import chat_body
from fleetwatch.engine_probe.probe.client import Prober
from fleetwatch.engine_probe.probe.scripted_server import Script, ScriptedServer
from fleetwatch.records import read_records
from fleetwatch.telemetry.sink import MemoryRecordSink


def test_chat_ttft_is_the_first_content_not_the_role_chunk() -> None:
    script = Script(first_token_s=0.05, first_chunk_tokens=2, chunks=((0.0, 1), (0.0, 3)))

    async def go() -> tuple[Any, ScriptedServer]:
        server = ScriptedServer(script)
        url = await server.start()
        try:
            async with Prober(url, api="chat") as p:
                return await p.one(0, 0.0, chat_body("hello", 6)), server
        finally:
            await server.stop()

    r, server = asyncio.run(go())
    assert r.ok, r.error
    assert list(r.chunk_tokens) == [2, 1, 3]  # the role-only chunk carried no token
    assert r.output_tokens == 6 and r.tokens_from_usage
    assert r.first_token_s == r.chunk_times_s[0]
    # the role chunk went out before the first content; TTFT starts at the content
    assert server.role_sent[0] < server.emitted[0][0] <= r.first_token_s


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_probe_speaks_both_apis_to_the_server_and_finds_the_model(
    kit: Any, tmp_path: Path, api: str
) -> None:
    sink = MemoryRecordSink()
    out, recs = tmp_path / "run.json", tmp_path / "run.jsonl"
    with kit.live_server(kit.make_engine(), record_sink=sink) as h:
        argv = ["probe", "run", h.url, "--api", api, "-c", "2", "-n", "6"]
        argv += ["--prompt-tokens", "12", "--max-tokens", "5", "--no-progress"]
        assert main([*argv, "--json", str(out), "--records", str(recs)]) == 0
        h.instrumentation.flush(10)
    data = json.loads(out.read_text())
    assert data["plan"]["api"] == api and data["plan"]["model"] == "reference"
    assert data["levels"][0]["ok"] == 6
    df = read_records(recs)
    assert (df["model"] == "reference").all() and (df["output_tokens"] == 5).all()
    served = [r for r in sink.records if r.status == "ok"]
    assert len(served) == 6
    prefix = "chatcmpl-" if api == "chat" else "cmpl-"
    assert all(r.request_id.startswith(prefix) for r in served)
    # token counts come from usage: the chat template's tokens are in the prompt count
    assert sorted(df["prompt_tokens"]) == sorted(r.prompt_tokens for r in served)


AGREE_MODEL = ModelConfig(
    num_layers=4,
    hidden_size=256,
    intermediate_size=512,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=512,
    max_position_embeddings=1024,
)


def test_probe_chat_numbers_bracket_the_servers_records(kit: Any, tmp_path: Path) -> None:
    """The same requests seen from both ends: the same requests and tokens, and each interval the
    probe times holds the server's (the client sends first and hears last), so the probe's TTFT
    and end-to-end p50 are never below the records' and its output tokens/s never above. How
    close the two come is a measurement: ``python -m benchmarks serve`` (probe against records)."""
    sink = MemoryRecordSink()
    engine = LLMEngine(AGREE_MODEL, EngineConfig(num_blocks=512, max_num_seqs=8, device="cpu"))
    out, recs = tmp_path / "run.json", tmp_path / "run.jsonl"
    with kit.live_server(engine, record_sink=sink) as h:
        # the probe as users run it: its own process
        argv = ["probe", "run", h.url, "--api", "chat", "-c", "4", "-n", "16"]
        argv += ["--prompt-tokens", "32", "--max-tokens", "48", "--no-progress"]
        argv += ["--json", str(out), "--records", str(recs)]
        done = subprocess.run(
            [sys.executable, "-m", "fleetwatch", *argv],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        h.instrumentation.flush(10)
    level = json.loads(out.read_text())["levels"][0]
    probe = read_records(recs)
    server = [r for r in sink.records if r.status == "ok"]
    assert level["ok"] == len(server) == len(probe) == 16
    assert sum(r.output_tokens for r in server) == int(probe["output_tokens"].sum()) == 16 * 48
    assert sorted(probe["prompt_tokens"]) == sorted(r.prompt_tokens for r in server)

    # one probe request per record: the order statistics keep each pair's order
    span = max(r.finished_s for r in server) - min(r.arrival_s for r in server)
    server_tps = sum(r.output_tokens for r in server) / span
    server_ttft = float(np.median([r.ttft_s for r in server]))
    server_e2e = float(np.median([r.e2e_s for r in server]))
    assert level["ttft"]["p50"] >= server_ttft
    assert level["e2e"]["p50"] >= server_e2e
    assert level["output_tokens_per_s"] <= server_tps
