"""Bad input, every sub-command: one line on stderr, exit 2, nothing on stdout, no file written.

The table walks each sub-command of ``fleetwatch`` through the kinds of bad input that apply to
it (``KINDS``); ``NOT_APPLICABLE`` says why a kind does not apply to a command, and
``test_the_table_covers_every_sub_command_and_kind`` fails when a command, or a kind for a
command, has neither a row nor a reason. Every command runs in-process through ``main``; the
work a command would start after its checks (serving, probing, running the engine or the demo)
is replaced by a guard that fails the row, so a check that comes too late shows as a failure
instead of a hang.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import typer

from fleetwatch.cli import app, main
from tests.bad_input_tree import bad_input_tree  # noqa: F401  (fixture "tree")

ROOT = Path(__file__).resolve().parents[1]

# Kinds of bad input: a missing path, a directory where a file belongs, a file where a directory
# belongs, an output that cannot be written, an empty input, a garbage input, a number out of
# range, a malformed URL, and a missing optional extra (torch).
KINDS = (
    "missing",
    "dir-for-file",
    "file-for-dir",
    "unwritable",
    "empty",
    "garbage",
    "range",
    "url",
    "extra",
)


class Row(NamedTuple):
    command: str
    kind: str
    argv: str
    needle: str
    no_torch: bool = False


def _rows() -> list[Row]:
    rows: list[Row] = []

    def add(command: str, kind: str, argv: str, needle: str, *, no_torch: bool = False) -> None:
        rows.append(Row(command, kind, argv, needle, no_torch))

    # records validate
    c = "records validate"
    add(c, "missing", "records validate {T}/missing.jsonl", "missing.jsonl: no such file")
    add(c, "dir-for-file", "records validate {T}/dir", "is a directory")
    add(c, "empty", "records validate {T}/empty.jsonl", "--allow-empty")
    add(c, "garbage", "records validate {T}/garbage.jsonl", "not valid JSON")
    add(c, "garbage", "records validate {T}/garbage.parquet", "not a readable Parquet")
    # records compact (--min-age 0s: the tree's files were written just now)
    c = "records compact"
    add(c, "missing", "records compact {T}/missing --out {T}/out", "missing: no such file")
    add(c, "file-for-dir", "records compact {T}/good.jsonl --out {T}/file.txt", "a folder")
    add(c, "unwritable", "records compact {T}/good.jsonl --out {T}/file.txt/o", "not a directory")
    add(c, "garbage", c + " {T}/garbage.jsonl --out {T}/out --min-age 0s", "not valid JSON")
    add(c, "garbage", c + " {T}/garbage.parquet --out {T}/out --min-age 0s", "not a readable")
    add(c, "range", "records compact {T}/good.jsonl --out {T}/out --target-rows 0", "--target-rows")
    add(c, "range", "records compact {T}/good.jsonl --out {T}/out --min-age soon", "--min-age")
    add(c, "url", "records compact {T}/good.jsonl --out s3://bucket/records", "give --state")
    add(c, "url", c + " {T}/good.jsonl --out nosuch://x --state {T}/st", "cannot open this")
    # records prune
    c = "records prune"
    add(c, "missing", "records prune {T}/missing --older-than 7d", "missing: no such folder")
    add(c, "file-for-dir", "records prune {T}/file.txt --older-than 7d", "this is a file")
    add(c, "range", "records prune {T} --older-than 7x", "--older-than must be a duration")
    add(c, "url", "records prune s3://bucket/records --older-than 7d", "lifecycle rule")
    # telemetry gpu
    c = "telemetry gpu"
    add(c, "range", "telemetry gpu --interval 0", "--interval")
    add(c, "range", "telemetry gpu --count -1", "--count")
    # slo validate
    c = "slo validate"
    add(c, "missing", "slo validate {T}/missing.yaml", "missing.yaml")
    add(c, "dir-for-file", "slo validate {T}/dir", "dir: cannot read spec")
    add(c, "empty", "slo validate {T}/empty.yaml", "spec is empty")
    add(c, "garbage", "slo validate {T}/garbage.yaml", "garbage.yaml: line 1")
    add(c, "range", "slo validate {T}/objective.yaml", "slos[0].objective")
    add(c, "range", "slo validate {T}/threshold.yaml", "not a ttft bucket")
    # slo rules
    c = "slo rules"
    add(c, "missing", "slo rules {T}/missing.yaml -o {T}/out/r.yaml", "missing.yaml")
    add(c, "dir-for-file", "slo rules {SPEC} -o {T}/dir", "is a directory, not a file")
    add(c, "dir-for-file", "slo rules {SPEC} -o {T}/x.yaml", "x.test.yaml")
    add(c, "unwritable", "slo rules {SPEC} -o {T}/file.txt/r.yaml", "not a directory")
    add(c, "empty", "slo rules {T}/empty.yaml -o {T}/out/r.yaml", "spec is empty")
    add(c, "garbage", "slo rules {T}/garbage.yaml -o {T}/out/r.yaml", "line 1")
    add(c, "range", "slo rules {T}/objective.yaml -o {T}/out/r.yaml", "objective")
    add(c, "missing", "slo rules {SPEC} -o {T}/r.yaml --labels {T}/missing.yaml", "missing.yaml")
    add(c, "dir-for-file", "slo rules {SPEC} -o {T}/r.yaml --labels {T}/dir", "is a directory")
    add(c, "garbage", "slo rules {SPEC} -o {T}/r.yaml --labels {T}/garbage.yaml", "not YAML")
    # slo report / backtest
    for c in ("slo report", "slo backtest"):
        add(c, "missing", c + " {SPEC} --records {T}/missing.jsonl", "no such file")
        add(c, "dir-for-file", c + " {SPEC} --records {T}/dir", "dir: is a directory holding no")
        add(c, "missing", c + " {SPEC} --records {T}/*.nothing", "match this pattern")
        add(
            c,
            "garbage",
            c + " {SPEC} --records {T}/good.jsonl --records {T}/garbage.parquet",
            "garbage.parquet: not a readable Parquet file",
        )
        add(c, "garbage", c + " {SPEC} --records {T}/file.txt", "unknown record format")
        add(c, "empty", c + " {SPEC} --records {T}/empty.jsonl", "no records")
        add(c, "garbage", c + " {SPEC} --records {T}/garbage.jsonl", "not valid JSON")
        add(c, "garbage", c + " {T}/garbage.yaml --records {T}/good.jsonl", "line 1")
        add(
            c,
            "range",
            c + " {T}/objective.yaml --records {T}/good.jsonl",
            "objective",
        )
        # a selector that matches nothing names itself and the values present
        add(c, "empty", c + " {SPEC} --records {T}/good.jsonl", "values present: 'default'")
        # a dataset filter: a malformed time, and one that keeps no record
        add(c, "range", c + " {SPEC} --records {T}/good.jsonl --since -1x", "--since '-1x'")
        add(c, "empty", c + " {SPEC} --records {T}/good.jsonl --model nope", "no records match")
    # fleet outliers
    c = "fleet outliers"
    add(c, "missing", "fleet outliers {T}/missing.jsonl", "missing.jsonl")
    add(c, "missing", "fleet outliers --metrics-dir {T}/nowhere", "no such directory")
    add(c, "missing", "fleet outliers {T}/good.jsonl --fingerprints {T}/no.json", "no.json")
    add(c, "dir-for-file", "fleet outliers {T}/dir", "dir: is a directory holding no")
    add(c, "missing", "fleet outliers {T}/*.nothing", "*.nothing: no record files")
    add(c, "garbage", "fleet outliers {T}", "garbage.jsonl, row 1: not valid JSON")
    add(c, "file-for-dir", "fleet outliers --metrics-dir {T}/file.txt", "not a directory")
    add(c, "empty", "fleet outliers {T}/empty.jsonl", "no records")
    add(c, "range", "fleet outliers {T}/good.jsonl --until 2026-12-01T10:00", "needs a zone")
    add(c, "empty", "fleet outliers {T}/good.jsonl --replica nope", "no records match")
    add(c, "garbage", "fleet outliers {T}/garbage.jsonl", "not valid JSON")
    add(c, "garbage", "fleet outliers {T}/good.jsonl --fingerprints {T}/garbage.json", "JSON")
    add(c, "range", "fleet outliers {T}/good.jsonl --min-requests -5", "-5")
    add(c, "range", "fleet outliers {T}/good.jsonl --quantile 1.5", "--quantile")
    add(c, "range", "fleet outliers {T}/good.jsonl --noise-shape heavy", "--noise-shape")
    add(c, "range", "fleet outliers --prometheus http://h:9 --window 0m", "--window")
    add(c, "url", "fleet outliers --prometheus notaurl", "'notaurl'")
    add(c, "url", "fleet outliers --prometheus http://", "--prometheus")
    add(c, "url", "fleet outliers --prometheus http://h:99999", "out of range")
    # fleet tail / compare
    c = "fleet canary"
    fc = 'fleet canary --prometheus http://h:9 --canary pod="c" --baseline pod="b"'
    add(c, "missing", f"{fc} --labels {{T}}/missing.yaml", "missing.yaml")
    add(c, "dir-for-file", f"{fc} --labels {{T}}/dir", "dir")
    add(c, "dir-for-file", f"{fc} --json {{T}}/dir", "is a directory")
    add(c, "unwritable", f"{fc} --json {{T}}/file.txt/c.json", "not a dir")
    add(c, "missing", f"{fc} --fingerprint {{T}}/missing.json", "missing.json")
    add(c, "dir-for-file", f"{fc} --fingerprint {{T}}/dir", "dir")
    add(c, "garbage", f"{fc} --fingerprint {{T}}/garbage.json", "not a JSON file")
    add(c, "empty", f"{fc} --fingerprint {{T}}/empty.json", "not a JSON file")
    add(c, "garbage", f"{fc} --fingerprint {{T}}/llama8b.json", "not a fingerprint file")
    add(c, "garbage", f"{fc} --labels {{T}}/garbage.yaml", "garbage.yaml")
    add(
        c,
        "garbage",
        'fleet canary --prometheus http://h:9 --canary pod= --baseline pod="b"',
        "--canary",
    )
    add(
        c,
        "garbage",
        'fleet canary --prometheus http://h:9 --canary pod="b" --baseline pod="b"',
        "same series",
    )
    add(
        c,
        "garbage",
        'fleet canary --prometheus http://h:9 --canary pod="c",x --baseline pod="b"',
        "label matchers",
    )
    add(c, "range", f"{fc} --window 0m", "--window")
    add(c, "range", f"{fc} --min-requests 0", "--min-requests")
    add(c, "range", f"{fc} --alpha 0.7", "--alpha")
    add(c, "range", f"{fc} --min-effect 0", "--min-effect")
    add(c, "range", f"{fc} --confidence 1", "--confidence")
    add(c, "range", f"{fc} --max-error-rise 0", "--max-error-rise")
    add(c, "range", f"{fc} --max-error-rise 150", "percentage points")
    add(
        c,
        "url",
        'fleet canary --prometheus notaurl --canary pod="c" --baseline pod="b"',
        "'notaurl'",
    )
    add(
        c,
        "url",
        'fleet canary --prometheus http://h:99999 --canary pod="c" --baseline pod="b"',
        "range",
    )
    c = "fleet tail"
    add(c, "missing", "fleet tail {T}/missing.jsonl", "no such file")
    add(c, "dir-for-file", "fleet tail {T}/dir", "dir: is a directory holding no record files")
    add(c, "missing", "fleet tail {T}/good.jsonl {T}/r/**/*.jsonl", "match this pattern")
    add(c, "garbage", "fleet tail {T}", "garbage.jsonl, row 1: not valid JSON")
    add(c, "garbage", "fleet tail {T}/file.txt", "file.txt: unknown record format")
    add(c, "range", "fleet tail {T}/good.jsonl --percentile 90 --percentile 99", "given 2 times")
    add(c, "empty", "fleet tail {T}/empty.jsonl", "got 0")
    add(c, "garbage", "fleet tail {T}/garbage.jsonl", "not valid JSON")
    add(c, "range", "fleet tail {T}/good.jsonl --since yesterday", "--since 'yesterday'")
    add(c, "range", "fleet tail {T}/good.jsonl --since 2000 --until 1000", "is after --until")
    add(c, "empty", "fleet tail {T}/good.jsonl --model nope", "no records match --model nope")
    add(c, "range", "fleet tail {T}/good.jsonl --percentile 150", "percentile")
    c = "fleet compare"
    add(c, "missing", "fleet compare {T}/good.jsonl {T}/missing.jsonl", "no such file")
    add(c, "dir-for-file", "fleet compare {T}/dir {T}/good.jsonl", "is a directory holding no")
    add(c, "missing", "fleet compare {T}/good.jsonl {T}/*.nothing", "match this pattern")
    add(c, "garbage", "fleet compare {T}/good.jsonl {T}", "garbage.jsonl, row 1: not valid")
    add(c, "empty", "fleet compare {T}/empty.jsonl {T}/good.jsonl", "no usable records")
    add(c, "garbage", "fleet compare {T}/good.jsonl {T}/garbage.jsonl", "not valid JSON")
    add(c, "empty", "fleet compare {T}/good.jsonl {T}/good.jsonl --traffic-class x", "match")
    add(c, "range", "fleet compare {T}/good.jsonl {T}/good.jsonl --draws 5", "5")
    add(c, "range", "fleet compare {T}/good.jsonl {T}/good.jsonl --confidence 2", "2")
    # fleet rules
    c = "fleet rules"
    add(c, "dir-for-file", "fleet rules -o {T}/dir", "is a directory, not a file")
    add(c, "dir-for-file", "fleet rules -o {T}/r.yaml --test-file {T}/dir", "dir")
    add(c, "unwritable", "fleet rules -o {T}/file.txt/r.yaml", "not a directory")
    add(c, "range", "fleet rules -o {T}/r.yaml --window banana", "--window")
    add(c, "range", "fleet rules -o {T}/r.yaml --for 0s", "--for")
    add(c, "missing", "fleet rules -o {T}/r.yaml --labels {T}/missing.yaml", "missing.yaml")
    add(c, "garbage", "fleet rules -o {T}/r.yaml --labels {T}/garbage.yaml", "not YAML")
    add(c, "garbage", "fleet rules -o {T}/r.yaml --labels {T}/probe.json", "unknown key 'plan'")
    # fleet capacity
    c = "fleet capacity"
    add(c, "missing", "fleet capacity {T}/missing.json", "no such file")
    add(c, "dir-for-file", "fleet capacity {T}/dir", "is a directory")
    add(c, "file-for-dir", "fleet capacity {T}/probe.json -o {T}/file.txt", "is a file")
    add(c, "unwritable", "fleet capacity {T}/probe.json -o {T}/file.txt/out", "not a directory")
    add(c, "empty", "fleet capacity {T}/empty.json", "not a readable JSON")
    add(c, "garbage", "fleet capacity {T}/garbage.json", "not a readable JSON")
    add(c, "garbage", "fleet capacity {T}/good.jsonl", "JSON")
    add(c, "range", "fleet capacity {T}/probe.json --headroom 1.5", "headroom")
    add(c, "range", "fleet capacity {T}/probe.json --rate 5 --peak-rate 1", "peak rate")
    add(c, "range", "fleet capacity {T}/probe.json --ttft 0.001", "no probed load holds")
    add(c, "range", "fleet capacity {T}/probe.json --quantile p42", "quantile")
    add(c, "range", "fleet capacity {T}/probe.json --profile nosuch", "nosuch")
    add(c, "url", "fleet capacity --simulate --prometheus-url notaurl", "'notaurl'")
    add(c, "missing", "fleet capacity --model-config {T}/missing.json", "missing.json")
    add(c, "garbage", "fleet capacity --model-config {T}/garbage.json", "not JSON")
    add(c, "range", "fleet capacity --model-config {T}/llama8b.json --gpus 3", "does not divide")
    add(c, "range", "fleet capacity --model-config {T}/llama8b.json --output-tokens 0", "tokens")
    add(c, "range", "fleet capacity --model-config {T}/llama8b.json --gpu Z9", "unknown GPU")
    add(c, "range", "fleet capacity --model-config {T}/llama8b.json --pp 33", "exceeds the 32")
    add(c, "range", "fleet capacity --model-config {T}/llama8b.json --ep 2", "no routed experts")
    mix = "fleet capacity --model-config {M}/mixtral-8x7b.json"
    add(c, "range", f"{mix} --gpus 16 --dp-attention 16 --ep 16", "exceeds the 8 routed")
    # resilience storm
    c = "resilience storm"
    add(c, "range", "resilience storm --clients 0", "clients")
    add(c, "range", "resilience storm --outage-s -1", "outage_s")
    add(c, "range", "resilience storm --max-attempts 0", "max_attempts")
    add(c, "range", "resilience storm --interval-s 0", "interval_s")
    # engine run
    c = "engine run"
    add(c, "missing", "engine run --model-config {T}/missing.json", "missing.json")
    add(c, "dir-for-file", "engine run --model-config {T}/dir", "config.json")
    add(c, "empty", "engine run --model-config {T}/empty.json", "not JSON")
    add(c, "garbage", "engine run --model-config {T}/garbage.json", "not JSON")
    add(c, "range", "engine run --num-blocks 0", "num_blocks")
    add(c, "range", "engine run --num-blocks 1 -n 2", "--num-blocks 16 or more")
    add(c, "range", "engine run --requests 0", "--requests")
    add(c, "range", "engine run --prompt-len 5000", "4096 positions")
    add(c, "range", "engine run --model-config {T}/llama8b.json", "GiB")
    add(c, "extra", "engine run -n 2", "fleetwatch[engine]", no_torch=True)
    # engine serve
    c = "engine serve"
    add(c, "missing", "engine serve --model-config {T}/missing.json", "missing.json")
    add(c, "dir-for-file", "engine serve --span-file {T}/dir", "is a directory")
    add(c, "file-for-dir", "engine serve --records {T}/file.txt", "is a file")
    add(c, "unwritable", "engine serve --span-file {T}/file.txt/s.jsonl", "not a dir")
    add(c, "unwritable", "engine serve --records {T}/file.txt/records", "not a dir")
    add(c, "garbage", "engine serve --model-config {T}/garbage.json", "not JSON")
    add(c, "empty", "engine serve --model-config {T}/empty.json", "not JSON")
    add(c, "range", "engine serve --port 70000", "--port")
    add(c, "range", "engine serve --replicas 0", "--replicas")
    add(c, "range", "engine serve --num-blocks 1", "--num-blocks 256 or more")
    add(c, "range", "engine serve --max-queue -1", "max-queue")
    add(c, "range", "engine serve --tenant-rate 5", "needs --tenant-limits")
    add(c, "range", "engine serve --tenant-limits --tenant-weight gold=x", "--tenant-weight")
    add(c, "range", "engine serve --tenant-limits --tenant-rate inf", "--tenant-rate")
    add(c, "range", "engine serve --tenant-limits --tenant-burst nan", "--tenant-burst")
    add(c, "range", "engine serve --tenant-limits --tenant-output-weight inf", "--tenant-output")
    add(c, "range", "engine serve --tenant-limits --tenant-weight gold=inf", "--tenant-weight")
    add(c, "range", "engine serve --tenant-limits --tenant-limit gold=nan", "--tenant-limit")
    add(c, "range", "engine serve --tenant-limits --tenant-limit gold=5:inf", "--tenant-limit")
    add(
        c,
        "range",
        "engine serve --tenant-limits --max-tenants 2 --tenant-weight a=2 --tenant-limit b=5",
        "--max-tenants 2 is less than the 3 tenants",
    )
    add(
        c,
        "range",
        "engine serve --model-config {T}/llama8b.json --num-blocks 8192",
        "GiB",
    )
    add(c, "extra", "engine serve --port 0", "fleetwatch[engine]", no_torch=True)
    # probe run (also reached as `probe URL` and `probe --engine reference`)
    c = "probe run"
    add(c, "missing", "probe run http://h:9 --config {T}/missing.json", "missing.json")
    add(c, "dir-for-file", "probe run http://h:9 --json {T}/dir", "is a directory")
    add(c, "dir-for-file", "probe run http://h:9 --records {T}/dir", "is a directory")
    add(c, "unwritable", "probe run http://h:9 --csv {T}/file.txt/x.csv", "not a dir")
    add(c, "unwritable", "probe run http://h:9 --records {T}/r.csv", ".jsonl or .parquet")
    add(c, "empty", "probe run http://h:9 --config {T}/empty.json", "not JSON")
    add(c, "garbage", "probe run http://h:9 --config {T}/garbage.json", "not JSON")
    add(c, "range", "probe run http://h:9 -n 0", "--requests")
    add(c, "range", "probe run http://h:9 -c 0", "> 0")
    add(c, "range", "probe run http://h:9 --timeout 0", "--timeout")
    add(c, "range", "probe http://h:9 --rate -1", "> 0")
    add(c, "range", "probe http://h:9 --workers -1", "--workers")
    add(c, "range", "probe http://h:9 --lag-fraction 2", "--lag-fraction")
    add(c, "range", "probe http://h:9 --lag-limit-ms 0", "--lag-limit-ms")
    add(c, "url", "probe run notaurl", "'notaurl'")
    add(c, "url", "probe ftp://h/x", "http(s)")
    add(c, "url", "probe run http://h:port", "well-formed")
    add(c, "range", "probe --engine reference --config {T}/llama8b.json", "GiB")
    add(c, "range", "probe --engine reference --prompt-tokens 5000", "4096 positions")
    add(c, "extra", "probe --engine reference -n 2", "fleetwatch[engine]", no_torch=True)
    # probe bound
    c = "probe bound"
    add(c, "missing", "probe bound --config {T}/missing.json", "missing.json")
    add(c, "dir-for-file", "probe bound --config {T}/dir", "config.json")
    add(c, "dir-for-file", "probe bound --config {T}/llama8b.json --json {T}/dir", "dir")
    add(c, "unwritable", "probe bound --config {T}/llama8b.json --json {T}/file.txt/b", "not")
    add(c, "empty", "probe bound --config {T}/empty.json", "not JSON")
    add(c, "garbage", "probe bound --config {T}/garbage.json", "not JSON")
    add(c, "range", "probe bound --config {T}/llama8b.json --utilisation 0", "(0, 1]")
    add(c, "range", "probe bound --config {T}/llama8b.json --utilisation 2", "(0, 1]")
    add(c, "range", "probe bound --config {T}/llama8b.json --price -1", "--price")
    add(c, "range", "probe bound --config {T}/llama8b.json --context 200000", "131072")
    add(c, "range", "probe bound --config {T}/llama8b.json --gpus 0", "GPUs")
    add(c, "range", "probe bound --config {T}/llama8b.json --pp 0", "degree must be >= 1")
    add(c, "range", "probe bound --config {T}/llama8b.json --pp 33", "exceeds the 32 layers")
    add(c, "range", "probe bound --config {T}/llama8b.json --gpus 8 --tp 4", "is not tensor 4")
    add(c, "range", "probe bound --config {T}/llama8b.json --tp 3 --pp 2", "does not divide")
    add(c, "range", "probe bound --config {M}/deepseek-v3.json --gpus 8 --ep 3", "must divide")
    # probe fingerprint
    c = "probe fingerprint"
    fp = "probe fingerprint http://h:9 http://h:10"
    add(c, "missing", f"{fp} --prompts {{T}}/missing.json", "missing.json")
    add(c, "missing", f"{fp} --against {{T}}/missing.json", "no such file")
    add(c, "dir-for-file", f"{fp} --prompts {{T}}/dir", "directory")
    add(c, "dir-for-file", f"{fp} --against {{T}}/dir", "is a directory")
    add(c, "dir-for-file", f"{fp} --json {{T}}/dir", "is a directory")
    add(c, "unwritable", f"{fp} --json {{T}}/file.txt/f.json", "not a dir")
    add(c, "empty", f"{fp} --prompts {{T}}/empty.json", "not JSON")
    add(c, "empty", f"{fp} --against {{T}}/empty.json", "not a JSON file")
    add(c, "garbage", f"{fp} --prompts {{T}}/garbage.json", "not JSON")
    add(c, "garbage", f"{fp} --prompts {{T}}/file.txt", "not JSON")
    add(c, "garbage", f"{fp} --against {{T}}/garbage.json", "not a JSON file")
    add(c, "garbage", f"{fp} --prompts {{T}}/llama8b.json", "unknown key")
    add(c, "garbage", f"{fp} --meta novalue", "key=value")
    add(c, "garbage", f"{fp} -H novalue", "Name: value")
    add(c, "range", "probe fingerprint http://h:9", "nothing to compare with")
    add(c, "range", f"{fp} --logprob-tolerance -1", "--logprob-tolerance")
    add(c, "range", f"{fp} --timeout 0", "--timeout")
    add(c, "range", f"{fp} --repeat 0", "--repeat")
    add(c, "range", f"{fp} --repeat 21", "1..20")
    add(c, "url", "probe fingerprint notaurl http://h:9", "'notaurl'")
    add(c, "url", "probe fingerprint http://h:9 http://h:9/", "twice")
    add(c, "url", "probe fingerprint http://h:9 http://h:9/v1/completions", "twice")
    # dashboards
    c = "dashboards build"
    add(c, "missing", "dashboards build --out {T}/nowhere --check", "no such directory")
    add(c, "file-for-dir", "dashboards build --out {T}/file.txt", "is a file")
    add(c, "unwritable", "dashboards build --out {T}/file.txt/d", "not a directory")
    c = "dashboards alerts"
    add(c, "dir-for-file", "dashboards alerts -o {T}/dir", "is a directory, not a file")
    add(c, "unwritable", "dashboards alerts -o {T}/file.txt/ops.yaml", "not a directory")
    add(c, "garbage", "dashboards alerts --profile nosuch -o {T}/o.yaml", "nosuch")
    add(c, "garbage", "dashboards alerts -o {T}/o.yaml --labels {T}/garbage.yaml", "not YAML")
    c = "dashboards build"
    add(c, "dir-for-file", "dashboards build --out {T}/d --labels {T}/dir", "is a directory")
    c = "dashboards runbooks"
    add(c, "missing", "dashboards runbooks --out {T}/r --labels {T}/missing.yaml", "missing.yaml")
    add(c, "dir-for-file", "dashboards runbooks --out {T}/r --labels {T}/dir", "is a directory")
    add(c, "file-for-dir", "dashboards runbooks --out {T}/file.txt", "is a file")
    add(c, "unwritable", "dashboards runbooks --out {T}/file.txt/r", "not a directory")
    add(c, "garbage", "dashboards runbooks --profile nosuch --out {T}/r", "nosuch")
    c = "fleet podmonitor"
    pm = "fleet podmonitor --name llm --namespace llm --selector app=llm"
    add(c, "dir-for-file", pm + " -o {T}/dir", "is a directory, not a file")
    add(c, "unwritable", pm + " -o {T}/file.txt/pm.yaml", "not a directory")
    add(c, "garbage", pm + " --selector app -o {T}/pm.yaml", "--selector")
    add(c, "range", pm + " --interval soon -o {T}/pm.yaml", "interval")
    # demo
    c = "demo"
    add(c, "file-for-dir", "demo --out {T}/file.txt", "is a file")
    add(c, "unwritable", "demo --out {T}/file.txt/out", "not a directory")
    add(c, "range", "demo --duration 5", "--duration")
    add(c, "extra", "demo --out {T}/demo-out", "fleetwatch[engine]", no_torch=True)
    return rows


ROWS = _rows()

# The kinds that do not apply to a command: it takes no argument of that kind (no input file,
# no output, no folder, no URL, no number) or does not need torch.
NOT_APPLICABLE: dict[str, str] = {
    "records validate": "file-for-dir unwritable range url extra",
    # sources are folders too, and an empty segment (or folder) is compacted like any other
    "records compact": "dir-for-file empty extra",
    "records prune": "dir-for-file unwritable empty garbage extra",
    "telemetry gpu": "missing dir-for-file file-for-dir unwritable empty garbage url extra",
    "slo validate": "file-for-dir unwritable url extra",
    "slo rules": "file-for-dir url extra",
    "slo report": "file-for-dir unwritable url extra",
    "slo backtest": "file-for-dir unwritable url extra",
    "fleet outliers": "unwritable extra",
    "fleet tail": "file-for-dir unwritable url extra",
    "fleet compare": "file-for-dir unwritable url extra",
    "fleet canary": "file-for-dir extra",
    "fleet rules": "file-for-dir empty url extra",
    "fleet capacity": "extra",
    "resilience storm": "missing dir-for-file file-for-dir unwritable empty garbage url extra",
    "engine run": "file-for-dir unwritable url",
    "engine serve": "url",
    "probe run": "file-for-dir",
    "probe bound": "file-for-dir url extra",
    "probe fingerprint": "file-for-dir extra",
    "dashboards build": "empty garbage range url extra",
    "dashboards alerts": "missing file-for-dir empty range url extra",
    "dashboards runbooks": "empty range url extra",
    "fleet podmonitor": "missing file-for-dir empty url extra",
    "demo": "missing dir-for-file empty garbage url",
}


def sub_commands() -> list[str]:
    """Every leaf command of ``fleetwatch``, as typed (``slo rules``)."""
    found: list[str] = []

    def walk(cmd: Any, prefix: str) -> None:
        if not hasattr(cmd, "list_commands"):
            found.append(prefix)
            return
        for name in cmd.list_commands(None):  # the root loads each package's sub-app on demand
            walk(cmd.get_command(None, name), f"{prefix} {name}".strip())

    walk(typer.main.get_command(app), "")
    return sorted(found)


def test_the_table_covers_every_sub_command_and_kind() -> None:
    covered = {(r.command, r.kind) for r in ROWS}
    assert sorted({r.command for r in ROWS}) == sub_commands()
    assert sorted(NOT_APPLICABLE) == sub_commands()
    gaps = []
    for command in sub_commands():
        skipped = NOT_APPLICABLE[command].split()
        assert set(skipped) <= set(KINDS), command
        for kind in KINDS:
            has_row = (command, kind) in covered
            if has_row == (kind in skipped):
                gaps.append(f"{command} / {kind}: {'a row and skipped' if has_row else 'neither'}")
    assert gaps == []


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


def _refuse(what: str) -> Any:
    def guard(*args: object, **kwargs: object) -> Any:
        raise AssertionError(f"{what} started: a check came too late")

    return guard


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the work each command starts after its checks, and pin the memory figure."""
    import fleetwatch.demo.run as demo_run
    import fleetwatch.engine_probe.engine.preflight as preflight
    import fleetwatch.engine_probe.engine.workload as workload
    import fleetwatch.engine_probe.probe.fingerprint.collect as fingerprint
    import fleetwatch.engine_probe.probe.runner as runner
    import fleetwatch.engine_probe.serve.lifecycle as lifecycle
    import fleetwatch.fleet.canary.prometheus as canary

    monkeypatch.setattr(lifecycle, "start_server", _refuse("the server"))
    monkeypatch.setattr(runner, "run_plan", _refuse("the probe"))
    monkeypatch.setattr(fingerprint, "collect", _refuse("the fingerprint"))
    monkeypatch.setattr(canary, "sides_from_prometheus", _refuse("the canary's queries"))
    monkeypatch.setattr(workload, "run_offline", _refuse("the engine run"))
    monkeypatch.setattr(demo_run, "run_demo", _refuse("the demo"))
    monkeypatch.setattr(preflight, "available_memory", lambda device: (8 << 30, "free (test)"))


@pytest.mark.parametrize(
    "row", ROWS, ids=[f"{r.command}: {r.argv.split(' ', 2)[-1]}" for r in ROWS]
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    row: Row,
    tree: Path,
    guarded: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if row.no_torch:
        monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.chdir(tree)
    spec = ROOT / "slo" / "examples" / "chat.yaml"
    models = ROOT / "tests" / "serve" / "models"
    argv = [
        a.replace("{T}", str(tree)).replace("{SPEC}", str(spec)).replace("{M}", str(models))
        for a in row.argv.split()
    ]
    before = _snapshot(tree)
    status = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert (status, out) == (2, ""), err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleetwatch: error: "), err
    assert row.needle in lines[0], lines[0]
    assert _snapshot(tree) == before
