"""Per-tenant token limits through real HTTP (the official ``openai`` SDK on loopback): 429 with
``Retry-After`` from the bucket's refill, 400 for a request that can never fit, counters per
tenant with bounded labels, the tenant on the request's record; and the fair queue's order on
the event loop."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from fleetwatch.engine_probe.engine import EngineConfigError
from fleetwatch.engine_probe.serve import ServerConfig
from fleetwatch.engine_probe.serve.command.tenant_options import tenant_limits
from fleetwatch.engine_probe.serve.front.tenants import (
    Refusal,
    TenantAdmission,
    TenantGate,
    TenantLimits,
    Ticket,
)
from fleetwatch.engine_probe.serve.request_context import TENANT_HEADER
from fleetwatch.telemetry.sink import MemoryRecordSink

MODEL = "reference"
LIMITS = TenantLimits(rate_per_s=2.0, burst=100.0, max_tenants=3, weights=(("gold", 2.0),))


class FrozenClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _client(url: str, tenant: str | None) -> openai.OpenAI:
    headers = {TENANT_HEADER: tenant} if tenant is not None else {}
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60, default_headers=headers
    )


@pytest.fixture()
def served(kit: Any) -> Iterator[tuple[Any, FrozenClock, MemoryRecordSink]]:
    sink = MemoryRecordSink()
    config = ServerConfig(tenants=LIMITS)
    with kit.live_server(kit.make_engine(), config=config, record_sink=sink) as h:
        clock = FrozenClock()  # the buckets' clock: refill only when the test says so
        old = h.server.tenants.gate
        h.server.tenants.gate = TenantGate(LIMITS, 8, clock=clock, metrics=old.metrics)
        yield h, clock, sink


def _sample(h: Any, name: str, **labels: str) -> float:
    value = h.registry.get_sample_value(name, {"replica": "replica-0", **labels})
    return float(value or 0.0)


def _complete(client: openai.OpenAI, max_tokens: int, prompt_tokens: int = 5) -> Any:
    prompt = list(range(1, prompt_tokens + 1))
    return client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens)


def test_over_the_rate_is_429_with_retry_after_from_the_refill(served: Any) -> None:
    h, clock, sink = served
    client = _client(h.url, "acme")
    first = _complete(client, 50)  # reserves 5 + 50 of 100, uses all of it
    assert first.usage is not None and first.usage.completion_tokens == 50
    with pytest.raises(openai.RateLimitError) as err:
        _complete(client, 50)  # 55 wanted, 45 left: 10 more at 2 per second
    assert err.value.status_code == 429
    assert err.value.response.headers["retry-after"] == "5"
    body = err.value.body
    assert isinstance(body, dict) and body["type"] == "rate_limit_exceeded"
    assert "acme" in body["message"]
    assert _complete(_client(h.url, "beta"), 50).usage is not None  # another bucket (see below)
    clock.now += 5.0
    assert _complete(client, 50).usage is not None  # refilled exactly enough
    # counted once as a 429 response, and per tenant beside it
    assert _sample(h, "fleetwatch_http_responses_total", code="429") == 1
    assert _sample(h, "fleetwatch_tenant_requests_total", tenant="acme", outcome="limited") == 1
    assert _sample(h, "fleetwatch_tenant_requests_total", tenant="acme", outcome="admitted") == 2
    assert _sample(h, "fleetwatch_tenant_tokens_charged_total", tenant="acme") == 110
    h.instrumentation.flush(10)
    tenants = {r.tenant for r in sink.records if r.status == "ok"}
    assert tenants == {"acme", "other"}  # cap 3 (default, gold, acme): beta shares 'other'
    [limited] = [r for r in sink.records if r.status == "rejected"]
    assert (limited.tenant, limited.error_type) == ("acme", "TenantRateLimited")


def test_a_request_over_the_burst_is_400_naming_the_limit_never_429(served: Any) -> None:
    h, _, _ = served
    with pytest.raises(openai.BadRequestError) as err:
        _complete(_client(h.url, "acme"), 96)  # 5 + 96 > burst 100: could never be admitted
    body = err.value.body
    assert isinstance(body, dict)
    assert body["code"] == "tenant_burst_exceeded" and body["param"] == "max_tokens"
    assert "burst of 100" in body["message"]
    assert _sample(h, "fleetwatch_http_responses_total", code="400") == 1
    assert _sample(h, "fleetwatch_http_responses_total", code="429") == 0
    assert _sample(h, "fleetwatch_tenant_requests_total", tenant="acme", outcome="too_large") == 1


def test_tenants_are_bounded_and_absent_means_default(served: Any) -> None:
    h, _, _ = served
    _complete(_client(h.url, None), 1)
    for i in range(4):  # cap 3: default and gold are known, t0 is the third, the rest fold
        _complete(_client(h.url, f"t{i}"), 1)
    families = {
        s.labels["tenant"]
        for f in h.registry.collect()
        if f.name == "fleetwatch_tenant_requests"
        for s in f.samples
    }
    assert families == {"default", "t0", "other"}
    assert _sample(h, "fleetwatch_tenant_requests_total", tenant="other", outcome="admitted") == 3
    assert _sample(h, "fleetwatch_tenant_overflow_total") == 3
    with pytest.raises(openai.BadRequestError) as err:
        _complete(_client(h.url, "no spaces{}"), 1)
    assert isinstance(err.value.body, dict) and err.value.body["param"] == TENANT_HEADER


def test_limits_off_register_nothing_and_the_tenant_still_reaches_the_record(kit: Any) -> None:
    sink = MemoryRecordSink()
    with kit.live_server(kit.make_engine(), record_sink=sink) as h:
        assert h.server.tenants is None
        for _ in range(3):
            _complete(_client(h.url, "acme"), 60)  # no limit applies
        names = {f.name for f in h.registry.collect()}
        h.instrumentation.flush(10)
    assert not any(n.startswith("fleetwatch_tenant") for n in names)
    assert [r.tenant for r in sink.records] == ["acme"] * 3


def test_the_fair_queue_lets_a_light_tenant_pass_a_heavy_backlog() -> None:
    """One slot: while heavy's first request runs, heavy queues three more and light one;
    light's goes next (its virtual finish is earliest), not after heavy's backlog."""

    async def go() -> list[str]:
        admission = TenantAdmission(TenantGate(TenantLimits(burst=1e6), 1, clock=FrozenClock()))
        order: list[str] = []

        async def request(tenant: str, n: int) -> None:
            hold = admission.admit(tenant, 100, 10)
            assert not isinstance(hold, Refusal)
            try:
                await hold.wait()
                order.append(f"{tenant}{n}")
                await asyncio.sleep(0)  # "runs" until the next request is let in
            finally:
                hold.done(10)

        first = admission.admit("heavy", 100, 10)
        assert not isinstance(first, Refusal)
        await first.wait()  # takes the only slot
        order.append("heavy0")
        tasks = [asyncio.create_task(request("heavy", n)) for n in (1, 2, 3)]
        tasks.append(asyncio.create_task(request("light", 1)))
        await asyncio.sleep(0)
        assert admission.gate.queued == {"heavy": 3, "light": 1}
        first.done(10)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(go()) == ["heavy0", "light1", "heavy1", "heavy2", "heavy3"]


def test_a_request_cancelled_in_the_queue_is_refunded_and_skipped() -> None:
    async def go() -> tuple[float, int]:
        clock = FrozenClock()
        gate = TenantGate(TenantLimits(rate_per_s=1.0, burst=1000.0), 1, clock=clock)
        admission = TenantAdmission(gate)
        running = admission.admit("a", 100, 100)
        queued = admission.admit("a", 100, 100)
        assert not isinstance(running, Refusal) and not isinstance(queued, Refusal)
        await running.wait()
        waiter = asyncio.create_task(queued.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        queued.done(0)
        running.done(100)
        bucket = gate.limiter.bucket("a")
        assert bucket is not None
        return bucket.level, gate.in_engine

    level, in_engine = asyncio.run(go())
    assert level == pytest.approx(800.0)  # only the request that ran was charged (100 + 100)
    assert in_engine == 0


def test_flags_build_the_limits_and_refuse_tuning_without_the_switch() -> None:
    limits = tenant_limits(True, rate=10, weights=["gold=3", "free=0.5"], max_tenants=8)
    assert limits is not None
    assert limits.rate_per_s == 10 and limits.weights == (("gold", 3.0), ("free", 0.5))
    assert tenant_limits(False) is None
    with pytest.raises(EngineConfigError, match="--tenant-rate needs --tenant-limits"):
        tenant_limits(False, rate=10)
    with pytest.raises(EngineConfigError, match="--tenant-weight must be NAME=WEIGHT"):
        tenant_limits(True, weights=["gold"])
    with pytest.raises(EngineConfigError, match="--tenant-burst must be finite and > 0"):
        tenant_limits(True, burst=0)
    limits = tenant_limits(True, burst=500, overrides=["gold=80:6000", "free=1"])
    assert limits is not None and limits.overrides == (("gold", 80, 6000), ("free", 1, 500))
    with pytest.raises(EngineConfigError, match="--tenant-limit must be NAME=RATE"):
        tenant_limits(True, overrides=["gold=fast"])
    with pytest.raises(EngineConfigError, match="--tenant-limit needs --tenant-limits"):
        tenant_limits(False, overrides=["gold=1"])


def test_a_tenant_with_its_own_limit_gets_its_own_rate_and_burst() -> None:
    clock = FrozenClock()
    limits = TenantLimits(rate_per_s=1.0, burst=100.0, overrides=(("gold", 10.0, 1000.0),))
    gate = TenantGate(limits, 4, clock=clock)
    assert isinstance(gate.admit("gold", 500, 400), Ticket)  # over the others' burst of 100
    refused = gate.admit("gold", 90, 20)  # 100 left, 110 wanted: 10 missing at 10/s
    assert isinstance(refused, Refusal) and refused.headers == {"Retry-After": "1"}
    too_large = gate.admit("acme", 90, 20)  # 110 > the others' burst
    assert isinstance(too_large, Refusal) and too_large.error.status == 400
    assert "burst of 100" in too_large.error.message


def test_the_cli_refuses_a_bad_tenant_flag_before_starting() -> None:
    import typer

    from fleetwatch.engine_probe.serve.command.cli import serve

    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve", "--tenant-limits", "--tenant-weight", "gold=-1"])
    assert isinstance(result.exception, EngineConfigError)
    assert "--tenant-weight must be NAME=WEIGHT" in str(result.exception)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate_per_s": math.inf},
        {"burst": math.nan},
        {"prompt_weight": math.inf},
        {"weights": (("gold", math.inf),)},
        {"overrides": (("gold", 5.0, math.inf),)},
        {"max_tenants": 2, "weights": (("a", 2.0),), "overrides": (("b", 1.0, 9.0),)},
    ],
)
def test_limits_refuse_non_finite_numbers_and_more_named_tenants_than_the_cap(
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match=r"finite|tenants are named"):
        TenantLimits(**kwargs)
    # named tenants within the cap (the default counted once) are each kept apart
    limits = TenantLimits(max_tenants=3, weights=(("a", 2.0),), overrides=(("a", 1.0, 9.0),))
    gate = TenantGate(limits, 4, clock=FrozenClock())
    assert [gate.tenant(n) for n in ("default", "a", "b", "c")] == ["default", "a", "b", "other"]


def test_a_request_the_engine_refuses_costs_its_tenant_nothing(kit: Any) -> None:
    # max_waiting 0: the engine refuses every arrival (QueueFull, 429) before any output
    config = ServerConfig(tenants=LIMITS)
    with kit.live_server(kit.make_engine(max_waiting=0), config=config) as h:
        clock = FrozenClock()
        old = h.server.tenants.gate
        h.server.tenants.gate = gate = TenantGate(LIMITS, 8, clock=clock, metrics=old.metrics)
        for _ in range(3):
            with pytest.raises(openai.RateLimitError):
                _complete(_client(h.url, "acme"), 50)
        bucket = gate.limiter.bucket("acme")
        assert bucket is not None and bucket.level == pytest.approx(100.0)  # all refunded
        assert gate.in_engine == 0
        assert _sample(h, "fleetwatch_tenant_tokens_charged_total", tenant="acme") == 0
        assert (
            _sample(h, "fleetwatch_tenant_requests_total", tenant="acme", outcome="admitted") == 3
        )
