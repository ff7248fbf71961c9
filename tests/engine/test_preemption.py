"""Under a tight KV cache every request completes, and preemption + resume (recompute) yields
exactly the tokens of an uninterrupted greedy run."""

from __future__ import annotations

from fleetwatch.engine_probe.engine.event_log import EventLog


def test_tight_cache_completes_all_200_requests_with_uninterrupted_tokens(
    make_engine, make_prompts
) -> None:
    prompts = make_prompts(200, 4, 24, seed=11)
    max_tokens = [8 + (i * 7) % 17 for i in range(200)]
    # Uninterrupted reference: a pool big enough that nothing is ever preempted.
    roomy = make_engine(num_blocks=4096, block_size=4, max_num_seqs=256, max_num_batched_tokens=512)
    roomy_log = EventLog()
    roomy.attach(roomy_log)
    expected = roomy.generate(prompts, max_tokens)
    assert sum(s.preemptions for s in roomy_log.steps) == 0
    # Tight: the longest request needs 12 blocks of 4 tokens; the pool holds about four of them.
    tight = make_engine(num_blocks=48, block_size=4, max_num_seqs=64, max_num_batched_tokens=64)
    log = EventLog()
    tight.attach(log)
    got = tight.generate(prompts, max_tokens)
    preemptions = sum(s.preemptions for s in log.steps)
    assert preemptions > 20
    assert got == expected
    finished = [e for e in log.events if e.name == "request_finished"]
    assert len(finished) == 200 and all(e.args[1] == "ok" for e in finished)
    assert [len(t) for t in got] == max_tokens
    assert tight.scheduler.pool.num_used == 0
    tight.scheduler.pool.check()


def test_resume_keeps_generated_tokens_and_restart_discards_them(make_engine, make_prompts) -> None:
    prompts = make_prompts(40, 8, 16, seed=2)
    results = {}
    for policy in ("recompute", "restart"):
        engine = make_engine(num_blocks=24, block_size=4, preemption=policy)
        log = EventLog()
        engine.attach(log)
        results[policy] = (engine.generate(prompts, 24), log)
    (rec_tokens, rec_log), (res_tokens, res_log) = results["recompute"], results["restart"]
    assert rec_tokens == res_tokens  # greedy: a restart regenerates the same tokens
    rec_work = sum(s.tokens for s in rec_log.steps)
    res_work = sum(s.tokens for s in res_log.steps)
    assert sum(s.preemptions for s in rec_log.steps) > 0
    assert sum(s.preemptions for s in res_log.steps) > 0
    # Restart recomputes decode steps one token per step; recompute redoes them as one prefill.
    assert sum(s.decode_tokens for s in res_log.steps) > sum(s.decode_tokens for s in rec_log.steps)
    assert res_work >= rec_work


def test_seeded_sampling_survives_preemption(make_engine, make_prompts) -> None:
    from fleetwatch.engine_probe.engine import SamplingParams

    prompts = make_prompts(30, 6, 14, seed=4)
    sp = SamplingParams(temperature=0.8, top_p=0.9, seed=1234)
    roomy = make_engine(num_blocks=1024).generate(prompts, 20, sampling=sp)
    engine = make_engine(num_blocks=20)
    log = EventLog()
    engine.attach(log)
    tight = engine.generate(prompts, 20, sampling=sp)
    assert sum(s.preemptions for s in log.steps) > 0
    assert tight == roomy
    greedy = make_engine(num_blocks=1024).generate(prompts, 20)
    assert greedy != roomy
