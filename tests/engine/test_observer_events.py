"""Observer events come in the documented order, with the injected clock, and StepStats agree
exactly with the per-request events."""

from __future__ import annotations

import itertools
import re

from fleetwatch.engine_probe.engine.event_log import EventLog
from fleetwatch.telemetry.hooks import EngineObserver

ORDER = re.compile(
    r"^request_arrived request_scheduled( prefill_chunk)*"
    r"( preempted resumed( prefill_chunk)*)*"
    r" first_token( tokens| preempted resumed( prefill_chunk)*)*"
    r" request_finished$"
)


class FakeClock:
    def __init__(self) -> None:
        self.ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self.ticks))


def test_event_log_satisfies_the_protocol() -> None:
    assert isinstance(EventLog(), EngineObserver)


def test_every_request_follows_the_documented_order_under_preemption(
    make_engine, make_prompts
) -> None:
    log = EventLog()
    engine = make_engine(num_blocks=20, clock=FakeClock(), observer=log)
    prompts = make_prompts(25, 4, 20, seed=9)
    ids = [engine.add_request(p, max_tokens=12) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    assert sum(s.preemptions for s in log.steps) > 0
    for rid in ids:
        names = " ".join(log.for_request(rid))
        assert ORDER.match(names), names
    times = [e.t for e in log.events]
    assert times == sorted(times)


def test_step_stats_agree_with_request_events(make_engine, make_prompts) -> None:
    log = EventLog()
    engine = make_engine(num_blocks=24, observer=log, clock=FakeClock())
    for p in make_prompts(20, 3, 18, seed=1):
        engine.add_request(p, max_tokens=9)
    while engine.has_unfinished():
        engine.step()
    step_events: list[list] = [[]]
    for e in log.events:
        if e.name == "step":
            step_events[-1].append(e)
            step_events.append([])
        else:
            step_events[-1].append(e)
    for group in step_events[:-1]:
        stats = group[-1].args[0]
        chunks = [e for e in group if e.name == "prefill_chunk"]
        assert stats.prefill_tokens == sum(e.args[1] for e in chunks)
        tokens = [e for e in group if e.name == "tokens"]
        firsts = [e for e in group if e.name == "first_token"]
        decoded = len(tokens[0].args[0]) if tokens else 0
        resumed_samples = stats.decode_tokens + sum(1 for e in chunks) - decoded - len(firsts)
        assert resumed_samples >= 0
        assert stats.preemptions == sum(1 for e in group if e.name == "preempted")
        assert stats.kv_blocks_total == 24 and 0 <= stats.kv_blocks_used <= 24
        assert stats.bytes_read > 0 and stats.flops > 0
        assert stats.start_s < stats.end_s
    finished = [e for e in log.events if e.name == "request_finished"]
    firsts = sum(1 for e in log.events if e.name == "first_token")
    decoded = sum(len(e.args[0]) for e in log.events if e.name == "tokens")
    assert sum(e.args[4] for e in finished) == firsts + decoded == 20 * 9
    assert log.steps[-1].kv_blocks_used == 0 and log.steps[-1].num_running == 0


def test_scheduled_batch_size_is_the_running_count_after_admission(make_engine) -> None:
    log = EventLog()
    engine = make_engine(observer=log)
    for p in ([1, 2], [3, 4], [5, 6]):
        engine.add_request(p, max_tokens=2)
    engine.step()
    assert [e.args[1] for e in log.events if e.name == "request_scheduled"] == [1, 2, 3]


def test_several_observers_see_the_same_events_and_detach(make_engine) -> None:
    a, b = EventLog(), EventLog()
    engine = make_engine(clock=FakeClock())
    engine.attach(a)
    detach_b = engine.attach(b)
    engine.generate([[1, 2, 3]], 3)
    assert [e.name for e in a.events] == [e.name for e in b.events]
    detach_b()
    engine.generate([[1, 2, 3]], 3)
    assert len(a.events) > len(b.events)
    assert engine._obs is a


def test_step_cost_estimates_follow_the_model_shape(make_engine, tiny) -> None:
    log = EventLog()
    engine = make_engine(observer=log)
    for i in range(8):
        engine.add_request([i + 1] * 8, max_tokens=3)
    while engine.has_unfinished():
        engine.step()
    prefill, decode = log.steps[0], log.steps[1]
    assert (prefill.prefill_tokens, decode.decode_tokens) == (64, 8)
    weights = (
        engine.model.weight_bytes - tiny.vocab_size * tiny.hidden_size * 4
    )  # embedding: rows only
    assert decode.bytes_read > weights
    kv_token = 2 * tiny.num_layers * tiny.kv_dim * 4
    # weights + 8 embedding rows + 8 new K/V + 8 x 8 cached tokens read
    assert decode.bytes_read == weights + 8 * tiny.hidden_size * 4 + 8 * kv_token + 64 * kv_token
    matmul = 2 * (tiny.num_params - 2 * tiny.vocab_size * tiny.hidden_size)
    assert decode.flops > 8 * matmul and prefill.flops > 64 * matmul
