"""``TenantGate`` (the logic behind ``engine serve --tenant-limits``) under random sequences of
admissions, cancellations and finishes: slots are never exceeded, nothing admitted is lost or
let in twice, queue counts match, and the buckets end at exactly burst minus what was charged."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetwatch.engine_probe.serve.front.tenants import Refusal, TenantGate, TenantLimits, Ticket

TENANTS = ("a", "b", "c")
_ops = st.lists(
    st.tuples(
        st.sampled_from(("admit", "admit", "cancel", "finish")),
        st.sampled_from(TENANTS),
        st.integers(1, 60),  # prompt tokens
        st.integers(0, 60),  # max tokens
        st.integers(0, 100),  # picks a ticket / output tokens
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, slots=st.integers(1, 4), w_out=st.floats(0.0, 3.0))
def test_slots_tickets_and_units_stay_consistent(ops, slots, w_out) -> None:
    limits = TenantLimits(rate_per_s=1.0, burst=400.0, output_weight=w_out, weights=(("a", 3.0),))
    gate = TenantGate(limits, slots, clock=lambda: 0.0)  # a still clock: no refill
    queued: list[Ticket] = []
    running: list[Ticket] = []
    charged: Counter[str] = Counter()
    let_in: list[Ticket] = []  # held, so no id is reused

    def enter(tickets: list[Ticket]) -> None:
        for t in tickets:
            assert all(t is not seen for seen in let_in) and not t.cancelled
            let_in.append(t)
            queued.remove(t)
            running.append(t)

    for op, tenant, prompt, max_tokens, pick in ops:
        if op == "admit":
            got = gate.admit(tenant, prompt, max_tokens)
            if isinstance(got, Refusal):
                assert got.error.status == 429
                assert int(got.headers["Retry-After"]) >= 1
                continue
            queued.append(got)
            enter(gate.enqueue(got))
        elif op == "cancel" and queued:
            t = queued.pop(pick % len(queued))
            gate.cancel(t)
        elif op == "finish" and running:
            t = running.pop(pick % len(running))
            used = min(pick, t.reservation.max_output_units)
            before = gate.limiter.bucket(t.tenant).level  # type: ignore[union-attr]
            enter(gate.finish(t, pick))
            after = gate.limiter.bucket(t.tenant).level  # type: ignore[union-attr]
            charged[t.tenant] += t.reservation.reserved - (after - before)
            assert t.reservation.reserved - (after - before) == pytest.approx(
                prompt_cost(t) + w_out * used
            )
        assert gate.in_engine == len(running) <= gate.slots
        assert sum(gate.queued.values()) == len(queued)
        if queued:
            assert gate.in_engine == gate.slots  # nobody waits while a slot is free
    for t in queued:  # leave first: finishing would let them in
        gate.cancel(t)
    for t in running:
        assert gate.finish(t, 0) == []
        charged[t.tenant] += prompt_cost(t)
    assert gate.in_engine == 0 and sum(gate.queued.values()) == 0
    for tenant in TENANTS:
        bucket = gate.limiter.bucket(tenant)
        assert bucket is not None
        assert bucket.level == pytest.approx(400.0 - charged[tenant])


def prompt_cost(t: Ticket) -> float:
    return float(t.reservation.input_units)  # prompt weight 1


def test_a_reservation_over_the_burst_is_refused_as_never_fitting_not_rate_limited() -> None:
    gate = TenantGate(TenantLimits(burst=100.0), 1, clock=lambda: 0.0)
    got = gate.admit("a", 50, 51)
    assert isinstance(got, Refusal) and got.error.status == 400
    assert got.error.param == "max_tokens" and got.headers == {}
    assert isinstance(gate.admit("a", 50, 50), Ticket)  # exactly the burst fits
