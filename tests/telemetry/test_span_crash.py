"""Span files under SIGKILL, tested from outside the writing process.

A writer process exports batches of spans through ``JsonLinesSpanExporter`` (small files, so it
rotates often) and says on stdout which batch it starts and when each export returned. The test
kills it with SIGKILL after a random number of exports, 50 times, and then reads the files: every
file is whole, the spans read are exactly the first ones written, in order, and the number lost
is 0 or the one batch in flight (the bound ``telemetry/spans/jsonl.py`` states). Each writer is
forked from one helper process that has already imported the exporter, so 50 kills take seconds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.telemetry.spans.jsonl import JsonLinesSpanExporter, read_spans, span_files

ROOT = Path(__file__).resolve().parents[2]
RUNS = 50
MAX_BYTES = 16 << 10
MAX_BATCH = 64

# The helper: for each "<dir> <seed>" line on stdin, fork a writer, wait for its death and report
# it. The writer says its pid, then "next <n>" before each export and "ack <total>" after it
# returned; each line is one write(2), so it is never torn.
HELPER = f"""
import json, os, random, sys
from fleetwatch.telemetry.spans.jsonl import JsonLinesSpanExporter

class Span:
    def __init__(self, i):
        self.i = i
    def to_json(self, indent=None):
        return json.dumps({{"name": "s", "i": self.i, "pad": "x" * 200}})

def say(text):
    os.write(1, (text + "\\n").encode())

def write(path, seed):
    say(f"pid {{os.getpid()}}")
    rng = random.Random(seed)
    exporter = JsonLinesSpanExporter(path, max_bytes={MAX_BYTES}, backups=100000)
    total = 0
    for _ in range(5000):
        n = rng.randint(1, {MAX_BATCH})
        say(f"next {{n}}")
        if exporter.export([Span(total + k) for k in range(n)]).name != "SUCCESS":
            say("failed")
            return
        total += n
        say(f"ack {{total}}")

for line in sys.stdin:
    folder, seed = line.split()
    pid = os.fork()
    if pid == 0:
        try:
            write(os.path.join(folder, "spans.jsonl"), int(seed))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    say(f"dead {{pid}}")
"""


class _Span:
    def __init__(self, i: int) -> None:
        self.i = i

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({"name": "s", "i": self.i})


def _kill_one(
    helper: subprocess.Popen[bytes], folder: Path, seed: int, after: int
) -> tuple[int, int]:
    """Start a writer, SIGKILL it once ``after`` exports returned; (spans acknowledged, spans in
    the export that was running when it died)."""
    assert helper.stdin is not None and helper.stdout is not None
    helper.stdin.write(f"{folder} {seed}\n".encode())
    helper.stdin.flush()
    kind, pid = helper.stdout.readline().split()
    assert kind == b"pid"
    acked = inflight = exports = 0
    killed = False
    while True:
        words = helper.stdout.readline().split()
        assert words, "the helper died"
        if words[0] == b"next":
            inflight = int(words[1])
        elif words[0] == b"ack":
            acked, inflight, exports = int(words[1]), 0, exports + 1
        elif words[0] == b"dead":
            assert killed, "the writer stopped before it was killed"
            return acked, inflight
        else:
            raise AssertionError(f"writer said {words!r}")
        if exports >= after and not killed:
            os.kill(int(pid), signal.SIGKILL)
            killed = True


@pytest.fixture
def helper() -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HELPER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the helper and a writer still running, if any
        proc.wait(timeout=60)


@pytest.mark.slow
def test_sigkill_50_times_loses_at_most_the_batch_in_flight(
    helper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    rng = random.Random(19)
    lost_batches = temp_left = rotations = 0
    for run in range(RUNS):
        folder = tmp_path / f"run{run:02d}"
        folder.mkdir()
        acked, inflight = _kill_one(helper, folder, seed=run, after=rng.randint(1, 40))
        found = read_spans(folder / "spans.jsonl")
        # every sealed and live file is whole: nothing to skip, nothing out of order
        assert found.skipped == 0, run
        assert [s["i"] for s in found.spans] == list(range(len(found.spans))), run
        # the loss bound: every acknowledged span is there; at most the batch in flight is not
        assert len(found.spans) in (acked, acked + inflight), (run, acked, inflight)
        lost_batches += len(found.spans) == acked and inflight > 0
        temps = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
        assert all(t.startswith(".spans.jsonl.") for t in temps), temps
        temp_left += bool(temps)
        rotations += len(found.files) - 1
        # a restarted exporter removes what the killed one left and carries on after it
        exporter = JsonLinesSpanExporter(folder / "spans.jsonl", max_bytes=MAX_BYTES)
        assert exporter.export([_Span(len(found.spans))]).name == "SUCCESS"  # type: ignore[list-item]
        again = [s["i"] for s in read_spans(folder / "spans.jsonl").spans]
        # contiguous and ending with the new span (a rotation may retire the oldest sealed file)
        assert again == list(range(again[0], len(found.spans) + 1)), run
        assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    print(f"{RUNS} kills: {lost_batches} lost the batch in flight, {temp_left} left a temp file")
    assert rotations > RUNS  # the kills also landed in logs that had rotated


def test_a_cut_last_line_is_skipped_by_the_reader_and_dropped_on_restart(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b'{"i": 0}\n{"i": 1}\n{"i": 2, "na')  # an appending writer died here
    found = read_spans(path)
    assert [s["i"] for s in found.spans] == [0, 1] and found.skipped == 1
    exporter = JsonLinesSpanExporter(path)
    assert exporter.export([_Span(2)]).name == "SUCCESS"  # type: ignore[list-item]
    assert exporter.repaired == 1
    assert path.read_bytes().endswith(b"\n")
    assert [s["i"] for s in read_spans(path).spans] == [0, 1, 2]


def test_rotation_seals_files_in_order_and_keeps_backups(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(path, max_bytes=40, backups=2)  # 3 spans a file
    for i in range(10):
        exporter.export([_Span(i)])  # type: ignore[list-item]
    names = [p.name for p in span_files(path)]
    assert names == ["spans.jsonl.2", "spans.jsonl.1", "spans.jsonl"]
    # oldest first, in order; the first file [0, 1, 2] passed the two backups kept
    assert [s["i"] for s in read_spans(path).spans] == [3, 4, 5, 6, 7, 8, 9]


def test_a_failed_write_drops_only_that_batch(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    exporter = JsonLinesSpanExporter(blocker / "spans.jsonl")
    assert exporter.export([_Span(0)]).name == "FAILURE"  # type: ignore[list-item]
    path = tmp_path / "ok" / "spans.jsonl"
    ok = JsonLinesSpanExporter(path)
    ok.export([_Span(0)])  # type: ignore[list-item]
    path.parent.chmod(0o500)
    try:
        result = ok.export([_Span(1)])  # type: ignore[list-item]
    finally:
        path.parent.chmod(0o700)
    if result.name == "FAILURE":  # (root writes anyway)
        assert [s["i"] for s in read_spans(path).spans] == [0]
    ok.export([_Span(2)])  # type: ignore[list-item]
    assert [s["i"] for s in read_spans(path).spans][-1] == 2
