"""Registry samples agree with the request records of the same real engine run."""

from __future__ import annotations

import math

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.records import to_frame
from fleetwatch.telemetry.hooks import StepStats
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.metrics.serving import ServingMetrics
from fleetwatch.telemetry.sink import MemoryRecordSink


def _run(make_engine, mixed_workload, **kw):
    engine = make_engine(num_blocks=12, error_rate=0.3)
    reg = CollectorRegistry()
    sink = MemoryRecordSink()
    inst = instrument(engine, registry=reg, record_sink=sink, env={}, **kw)
    _, run = mixed_workload(engine)
    inst.flush()
    return engine, reg, sink, run, inst


def test_histograms_and_counters_match_the_records(make_engine, mixed_workload):
    engine, reg, sink, run, inst = _run(make_engine, mixed_workload, goodput=(10.0, 10.0))
    df = to_frame(sink.records)
    assert len(df) == len(run.final) == 6
    labels = {"model": engine.model_name, "replica": engine.replica, "traffic_class": "default"}
    get = reg.get_sample_value

    for name, column in (
        ("gen_ai_server_time_to_first_token_seconds", "ttft_s"),
        ("gen_ai_server_time_per_output_token_seconds", "tpot_s"),
        ("gen_ai_server_request_duration_seconds", "e2e_s"),
        ("fleetwatch_request_queue_seconds", "queue_s"),
        ("fleetwatch_request_prefill_seconds", "prefill_s"),
        ("fleetwatch_request_decode_seconds", "decode_s"),
    ):
        values = df[column].dropna().to_numpy()
        assert get(f"{name}_count", labels) == len(values), name
        assert math.isclose(
            get(f"{name}_sum", labels), float(values.sum()), rel_tol=1e-6, abs_tol=1e-6
        ), name
        # One bucket checked exactly: le is inclusive.
        le = float(np.median(values)) if len(values) else 1.0
        bucket_les = [
            float(s.labels["le"])
            for f in text_string_to_metric_families(generate_latest(reg).decode())
            if f.name == name
            for s in f.samples
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
        ]
        le = min((b for b in bucket_les if b >= le), default=bucket_les[-1])
        assert get(f"{name}_bucket", {**labels, "le": _go(le)}) == float((values <= le).sum()), name

    for status in ("ok", "error", "aborted"):
        sub = df[df["status"] == status]
        for reason, n in sub["finish_reason"].fillna("none").value_counts().items():
            got = get(
                "fleetwatch_requests_total", {**labels, "status": status, "finish_reason": reason}
            )
            assert got == n
    assert get("fleetwatch_prompt_tokens_total", labels) == df["prompt_tokens"].sum()
    assert get("fleetwatch_generation_tokens_total", labels) == df["output_tokens"].sum()
    assert get("fleetwatch_cached_prompt_tokens_total", labels) == df["cached_prompt_tokens"].sum()
    assert get("fleetwatch_preemptions_total", labels) == df["preemptions"].sum() > 0
    assert get("fleetwatch_goodput_requests_total", labels) == (df["status"] == "ok").sum()
    # Output tokens after the first produce one ITL each.
    firsts = df["first_token_s"].notna()
    assert (
        get("fleetwatch_inter_token_latency_seconds_count", labels)
        == (df.loc[firsts, "output_tokens"] - 1).clip(lower=0).sum()
    )
    # The records' per-request gap counts add up to the exporter's ITL histogram, bucket by bucket.
    per_bucket = np.stack(df["itl_buckets"].to_list()).sum(axis=0)
    assert list(get_profile("fleetwatch").metric(Signal.ITL).buckets) == list(ITL_BOUNDS)
    for i, bound in enumerate(ITL_BOUNDS):
        got = get("fleetwatch_inter_token_latency_seconds_bucket", {**labels, "le": _go(bound)})
        assert got == per_bucket[: i + 1].sum(), bound
    inst.detach()


def test_step_metrics_gauges_and_the_profile_names_are_exported(make_engine, mixed_workload):
    engine, reg, _, run, inst = _run(
        make_engine,
        mixed_workload,
        peak_bandwidth_bytes_per_s=1e12,
        peak_flops_per_s=1e13,
        goodput=(1.0, 0.1),
    )
    base = {"model": engine.model_name, "replica": engine.replica}
    get = reg.get_sample_value
    assert get("fleetwatch_step_duration_seconds_count", base) == run.steps
    assert get("fleetwatch_step_tokens_count", base) == run.steps
    assert get("fleetwatch_num_requests_running", base) == 0
    assert get("fleetwatch_num_requests_waiting", base) == 0
    assert 0.0 <= get("fleetwatch_kv_cache_usage_ratio", base) <= 1.0
    bw = get("fleetwatch_achieved_memory_bandwidth_bytes_per_second", base)
    assert bw > 0
    assert math.isclose(get("fleetwatch_memory_bandwidth_utilization_ratio", base), bw / 1e12)
    fl = get("fleetwatch_achieved_flops_per_second", base)
    assert math.isclose(get("fleetwatch_flops_utilization_ratio", base), fl / 1e13)
    assert get("fleetwatch_step_bytes_read_total", base) > 0
    assert get("fleetwatch_prefix_cache_queries_total", base) >= 0

    exported = set()
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            exported.add(s.name)
    profile = get_profile("fleetwatch")
    # GPU series need a device; startup and model-cache series come from a served process's
    # start and its model cache (tests/serve/test_startup.py, test_multi_model.py), not the steps
    served_only = ("fleetwatch_gpu_", "fleetwatch_engine_startup_", "fleetwatch_engine_ready")
    serving_names = {
        n
        for n in profile.metric_names()
        if not n.startswith(served_only) and not n.startswith("fleetwatch_model_cache_")
    }
    assert serving_names <= exported, serving_names - exported
    inst.detach()


def test_without_a_declared_peak_no_utilisation_ratio_is_invented(make_engine, mixed_workload):
    engine, reg, _, _, inst = _run(make_engine, mixed_workload)
    base = {"model": engine.model_name, "replica": engine.replica}
    assert reg.get_sample_value("fleetwatch_achieved_memory_bandwidth_bytes_per_second", base) > 0
    assert reg.get_sample_value("fleetwatch_memory_bandwidth_utilization_ratio", base) is None
    assert reg.get_sample_value("fleetwatch_flops_utilization_ratio", base) is None
    inst.detach()


def test_detach_stops_observing_and_unregisters(make_engine, drive):
    engine = make_engine()
    reg = CollectorRegistry()
    inst = instrument(engine, registry=reg, env={})
    drive(engine, [[1, 2, 3]], 3)
    inst.detach()
    assert (
        reg.get_sample_value(
            "fleetwatch_prompt_tokens_total",
            {"model": engine.model_name, "replica": engine.replica, "traffic_class": "default"},
        )
        is None
    )
    drive(engine, [[1, 2, 3]], 3)
    assert inst.observer.requests == {}


def _go(v: float) -> str:
    from prometheus_client.utils import floatToGoString

    return str(floatToGoString(v))


def test_pause_turns_telemetry_off_and_resume_on(make_engine, drive):
    engine = make_engine()
    reg = CollectorRegistry()
    inst = instrument(engine, registry=reg, env={})
    labels = {"model": engine.model_name, "replica": engine.replica, "traffic_class": "default"}
    drive(engine, [[1, 2, 3]], 2)
    inst.pause()
    assert not inst.attached
    drive(engine, [[1, 2, 3]], 2)
    inst.resume()
    drive(engine, [[1, 2, 3]], 2)
    assert reg.get_sample_value("fleetwatch_prompt_tokens_total", labels) == 6
    inst.detach()
    inst.resume()  # a detached handle stays detached
    assert not inst.attached


def test_exposition_passes_promtool_lint(make_engine, mixed_workload, promtool):
    import subprocess

    _, reg, _, _, inst = _run(make_engine, mixed_workload, goodput=(1.0, 0.1))
    text = generate_latest(reg)
    inst.detach()
    done = subprocess.run(
        [str(promtool), "check", "metrics"], input=text, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_goodput_counter_is_exported_only_with_a_goodput_target(make_engine, mixed_workload):
    # Without a target a counter stuck at 0 would read "no request met the target" and burn
    # every goodput SLO on a healthy fleet: the series must not exist at all.
    _, reg, _, _, inst = _run(make_engine, mixed_workload)
    names = {f.name for f in text_string_to_metric_families(generate_latest(reg).decode())}
    inst.detach()
    assert "fleetwatch_goodput_requests" not in names
    assert "fleetwatch_requests" in names
    _, reg, _, _, inst = _run(make_engine, mixed_workload, goodput=(10.0, 10.0))
    names = {f.name for f in text_string_to_metric_families(generate_latest(reg).decode())}
    inst.detach()
    assert "fleetwatch_goodput_requests" in names


def test_steps_wait_for_a_scrape_and_are_folded_in_order() -> None:
    # The step loop only appends each StepStats; a scrape (or a flush) folds them, in order, so
    # a state report after the steps sets the gauges and leaves the step counters alone.
    m = ServingMetrics("m", "r0", window_steps=2)
    reg = CollectorRegistry()
    reg.register(m)
    base = {"model": "m", "replica": "r0"}
    # StepStats: step, start, end, prefill, decode, running, waiting, KV blocks used and total,
    # cache queries and hits, preemptions, bytes read, FLOPs
    for i in (1, 2, 3):
        m.record_step(StepStats(i, i, i + 0.5, 0, 4, 4, 1, 6, 8, 2, 1, 0, 100.0 * i, 10.0))
    assert m.steps.duration.pending == [] and m.steps.bytes_read == 0.0  # nothing done yet
    m.record_step(StepStats(3, 9.0, 9.0, 0, 0, 0, 0, 2, 8, 0, 0, 0, 0.0, 0.0))  # went idle
    get = reg.get_sample_value
    assert get("fleetwatch_step_duration_seconds_count", base) == 3
    assert get("fleetwatch_step_tokens_sum", base) == 12
    assert get("fleetwatch_step_bytes_read_total", base) == 600.0
    assert get("fleetwatch_prefix_cache_hits_total", base) == 3
    assert get("fleetwatch_num_requests_running", base) == 0
    assert get("fleetwatch_kv_cache_usage_ratio", base) == 0.25
    # the rate window holds the last two steps: 500 bytes over 1 s
    assert get("fleetwatch_achieved_memory_bandwidth_bytes_per_second", base) == 500.0
    m.record_step(StepStats(4, 10.0, 10.5, 0, 4, 4, 0, 6, 8, 0, 0, 0, 1000.0, 10.0))
    assert m.steps.last is not None and m.steps.last.step == 4
    assert get("fleetwatch_step_duration_seconds_count", base) == 4
    assert get("fleetwatch_achieved_memory_bandwidth_bytes_per_second", base) == 1300.0
