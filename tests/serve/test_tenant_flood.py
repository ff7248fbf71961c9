"""The flooding-tenant test: one tenant floods long prompts into a shared reference engine; with
per-tenant token limits and the fair queue in front (``engine serve --tenant-limits``) the other
tenants' TTFT p99 stays within 1.2x of their solo baseline, and with nothing in front it does
not. The real engine runs on a virtual clock whose step time follows the step's tokens
(``fleetwatch.scenarios.tenant_flood``), so the run is exactly repeatable, whatever the load of
the machine running it."""

from __future__ import annotations

from fleetwatch.engine_probe.engine.scheduler import SchedulerOutput
from fleetwatch.scenarios.tenant_flood import (
    CONTENDED_SCENARIO,
    FLOOD_SCENARIO,
    StepTimedClock,
    fifo,
    flood_report,
)


def test_a_flooding_tenant_leaves_the_others_ttft_p99_within_1_2x_of_solo() -> None:
    r = flood_report(FLOOD_SCENARIO, seed=0)
    assert r["ratio_limits"] <= 1.2, r
    assert r["ratio_no_limits"] > 1.2 * 1.5, r  # nothing in front: far beyond
    assert r["others_limited"] == 0, r  # the others stay within their limits ...
    assert r["flood_limited"] > 10 * r["flood_served"] > 0, r  # ... the flooder does not


def test_the_step_time_follows_the_tokens_of_the_step() -> None:
    clock = StepTimedClock(0.01, 0.001)
    plan = SchedulerOutput()
    plan.decode = [object(), object()]  # type: ignore[list-item]
    plan.prefill = [(object(), 30)]  # type: ignore[list-item]
    clock.observe(plan)
    clock.begin_step()
    assert clock() == 0.0  # the step's start
    assert clock() == 0.01 + 0.001 * 32  # after the forward pass: 30 prefill + 2 decode tokens
    assert clock() == 0.01 + 0.001 * 32
    clock.end_step()
    assert clock() == 0.01 + 0.001 * 32  # still between steps


def test_under_contention_the_fair_queue_lets_the_others_in_before_the_flood() -> None:
    """Limits too generous to stop the flooder and every slot taken: FIFO makes the others
    queue behind the flood's backlog; the fair queue lets each of them in at the next free
    slot."""
    sc = CONTENDED_SCENARIO
    names = [o.name for o in sc.others]
    in_order = sc.run(limits=fifo(sc.limits))
    fair = sc.run(limits=sc.limits)
    assert not in_order.limited and not fair.limited  # nobody is held back by a bucket
    assert len(fair.ttft["flood"]) == len(in_order.ttft["flood"]) > 0  # the flood is served
    assert fair.p50(names) < in_order.p50(names) / 4
    assert fair.p99(names) < in_order.p99(names) / 2
