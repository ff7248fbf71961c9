"""Prefix-cache hits give the same tokens as computing the prompt from scratch, and are counted."""

from __future__ import annotations

import random

from fleetwatch.engine_probe.engine.event_log import EventLog


def _shared_prefix_prompts(n: int, prefix_len: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(512) for _ in range(prefix_len)]
    return [prefix + [rng.randrange(512) for _ in range(rng.randint(1, 9))] for _ in range(n)]


def test_cache_hits_yield_the_same_tokens_as_no_cache(make_engine) -> None:
    prompts = _shared_prefix_prompts(24, 21, seed=7)
    plain = make_engine(enable_prefix_caching=False).generate(prompts, 10)
    engine = make_engine(enable_prefix_caching=True, max_num_seqs=4)
    log = EventLog()
    engine.attach(log)
    cached = engine.generate(prompts, 10)
    assert cached == plain
    hits = sum(s.prefix_cache_hits for s in log.steps)
    # 21 shared tokens = 5 full blocks of 4; every request after the first batch of 4 reuses them.
    assert hits >= 20 * 20
    per_request = [e.args[5] for e in log.events if e.name == "request_finished"]
    assert sum(per_request) == hits
    assert max(per_request) == 20
    chunks = [e.args[2] for e in log.events if e.name == "prefill_chunk"]
    assert sum(chunks) == hits


def test_repeated_prompt_reuses_all_but_the_last_token(make_engine) -> None:
    engine = make_engine()
    prompt = list(range(1, 17))  # exactly 4 blocks of 4
    [first] = engine.generate([prompt], 5)
    log = EventLog()
    engine.attach(log)
    [second] = engine.generate([prompt], 5)
    assert first == second
    # The last block is recomputed so there is a token to sample from: 3 of 4 blocks hit.
    assert [e.args[1:] for e in log.events if e.name == "prefill_chunk"] == [(4, 12)]
    assert log.steps[0].prefix_cache_queries == 16 and log.steps[0].prefix_cache_hits == 12


def test_free_cached_blocks_are_evicted_least_recently_used_first(make_engine) -> None:
    engine = make_engine(num_blocks=12, block_size=4)
    a, b = list(range(1, 13)), list(range(100, 112))
    engine.generate([a], 1)  # blocks of a freed, still cached
    engine.generate([b], 1)  # blocks of b freed after a's, so a's are older
    c = list(range(200, 236))  # needs 9 blocks: evicts the 9 least recently freed (all of a)
    engine.generate([c], 1)
    log = EventLog()
    engine.attach(log)
    engine.generate([b], 1)
    engine.generate([a], 1)
    hits = [s.prefix_cache_hits for s in log.steps]
    assert hits[0] == 8  # b's first two blocks survived
    assert hits[1] == 0  # a's were evicted
    engine.scheduler.pool.check()
