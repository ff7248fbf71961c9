"""User-supplied label values are capped: 100,000 tenants give a bounded number of series."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.telemetry.hooks import RequestInfo
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.metrics import OTHER, LabelCap


class NoEngine:
    """Any object with ``attach`` can be instrumented: here the test calls the observer itself."""

    replica = "r9"
    model_name = "m"

    def __init__(self) -> None:
        self.observer = None

    def attach(self, observer):
        self.observer = observer
        return lambda: None


def test_label_cap_keeps_the_first_values_and_folds_the_rest():
    cap = LabelCap("tenant", 3)
    assert [cap.get(v) for v in "abcdeab"] == ["a", "b", "c", OTHER, OTHER, "a", "b"]
    assert cap.folded == 2
    assert cap.distinct == 3


def test_100k_distinct_tenants_give_a_bounded_number_of_series():
    engine = NoEngine()
    reg = CollectorRegistry()
    inst = instrument(
        engine, registry=reg, env={}, tenant_label=True, max_label_values=50, clock=lambda: 0.0
    )
    obs = engine.observer
    n = 100_000
    for i in range(n):
        rid = f"r{i}"
        t = i * 1e-3
        obs.on_request_arrived(
            t, RequestInfo(rid, 10, 4, traffic_class=f"class-{i % 7}", tenant=f"tenant-{i}")
        )
        obs.on_request_scheduled(t, rid, 1)
        obs.on_prefill_chunk(t, rid, 10, 0)
        obs.on_first_token(t + 1e-4, rid)
        obs.on_request_finished(t + 2e-4, rid, "ok", "length", None, 1, 0)
    inst.flush()
    families = list(text_string_to_metric_families(generate_latest(reg).decode()))
    tenants = {s.labels["tenant"] for f in families for s in f.samples if "tenant" in s.labels}
    assert len(tenants) == 51  # 50 kept + "other"
    assert OTHER in tenants
    combos = {
        (s.labels["traffic_class"], s.labels["tenant"])
        for f in families
        for s in f.samples
        if "tenant" in s.labels
    }
    assert len(combos) <= 7 * 51  # bounded by the caps, not by the 100,000 inputs
    base = {"model": "m", "replica": "r9"}
    assert (
        reg.get_sample_value(
            "fleetwatch_telemetry_label_overflow_total", {**base, "label": "tenant"}
        )
        == n - 50
    )
    assert (
        reg.get_sample_value(
            "fleetwatch_telemetry_label_overflow_total", {**base, "label": "traffic_class"}
        )
        == 0
    )
    total = sum(
        s.value for f in families for s in f.samples if s.name == "fleetwatch_requests_total"
    )
    assert total == n
    assert obs.requests == {}
    inst.detach()


def test_tenant_label_is_off_by_default():
    engine = NoEngine()
    reg = CollectorRegistry()
    instrument(engine, registry=reg, env={}, clock=lambda: 0.0, model="explicit", replica="r1")
    engine.observer.on_request_arrived(0.0, RequestInfo("x", 1, 1, tenant="acme"))
    engine.observer.on_request_finished(0.0, "x", "rejected", None, "QueueFull", 0, 0)
    text = generate_latest(reg).decode()
    assert "tenant" not in text and "acme" not in text
    assert (
        reg.get_sample_value(
            "fleetwatch_requests_total",
            {
                "model": "explicit",
                "replica": "r1",
                "traffic_class": "default",
                "status": "rejected",
                "finish_reason": "none",
            },
        )
        == 1
    )


def test_a_second_engine_on_the_same_registry_is_refused():
    import pytest

    reg = CollectorRegistry()
    instrument(NoEngine(), registry=reg, env={}, clock=lambda: 0.0)
    with pytest.raises(ValueError, match="Duplicated"):
        instrument(NoEngine(), registry=reg, env={}, clock=lambda: 0.0)
