"""Shutdown within a deadline: telemetry export and ``detach()`` are bounded whatever the span
collector does, failures are counted and never raised, and `engine serve` exits on SIGTERM within
``EXIT_BOUND_S`` (10 s; with nothing in flight: the telemetry timeout of 3 s, then the
interpreter's teardown, about 1-2 s with torch loaded).

The collector is a black hole: a loopback socket that accepts connections and never answers, so
the OTLP exporter waits on its own timeout (10 s) and retries.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.records import read_records
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.sink import MemoryRecordSink

EXIT_BOUND_S = 10.0


@pytest.fixture
def black_hole() -> Iterator[str]:
    """The URL of a collector that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_detach_is_bounded_counts_the_stuck_export_and_never_raises(
    black_hole: str, tools: Any
) -> None:
    engine = tools.small_engine()
    sink = MemoryRecordSink()
    inst = instrument(
        engine,
        registry=CollectorRegistry(),
        record_sink=sink,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": black_hole},
    )
    engine.generate([[1, 2, 3], [4, 5, 6, 7]], max_tokens=4)  # two spans for the black hole
    t0 = time.monotonic()
    ok = inst.detach(timeout=1.0)
    took = time.monotonic() - t0
    assert took < 1.0 + 2.0, took  # the deadline plus thread scheduling on a loaded box
    assert ok is False and inst.shutdown_failures == {"spans": 1}
    assert [r.request_id for r in sink.records] == [f"{engine.replica}-{i}" for i in range(2)]
    assert inst.detach() is True  # a second detach is a no-op


def test_sigterm_exits_within_the_deadline_with_a_black_hole_collector(
    serve_process: Any, black_hole: str, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    server = serve_process(
        "--records",
        str(records),
        "--records-flush-interval",
        "3600",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": black_hole, "OTEL_EXPORTER_OTLP_TIMEOUT": "30"},
    )
    ids = set()
    for i in range(6):
        _, body = server.post("/v1/completions", {"prompt": [3, 1, 4, i], "max_tokens": 3})
        ids.add(json.loads(body)["id"])
    t0 = time.monotonic()
    server.signal(signal.SIGTERM)
    code = server.wait(60)
    took = time.monotonic() - t0
    print(f"SIGTERM to exit: {took:.2f} s (bound {EXIT_BOUND_S} s)")
    assert code == 0
    assert took < EXIT_BOUND_S, took
    log = server.log.read_text()
    assert "telemetry detach: spans" in log and "Traceback" not in log, log
    on_disk = {
        rid for p in records.glob("records-*.jsonl") for rid in read_records(p)["request_id"]
    }
    assert on_disk == ids
