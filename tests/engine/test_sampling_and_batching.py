"""Sampling, stop conditions, static batching, bfloat16."""

from __future__ import annotations

from fleetwatch.engine_probe.engine import RequestParams, SamplingParams
from fleetwatch.engine_probe.engine.event_log import EventLog


def test_eos_stops_with_reason_stop(make_engine) -> None:
    engine = make_engine()
    [free_run] = engine.generate([[5, 6, 7]], 10)
    eos = free_run[3]
    first = free_run.index(eos)
    stop_at_eos = RequestParams(sampling=SamplingParams(eos_token_id=eos))
    rid = engine.add_request([5, 6, 7], max_tokens=10, params=stop_at_eos)
    outs = []
    while engine.has_unfinished():
        outs += [o for o in engine.step() if o.request_id == rid]
    tokens = [t for o in outs for t in o.new_token_ids]
    assert tokens == free_run[: first + 1]
    assert (outs[-1].status, outs[-1].finish_reason) == ("ok", "stop")


def test_length_limit_gives_reason_length(make_engine) -> None:
    engine = make_engine()
    engine.add_request([1, 2], max_tokens=3)
    last = None
    while engine.has_unfinished():
        for o in engine.step():
            last = o
    assert last is not None and (last.status, last.finish_reason) == ("ok", "length")


def test_seeded_sampling_is_reproducible_and_seed_dependent(make_engine, make_prompts) -> None:
    prompts = make_prompts(6, 3, 8, seed=1)
    a = make_engine().generate(prompts, 15, sampling=SamplingParams(temperature=1.0, seed=7))
    b = make_engine().generate(prompts, 15, sampling=SamplingParams(temperature=1.0, seed=7))
    c = make_engine().generate(prompts, 15, sampling=SamplingParams(temperature=1.0, seed=8))
    assert a == b and a != c


def test_tiny_top_p_is_greedy(make_engine, make_prompts) -> None:
    prompts = make_prompts(4, 3, 8, seed=2)
    greedy = make_engine().generate(prompts, 10)
    nucleus = make_engine().generate(
        prompts, 10, sampling=SamplingParams(temperature=1.0, top_p=1e-6, seed=3)
    )
    assert nucleus == greedy


def test_static_batching_admits_only_when_the_batch_is_empty(make_engine, make_prompts) -> None:
    prompts = make_prompts(8, 3, 6, seed=3)
    limits = [2, 20, 2, 2, 2, 2, 2, 2]
    continuous = make_engine(max_num_seqs=4).generate(prompts, limits)
    log = EventLog()
    engine = make_engine(max_num_seqs=4, scheduling="static", observer=log)
    assert engine.generate(prompts, limits) == continuous
    scheduled_at = [e.t for e in log.events if e.name == "request_scheduled"]
    finished_at = {e.args[0]: e.t for e in log.events if e.name == "request_finished"}
    second_batch_start = scheduled_at[4]
    assert all(t < second_batch_start for rid, t in list(finished_at.items())[:4])
    assert max(s.num_running for s in log.steps) <= 4


def test_bfloat16_runs_and_mostly_agrees_with_float32(make_engine, make_prompts) -> None:
    prompts = make_prompts(4, 5, 9, seed=5)
    f32 = make_engine().generate(prompts, 4)
    bf16 = make_engine(dtype="bfloat16").generate(prompts, 4)
    assert all(len(t) == 4 for t in bf16)
    assert sum(x[0] == y[0] for x, y in zip(f32, bf16, strict=True)) >= 2


def test_static_batch_keeps_finished_members_as_padding_until_the_longest_ends(make_engine) -> None:
    log = EventLog()
    engine = make_engine(scheduling="static", observer=log)
    short = engine.add_request([1, 2, 3, 4], max_tokens=2)
    engine.add_request([5, 6, 7, 8], max_tokens=9)
    while engine.has_unfinished():
        engine.step()
    short_done = next(
        e.t for e in log.events if e.name == "request_finished" and e.args[0] == short
    )
    after = [s for s in log.steps if s.start_s > short_done]
    assert after and all(s.decode_tokens == 1 for s in after)
    # the finished member still holds its 2 blocks (the long one holds 2, then 3)
    assert all(s.kv_blocks_used >= 2 + 2 for s in after[:-1])
    assert engine.scheduler.pool.num_used == 0 and not engine.scheduler.padding
