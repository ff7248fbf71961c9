"""The vLLM adapter without vLLM: records rebuilt from vLLM's intervals, spans, metrics, settings.

Inputs are ``Finished``: a plain dataclass with the fields of vLLM's ``FinishedRequestStats``
(0.32), as vLLM's output processor fills them.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from fleetwatch.cli import app as fleetwatch_app
from fleetwatch.core.identity import Identity, IdentityError
from fleetwatch.records import RequestRecord, Status, read_records
from fleetwatch.telemetry.adapters.vllm import (
    AdapterSettings,
    SettingsError,
    operation_of,
    records_from_finished,
)
from fleetwatch.telemetry.adapters.vllm.exporter import VllmExporter, meets_goodput
from fleetwatch.telemetry.sink.records import MemoryRecordSink


@dataclass
class Finished:
    """The fields of vLLM's FinishedRequestStats (durations in seconds)."""

    finish_reason: str = "length"
    request_id: str | None = "cmpl-abc-0"
    e2e_latency: float = 3.0
    num_prompt_tokens: int = 10
    num_preemptions: int = 0
    num_generation_tokens: int = 5
    max_tokens_param: int | None = 5
    queued_time: float = 0.25
    prefill_time: float = 0.5
    inference_time: float = 2.5
    decode_time: float = 2.0
    mean_time_per_output_token: float = 0.5
    is_corrupted: bool = False
    num_cached_tokens: int = 0


def _one(f: Finished, now: float = 1000.0) -> RequestRecord:
    [r] = records_from_finished([f], now, model="tiny", replica="r0")
    return r


def test_finish_and_arrival_are_vllms_own_instants() -> None:
    r = _one(Finished(e2e_latency=3.0), now=1000.0)
    assert r.finished_s == 1000.0
    assert r.arrival_s == 997.0
    assert r.e2e_s == pytest.approx(3.0)


def test_prefill_and_decode_equal_vllms_intervals_and_queue_absorbs_frontend_time() -> None:
    f = Finished(e2e_latency=3.0, queued_time=0.25, prefill_time=0.5, decode_time=2.0)
    r = _one(f)
    assert r.decode_s == pytest.approx(2.0)
    assert r.prefill_s == pytest.approx(0.5)
    # 0.25 s in vLLM's queue + 0.25 s before the engine queued it (tokenisation, IPC)
    assert r.queue_s == pytest.approx(0.5)
    assert r.ttft_s == pytest.approx(1.0)
    assert r.tpot_s == pytest.approx(2.0 / 4)


def test_times_stay_ordered_when_intervals_exceed_e2e() -> None:
    r = _one(Finished(e2e_latency=1.0, prefill_time=0.8, decode_time=0.7))
    assert r.arrival_s <= r.scheduled_s <= r.first_token_s <= r.finished_s  # type: ignore[operator]
    assert r.decode_s == pytest.approx(0.7)


def test_a_request_without_tokens_has_no_first_token_or_admission() -> None:
    f = Finished(finish_reason="abort", num_generation_tokens=0, prefill_time=-5.0, decode_time=0.0)
    r = _one(f)
    assert (r.status, r.finish_reason) == (Status.ABORTED, "abort")
    assert r.first_token_s is None and r.scheduled_s is None
    assert r.ttft_s is None


@pytest.mark.parametrize(
    ("reason", "corrupted", "status", "error_type"),
    [
        ("stop", False, Status.OK, None),
        ("length", False, Status.OK, None),
        ("repetition", False, Status.OK, None),
        ("abort", False, Status.ABORTED, None),
        ("error", False, Status.ERROR, "engine_error"),
        ("length", True, Status.ERROR, "corrupted_output"),
    ],
)
def test_status_follows_vllms_finish_reason(
    reason: str, corrupted: bool, status: Status, error_type: str | None
) -> None:
    r = _one(Finished(finish_reason=reason, is_corrupted=corrupted))
    assert (r.status, r.finish_reason, r.error_type) == (status, reason, error_type)


def test_cached_tokens_never_exceed_the_prompt() -> None:
    r = _one(Finished(num_prompt_tokens=8, num_cached_tokens=16, num_preemptions=2))
    assert (r.cached_prompt_tokens, r.preemptions) == (8, 2)


def test_operation_comes_from_the_request_id_prefix() -> None:
    assert operation_of("chatcmpl-1") == "chat"
    assert operation_of("cmpl-1-0") == "text_completion"
    assert operation_of("other") == "generate_content"


def test_goodput_judges_the_records_ttft_and_tpot() -> None:
    f = Finished(e2e_latency=3.0, decode_time=2.0, num_generation_tokens=5)  # TTFT 1, TPOT 0.5
    assert meets_goodput(f, (1.0, 0.5))
    assert not meets_goodput(f, (0.9, 0.5))
    assert not meets_goodput(f, (1.0, 0.4))
    assert not meets_goodput(Finished(finish_reason="abort"), (10.0, 10.0))


# --- settings ----------------------------------------------------------------------------------


def test_nothing_set_means_off() -> None:
    assert AdapterSettings.from_env({"PATH": "/bin"}) == AdapterSettings()


def test_master_switch_overrides_the_others() -> None:
    assert not AdapterSettings.from_env(
        {"FLEETWATCH_VLLM": "0", "FLEETWATCH_VLLM_RECORDS": "d"}
    ).enabled
    on = AdapterSettings.from_env({"FLEETWATCH_VLLM": "1"})
    assert on.enabled and on.records_dir is None and on.metrics


def test_settings_read_every_variable() -> None:
    s = AdapterSettings.from_env(
        {
            "FLEETWATCH_VLLM_RECORDS": "/tmp/r",
            "FLEETWATCH_VLLM_RECORDS_FORMAT": "parquet",
            "FLEETWATCH_VLLM_RECORDS_FLUSH_S": "2",
            "FLEETWATCH_VLLM_SPAN_FILE": "/tmp/s.jsonl",
            "FLEETWATCH_VLLM_GOODPUT": "0.5, 0.05",
            "FLEETWATCH_VLLM_REPLICA": "gpu-3",
            "FLEETWATCH_VLLM_TRAFFIC_CLASS": "chat",
            "FLEETWATCH_VLLM_METRICS": "0",
        }
    )
    assert (s.records_dir, s.records_format, s.records_max_age_s) == ("/tmp/r", "parquet", 2.0)
    assert (s.span_file, s.goodput, s.replica, s.traffic_class) == (
        "/tmp/s.jsonl",
        (0.5, 0.05),
        "gpu-3",
        "chat",
    )
    assert not s.metrics
    assert s.replica_for(0, 1) == "gpu-3"
    assert s.replica_for(1, 2) == "gpu-3/dp1"


def test_in_a_pod_the_replica_is_its_namespace_and_name() -> None:
    """The downward API's POD_NAMESPACE and POD_NAME make the key a fleet's Prometheus labels
    make (``core.identity``); FLEETWATCH_VLLM_REPLICA still wins, and half of the pair is not
    a key."""
    pod = {"FLEETWATCH_VLLM": "1", "POD_NAMESPACE": "prod", "POD_NAME": "vllm-7d9f-abc"}
    assert AdapterSettings.from_env(pod).replica == "prod/vllm-7d9f-abc"
    named = {**pod, "FLEETWATCH_VLLM_REPLICA": "gpu-3"}
    assert AdapterSettings.from_env(named).replica == "gpu-3"
    half = {"FLEETWATCH_VLLM": "1", "POD_NAME": "vllm-7d9f-abc"}
    assert AdapterSettings.from_env(half).replica == socket.gethostname()


def test_an_identity_is_its_labels_values_in_order() -> None:
    ident = Identity.parse("namespace, pod")
    assert ident.key({"pod": "p", "namespace": "ns", "job": "j"}) == "ns/p"
    with pytest.raises(IdentityError, match="no pod label"):
        ident.key({"namespace": "ns"})
    for bad in ("", "namespace,namespace", "__name__", "pod-name"):
        with pytest.raises(IdentityError):
            Identity.parse(bad)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLEETWATCH_VLLM_GOODPUT", "0.5"),
        ("FLEETWATCH_VLLM_GOODPUT", "0,1"),
        ("FLEETWATCH_VLLM_RECORDS_FORMAT", "csv"),
        ("FLEETWATCH_VLLM_RECORDS_FLUSH_S", "soon"),
        ("FLEETWATCH_VLLM", "maybe"),
    ],
)
def test_a_malformed_variable_is_named(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        AdapterSettings.from_env({name: value})


# --- the exporter: records, spans, metrics -----------------------------------------------------


def _exporter(
    settings: AdapterSettings, *, engines: tuple[int, ...] = (0,)
) -> tuple[VllmExporter, MemoryRecordSink, InMemorySpanExporter, CollectorRegistry]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    sink = MemoryRecordSink()
    registry = CollectorRegistry()
    exporter = VllmExporter(
        settings,
        model="tiny",
        engines=engines,
        registry=registry,
        sink=sink,
        tracer_provider=provider,
    )
    return exporter, sink, spans, registry


ON = AdapterSettings(enabled=True, replica="r0", goodput=(1.0, 0.5))


def test_a_vllm_request_becomes_a_server_span_with_three_phase_children() -> None:
    exporter, _, spans, _ = _exporter(ON)
    exporter.observe(1000.0, 0, [Finished(request_id="chatcmpl-7", num_cached_tokens=4)])
    assert exporter.flush(5.0)
    exporter.close()
    finished = spans.get_finished_spans()
    [root] = [s for s in finished if s.kind == SpanKind.SERVER]
    children = {
        s.name: s for s in finished if s.parent and s.parent.span_id == root.context.span_id
    }
    assert set(children) == {"queue", "prefill", "decode"}
    assert root.name == "chat tiny"
    assert root.start_time == 997_000_000_000 and root.end_time == 1000_000_000_000
    assert children["queue"].start_time == root.start_time
    assert children["queue"].end_time == children["prefill"].start_time
    assert children["prefill"].end_time == children["decode"].start_time
    assert children["decode"].end_time == root.end_time
    a = root.attributes or {}
    assert a["gen_ai.provider.name"] == "vllm"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.response.id"] == "chatcmpl-7"
    assert a["gen_ai.usage.input_tokens"] == 10 and a["gen_ai.usage.output_tokens"] == 5
    assert a["gen_ai.usage.cache_read.input_tokens"] == 4
    assert a["gen_ai.request.max_tokens"] == 5
    assert a["fleetwatch.vllm.queued_s"] == pytest.approx(0.25)
    assert a["fleetwatch.vllm.frontend_s"] == pytest.approx(0.25)
    assert "fleetwatch.batch_size_at_admission" not in a
    assert (children["prefill"].attributes or {})["fleetwatch.prefill_tokens"] == 6


def test_an_engine_error_marks_the_span_as_an_error() -> None:
    exporter, _, spans, _ = _exporter(ON)
    exporter.observe(10.0, 0, [Finished(finish_reason="error")])
    exporter.close()
    [root] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert root.status.status_code == StatusCode.ERROR
    assert (root.attributes or {})["error.type"] == "engine_error"


def test_data_parallel_engines_are_replicas_of_their_own() -> None:
    exporter, sink, _, _ = _exporter(ON, engines=(0, 1))
    exporter.observe(10.0, 0, [Finished(request_id="a")])
    exporter.observe(10.0, 1, [Finished(request_id="b"), Finished(request_id="c")])
    exporter.close()
    assert {r.request_id: r.replica for r in sink.records} == {
        "a": "r0/dp0",
        "b": "r0/dp1",
        "c": "r0/dp1",
    }


def test_outcomes_are_exported_from_zero_and_counted_per_engine() -> None:
    exporter, _, _, registry = _exporter(ON, engines=(0, 1))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"model_name": "tiny", **labels})

    for engine in ("0", "1"):
        for status, reason in [("ok", "length"), ("error", "error"), ("aborted", "abort")]:
            assert (
                value(
                    "fleetwatch_requests_total", engine=engine, status=status, finish_reason=reason
                )
                == 0
            )
        assert value("fleetwatch_goodput_requests_total", engine=engine) == 0
    assert value("fleetwatch_telemetry_dropped_total", stage="requests") == 0
    exporter.observe(
        10.0, 1, [Finished(), Finished(e2e_latency=9.0), Finished(finish_reason="abort")]
    )
    exporter.rejected()
    ok = value("fleetwatch_requests_total", engine="1", status="ok", finish_reason="length")
    assert ok == 2
    assert value("fleetwatch_goodput_requests_total", engine="1") == 1
    assert (
        value("fleetwatch_requests_total", engine="0", status="rejected", finish_reason="none") == 1
    )
    exporter.close()
    assert list(registry.collect()) == []


def test_a_full_queue_drops_and_counts_instead_of_blocking() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    registry = CollectorRegistry()
    exporter = VllmExporter(
        ON,
        model="tiny",
        registry=registry,
        sink=MemoryRecordSink(),
        tracer_provider=provider,
        max_queue=2,
    )
    exporter.observe(10.0, 0, [Finished(request_id=str(i)) for i in range(50)])
    dropped = registry.get_sample_value(
        "fleetwatch_telemetry_dropped_total", {"model_name": "tiny", "stage": "requests"}
    )
    exporter.close()
    assert dropped is not None and dropped >= 40


def test_records_written_by_the_plugin_pass_fleetwatch_validation(tmp_path: Path) -> None:
    settings = AdapterSettings.from_env(
        {
            "FLEETWATCH_VLLM_RECORDS": str(tmp_path / "records"),
            "FLEETWATCH_VLLM_SPAN_FILE": str(tmp_path / "spans.jsonl"),
            "FLEETWATCH_VLLM_REPLICA": "r0",
        }
    )
    exporter = VllmExporter(settings, model="tiny", registry=CollectorRegistry(), env={})
    batch = [
        Finished(request_id="cmpl-1"),
        Finished(request_id="cmpl-2", finish_reason="abort", num_generation_tokens=0),
        Finished(request_id="cmpl-3", finish_reason="stop", e2e_latency=0.1, decode_time=0.2),
    ]
    exporter.observe(1_800_000_000.0, 0, batch)
    exporter.close()
    [path] = sorted((tmp_path / "records").iterdir())
    assert path.name.startswith("vllm-") and path.suffix == ".jsonl"
    df = read_records(path)
    assert list(df["request_id"]) == ["cmpl-1", "cmpl-2", "cmpl-3"]
    result = CliRunner().invoke(fleetwatch_app, ["records", "validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["rows"] == 3 and summary["status"] == {"aborted": 1, "ok": 2}
    lines = (tmp_path / "spans.jsonl").read_text().splitlines()
    # two requests: a server span and three phases each; the one aborted before a token: server
    # span and its queue
    assert len(lines) == 2 * 4 + 2


def test_off_builds_nothing() -> None:
    registry = CollectorRegistry()
    exporter = VllmExporter(
        AdapterSettings(enabled=True, metrics=False), model="m", registry=registry, env={}
    )
    assert exporter.metrics is None and exporter.sink is None and exporter.builder is None
    exporter.observe(1.0, 0, [Finished()])
    exporter.close()
    assert list(registry.collect()) == []
