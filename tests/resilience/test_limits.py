"""Per-tenant cost limits (reservation and settlement) and weighted fair queueing."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.limits import CostWeights, FairQueue, TenantLimiter, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_reservation_is_the_worst_case_and_settlement_refunds_the_unused_part():
    clock = Clock()
    lim = TenantLimiter({"a": (10.0, 100.0)}, weights=CostWeights(1.0, 3.0), clock=clock)
    r = lim.admit("a", 10, 20)  # 10 + 3 x 20
    assert r is not None and r.reserved == 70
    assert lim.bucket("a").level == pytest.approx(30)
    assert lim.admit("a", 10, 20) is None  # 30 left, 70 needed
    assert lim.settle(r, 5) == 25  # 10 + 3 x 5
    assert lim.bucket("a").level == pytest.approx(75)
    with pytest.raises(ValueError, match="already settled"):
        lim.settle(r, 5)


def test_unknown_tenants_are_refused_unless_a_default_is_given():
    assert TenantLimiter({}).admit("x", 1, 1) is None
    assert TenantLimiter({}, default=(1.0, 10.0)).admit("x", 1, 1) is not None


def test_bad_settings_are_refused():
    with pytest.raises(ResilienceConfigError):
        TokenBucket(0.0, 1.0)
    with pytest.raises(ResilienceConfigError):
        FairQueue({"a": 0.0})
    with pytest.raises(ResilienceConfigError):
        CostWeights(-1.0, 1.0)


_steps = st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 30.0)), min_size=1, max_size=60)


@given(steps=_steps, rate=st.floats(0.5, 20.0), burst=st.floats(1.0, 50.0))
def test_admitted_cost_never_exceeds_rate_over_any_window_beyond_burst(steps, rate, burst):
    clock = Clock()
    bucket = TokenBucket(rate, burst, clock)
    taken: list[tuple[float, float]] = []
    for dt, units in steps:
        clock.now += dt
        if bucket.try_take(units):
            taken.append((clock.now, units))
    for i, (start, _) in enumerate(taken):
        total = 0.0
        for at, units in taken[i:]:
            total += units
            assert total <= rate * (at - start) + burst + 1e-6


@given(
    requests=st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 80)), max_size=40
    ),
    w_in=st.floats(0.0, 2.0),
    w_out=st.floats(0.0, 4.0),
)
def test_settlement_conserves_units(requests, w_in, w_out):
    """With the clock still, the bucket ends at burst minus exactly what was charged."""
    burst = 10_000.0
    lim = TenantLimiter({"t": (1.0, burst)}, weights=CostWeights(w_in, w_out), clock=Clock())
    charged = 0.0
    open_ = []
    for prompt, max_out, used in requests:
        r = lim.admit("t", prompt, max_out)
        if r is not None:
            open_.append((r, used))
    for r, used in open_:
        c = lim.settle(r, used)
        assert 0.0 <= c <= r.reserved + 1e-9
        charged += c
    assert lim.bucket("t").level == pytest.approx(burst - charged, abs=1e-6)


@given(
    weights=st.lists(st.integers(1, 8), min_size=2, max_size=5),
    costs=st.lists(st.integers(1, 20), min_size=2, max_size=5),
)
def test_fair_shares_converge_to_the_weights_under_backlog(weights, costs):
    tenants = {f"t{i}": float(w) for i, w in enumerate(weights)}
    q: FairQueue[int] = FairQueue(tenants)
    cost_of = {t: costs[i % len(costs)] for i, t in enumerate(tenants)}
    served: Counter[str] = Counter()
    backlog = 4000  # cost units queued per tenant
    for t in tenants:
        for n in range(backlog // cost_of[t] + 1):
            q.push(t, n, cost_of[t])
    budget = backlog  # no share reaches 1, so every tenant stays backlogged
    total = 0.0
    while total < budget:
        t, _ = q.pop()
        served[t] += cost_of[t]
        total += cost_of[t]
    assert all(served[t] < backlog for t in tenants)
    weight_sum = sum(tenants.values())
    for t, w in tenants.items():
        assert served[t] / total == pytest.approx(w / weight_sum, abs=0.03)


def test_an_idle_tenant_saves_no_credit():
    q: FairQueue[str] = FairQueue({"a": 1.0, "b": 1.0})
    for n in range(100):
        q.push("a", f"a{n}", 1.0)
    for _ in range(50):
        q.pop()
    for n in range(10):
        q.push("b", f"b{n}", 1.0)
    order = [q.pop()[0] for _ in range(20)]
    assert order.count("b") == 10 and order.count("a") == 10  # alternates, no catch-up burst


@given(
    rate=st.floats(0.5, 50.0),
    burst=st.floats(1.0, 100.0),
    taken=st.floats(0.0, 1.0),
    want=st.floats(0.0, 1.2),
)
def test_seconds_until_is_when_the_bucket_first_covers_the_units(rate, burst, taken, want):
    clock = Clock()
    bucket = TokenBucket(rate, burst, clock)
    assert bucket.try_take(taken * burst)
    units = want * burst
    wait = bucket.seconds_until(units)
    if units > burst:
        assert wait == float("inf")
        return
    if wait > 1e-6:  # a moment earlier it does not cover them
        clock.now += wait * 0.99
        assert bucket.level < units
        clock.now -= wait * 0.99
    clock.now += wait
    assert bucket.level == pytest.approx(units) or bucket.level >= units


def test_release_refunds_the_whole_reservation_once():
    clock = Clock()
    lim = TenantLimiter({"a": (1.0, 50.0)}, weights=CostWeights(1.0, 2.0), clock=clock)
    r = lim.admit("a", 10, 10)
    assert r is not None and lim.bucket("a").level == pytest.approx(20)
    lim.release(r)
    assert lim.bucket("a").level == pytest.approx(50)
    with pytest.raises(ValueError, match="already settled"):
        lim.release(r)


def test_a_cancelled_item_does_not_push_its_tenants_later_items_back():
    q: FairQueue[str] = FairQueue({})
    q.push("a", "a1", 1000.0)  # a big request, cancelled while queued
    q.forget("a", 1000.0)
    q.push("a", "a2", 10.0)
    q.push("b", "b1", 10.0)
    served = [q.pop()[1] for _ in range(3)]
    assert [s for s in served if s != "a1"] == ["a2", "b1"]  # a2 is not behind a1's cost
