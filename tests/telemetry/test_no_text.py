"""No prompt or output text anywhere (spans, metrics, records, logs) unless the user opts in."""

from __future__ import annotations

import json
import logging

from prometheus_client import CollectorRegistry, generate_latest

from fleetwatch.engine_probe.engine import RequestParams
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.sink import MemoryRecordSink

SECRET_IN = "PROMPT-SECRET-7f3a"
SECRET_OUT = "OUTPUT-SECRET-91c2"


def _run(make_engine, tracing, capture_text, caplog):
    provider, exporter = tracing
    engine = make_engine()
    reg = CollectorRegistry()
    sink = MemoryRecordSink()
    inst = instrument(
        engine, tracer_provider=provider, registry=reg, record_sink=sink, capture_text=capture_text
    )
    with caplog.at_level(logging.DEBUG):
        rid = engine.add_request([1, 2, 3, 4], max_tokens=3, params=RequestParams(tenant="acme"))
        inst.annotate_text(rid, input_text=SECRET_IN, output_text=SECRET_OUT)
        while engine.has_unfinished():
            engine.step()
        inst.detach()
    spans = "".join(s.to_json() for s in exporter.get_finished_spans())
    metrics = generate_latest(reg).decode()
    records = json.dumps([r.to_dict() for r in sink.records])
    return spans, metrics, records, caplog.text


def test_text_appears_nowhere_by_default(make_engine, tracing, caplog):
    for blob in _run(make_engine, tracing, False, caplog):
        assert SECRET_IN not in blob
        assert SECRET_OUT not in blob


def test_opted_in_text_reaches_spans_only(make_engine, tracing, caplog):
    spans, metrics, records, logs = _run(make_engine, tracing, True, caplog)
    assert SECRET_IN in spans and SECRET_OUT in spans
    for blob in (metrics, records, logs):
        assert SECRET_IN not in blob and SECRET_OUT not in blob
