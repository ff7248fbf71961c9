"""Abort frees blocks at once; injected faults behave as configured and are reported."""

from __future__ import annotations

from fleetwatch.engine_probe.engine import FaultConfig
from fleetwatch.engine_probe.engine.event_log import EventLog


def test_abort_of_running_request_frees_its_blocks_at_once(make_engine) -> None:
    log = EventLog()
    engine = make_engine(observer=log)
    rid = engine.add_request(list(range(1, 30)), max_tokens=50)
    other = engine.add_request([7, 8, 9], max_tokens=50)
    for _ in range(3):
        engine.step()
    used = engine.scheduler.pool.num_used
    assert engine.abort(rid)
    assert engine.scheduler.pool.num_used == used - 8  # 29 + 3 tokens in blocks of 4
    assert not engine.abort(rid)
    outs = engine.step()
    assert outs[0].request_id == rid and outs[0].finished and outs[0].status == "aborted"
    assert engine.abort(other) and engine.scheduler.pool.num_used == 0
    engine.scheduler.pool.check()
    assert log.for_request(rid)[-1] == "request_finished"


def test_abort_while_waiting_goes_straight_to_finished(make_engine) -> None:
    log = EventLog()
    engine = make_engine(observer=log)
    rid = engine.add_request([1, 2, 3], max_tokens=5)
    assert engine.abort(rid)
    assert log.for_request(rid) == ["request_arrived", "request_finished"]
    assert engine.has_unfinished()  # the aborted output is still to be handed out
    [out] = engine.step()
    assert (out.status, out.finish_reason) == ("aborted", "abort")
    assert not engine.has_unfinished()


def test_requests_larger_than_the_pool_or_over_the_queue_are_rejected(make_engine) -> None:
    log = EventLog()
    engine = make_engine(num_blocks=4, block_size=4, max_waiting=1, observer=log)
    big = engine.add_request(list(range(1, 15)), max_tokens=4)  # 18 tokens > 16 slots
    ok = engine.add_request([1, 2], max_tokens=2)
    full = engine.add_request([1, 2], max_tokens=2)
    outs = {o.request_id: o for o in engine.step()}
    assert (outs[big].status, outs[big].error_type) == ("rejected", "KVCapacityExceeded")
    assert (outs[full].status, outs[full].error_type) == ("rejected", "QueueFull")
    assert ok not in outs or not outs[ok].finished


def test_healthy_engine_reports_no_faults(make_engine) -> None:
    assert make_engine().active_faults == {}


def test_slowdown_sleeps_k_minus_one_times_compute(make_engine) -> None:
    now = [0.0]
    slept: list[float] = []

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    engine = make_engine(faults=FaultConfig(slowdown=3.0), clock=clock, sleep=sleep)
    assert engine.active_faults == {"slowdown": 3.0}
    log = EventLog()
    engine.attach(log)
    engine.add_request([1, 2, 3], max_tokens=2)
    engine.step()
    # compute spans two clock reads 0.5 s apart: 2 x 0.5 s of injected sleep
    assert slept == [1.0]
    assert log.steps[0].duration_s == 1.5 + 0.5  # t1 read again after the sleep


def test_error_rate_fails_that_fraction_with_injected_fault(make_engine, make_prompts) -> None:
    engine = make_engine(faults=FaultConfig(error_rate=0.3, seed=5), num_blocks=512)
    assert engine.active_faults == {"error_rate": 0.3}
    ids = [engine.add_request(p, max_tokens=3) for p in make_prompts(200, 2, 6)]
    status: dict[str, tuple] = {}
    while engine.has_unfinished():
        for o in engine.step():
            if o.finished:
                status[o.request_id] = (o.status, o.error_type)
    errors = [rid for rid in ids if status[rid] == ("error", "InjectedFault")]
    assert 40 <= len(errors) <= 80
    assert all(status[rid] == ("ok", None) for rid in ids if rid not in errors)
    assert engine.scheduler.pool.num_used == 0


def test_stall_every_n_steps(make_engine) -> None:
    slept: list[float] = []
    engine = make_engine(
        faults=FaultConfig(stall_every_steps=3, stall_s=2.0), clock=lambda: 0.0, sleep=slept.append
    )
    assert engine.active_faults == {"stall_every_steps": 3.0, "stall_s": 2.0}
    engine.add_request([1, 2], max_tokens=7)
    while engine.has_unfinished():
        engine.step()
    assert slept == [2.0, 2.0]  # 7 steps: stalls after steps 3 and 6


def test_set_faults_switches_an_error_burst_on_and_off_mid_run(make_engine, make_prompts) -> None:
    engine = make_engine(num_blocks=512)
    prompts = make_prompts(60, 2, 6)

    def run(batch: list[list[int]]) -> list[str | None]:
        ids = [engine.add_request(p, max_tokens=2) for p in batch]
        status: dict[str, str | None] = {}
        while engine.has_unfinished():
            for o in engine.step():
                if o.finished:
                    status[o.request_id] = o.status
        return [status[rid] for rid in ids]

    assert set(run(prompts[:20])) == {"ok"}
    engine.set_faults(FaultConfig(error_rate=1.0, seed=1))
    assert engine.active_faults == {"error_rate": 1.0}
    assert set(run(prompts[20:40])) == {"error"}
    engine.set_faults(FaultConfig())
    assert engine.active_faults == {}
    assert set(run(prompts[40:])) == {"ok"}
