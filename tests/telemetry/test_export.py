"""Export never changes the engine's output or stalls its steps; drops are counted."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.metrics import DropCounter
from fleetwatch.telemetry.spans import BoundedSpanProcessor, otlp_configured, tracer_provider


class RaisingExporter(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise RuntimeError("collector down")

    def shutdown(self) -> None:
        return None


class BlockingExporter(SpanExporter):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(60)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def _outcome(run):
    return run.tokens, {k: (v.status, v.finish_reason, v.error_type) for k, v in run.final.items()}


@pytest.fixture(scope="module")
def bare(make_engine, mixed_workload):
    _, run = mixed_workload(make_engine(num_blocks=12, error_rate=0.3))
    return _outcome(run)


def test_raising_exporter_changes_nothing_and_counts_drops(make_engine, mixed_workload, bare):
    drops = DropCounter()
    exporter = RaisingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BoundedSpanProcessor(exporter, drops=drops, max_batch=4))
    counter = CountingProcessor()
    provider.add_span_processor(counter)
    engine = make_engine(num_blocks=12, error_rate=0.3)
    reg = CollectorRegistry()
    inst = instrument(engine, tracer_provider=provider, registry=reg, drops=drops)
    _, run = mixed_workload(engine)
    inst.detach()
    provider.force_flush()
    assert _outcome(run) == bare
    assert exporter.calls >= 1
    # Every span that was built was dropped: none reached a collector, all were counted.
    assert drops.get("spans") > 0
    assert drops.get("spans") == counter.ended
    provider.shutdown()


class CountingProcessor(SpanProcessor):
    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


def test_blocking_exporter_neither_stalls_steps_nor_changes_output(
    make_engine, mixed_workload, bare
):
    drops = DropCounter()
    exporter = BlockingExporter()
    provider = TracerProvider()
    provider.add_span_processor(
        BoundedSpanProcessor(exporter, drops=drops, max_queue=4, max_batch=1)
    )
    engine = make_engine(num_blocks=12, error_rate=0.3)
    reg = CollectorRegistry()
    inst = instrument(engine, tracer_provider=provider, registry=reg, drops=drops)
    _, run = mixed_workload(engine)
    inst.flush()
    # Every step ran and every request finished while the exporter is still stuck.
    assert not exporter.release.is_set()
    assert len(run.final) == 6
    assert _outcome(run) == bare
    assert drops.get("spans") > 0
    labels = {"model": engine.model_name, "replica": engine.replica, "stage": "spans"}
    assert reg.get_sample_value("fleetwatch_telemetry_dropped_total", labels) == drops.get("spans")
    exporter.release.set()
    inst.detach()
    provider.shutdown()


def test_blocking_synchronous_processor_fills_the_request_queue_not_the_step_loop(
    make_engine, mixed_workload, bare
):
    exporter = BlockingExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = make_engine(num_blocks=12, error_rate=0.3)
    reg = CollectorRegistry()
    inst = instrument(engine, tracer_provider=provider, registry=reg, max_queue=1)
    _, run = mixed_workload(engine)
    assert _outcome(run) == bare
    assert not exporter.release.is_set()
    assert inst.drops.get("requests") > 0
    exporter.release.set()
    inst.detach()


def test_json_lines_span_file_for_offline_use(make_engine, drive, tmp_path):
    engine = make_engine()
    path = tmp_path / "spans" / "spans.jsonl"
    inst = instrument(engine, registry=CollectorRegistry(), env={}, span_file=path)
    drive(engine, [[1, 2, 3], [4, 5, 6]], 3)
    inst.detach()
    assert inst.observer.requests == {}
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(s["name"] for s in spans) == sorted(
        ["queue", "prefill", "decode", f"text_completion {engine.model_name}"] * 2
    )


def test_no_tracing_configured_builds_no_spans():
    assert tracer_provider(env={}) is None
    assert not otlp_configured({})
    assert otlp_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert otlp_configured(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    )
    assert not otlp_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert not otlp_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}
    )


def test_the_provider_resource_is_the_sdks_hashed_once(monkeypatch):
    # The OTLP encoder hashes the resource of every span it groups; the SDK's hash serialises
    # every attribute each time. Ours equals the SDK's resource and computes that hash once.
    from opentelemetry.sdk.resources import Resource

    provider = tracer_provider(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert provider is not None
    try:
        res = provider.resource
        plain = Resource(res.attributes, res.schema_url)
        assert res == plain and hash(res) == hash(plain)
        assert res.attributes["service.name"] == "fleetwatch"
        calls: list[int] = []
        real = Resource.__hash__
        monkeypatch.setattr(Resource, "__hash__", lambda self: calls.append(1) or real(self))
        for _ in range(100):
            hash(res)
        assert calls == []
    finally:
        provider.shutdown()


class _Collector(BaseHTTPRequestHandler):
    posts: ClassVar[list[tuple[str, int]]] = []
    headers_seen: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        type(self).posts.append((self.path, n))
        type(self).headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_otlp_export_from_the_standard_environment(make_engine, drive, monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.posts = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_port}"
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        provider = tracer_provider(env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint + "/"})
        assert provider is not None
        engine = make_engine()
        inst = instrument(engine, tracer_provider=provider, registry=CollectorRegistry())
        drive(engine, [[1, 2, 3]], 3)
        inst.detach()
        provider.force_flush()
        provider.shutdown()
        assert _Collector.posts and _Collector.posts[0][0] == "/v1/traces"
        assert inst.drops.total == 0
    finally:
        server.shutdown()
        server.server_close()


_OTLP_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SDK_DISABLED",
)


@pytest.mark.parametrize("source", ["mapping", "process"])
@pytest.mark.parametrize("specific", [False, True])
def test_otlp_endpoint_and_headers_reach_the_collector(
    make_engine, drive, monkeypatch, source, specific
):
    """The generic endpoint gets ``/v1/traces``, the traces endpoint is used as given; the traces
    headers win over the generic ones; the same from a given mapping and from ``os.environ``."""
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.posts = []
    _Collector.headers_seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        env = (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": base + "/custom/traces",
             "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-tenant=t%201,x-only-traces=yes",
             "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=generic"}
            if specific
            else {"OTEL_EXPORTER_OTLP_ENDPOINT": base + "/",
                  "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=t%201, authorization = Bearer%20k"}
        )  # fmt: skip
        for name in _OTLP_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        if source == "process":
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            provider = tracer_provider()
        else:
            provider = tracer_provider(env=env)
        assert provider is not None
        engine = make_engine()
        inst = instrument(engine, tracer_provider=provider, registry=CollectorRegistry())
        drive(engine, [[1, 2, 3]], 3)
        inst.detach()
        provider.force_flush()
        provider.shutdown()
        assert _Collector.posts
        assert _Collector.posts[0][0] == ("/custom/traces" if specific else "/v1/traces")
        sent = _Collector.headers_seen[0]
        assert sent["x-tenant"] == "t 1"
        if specific:
            assert sent["x-only-traces"] == "yes"
        else:
            assert sent["authorization"] == "Bearer k"
    finally:
        server.shutdown()
        server.server_close()
