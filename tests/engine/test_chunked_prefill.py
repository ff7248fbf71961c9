"""Chunked prefill spreads a long prompt over steps without changing any token."""

from __future__ import annotations

from fleetwatch.engine_probe.engine.event_log import EventLog


def test_chunked_prefill_yields_the_same_tokens_as_whole_prompt_prefill(
    make_engine, make_prompts
) -> None:
    prompts = make_prompts(12, 30, 90, seed=3)
    whole = make_engine(
        enable_chunked_prefill=False, max_num_batched_tokens=256, enable_prefix_caching=False
    )
    chunked = make_engine(
        enable_chunked_prefill=True, max_num_batched_tokens=16, enable_prefix_caching=False
    )
    log = EventLog()
    chunked.attach(log)
    assert chunked.generate(prompts, 12) == whole.generate(prompts, 12)
    assert max(s.tokens for s in log.steps) <= 16
    per_request: dict[str, int] = {}
    for e in log.events:
        if e.name == "prefill_chunk":
            per_request[e.args[0]] = per_request.get(e.args[0], 0) + 1
    assert max(per_request.values()) >= 3


def test_a_long_prompt_does_not_freeze_running_decodes(make_engine) -> None:
    engine = make_engine(max_num_batched_tokens=16, enable_prefix_caching=False)
    log = EventLog()
    engine.attach(log)
    short = engine.add_request([1, 2, 3], max_tokens=40)
    for _ in range(3):
        engine.step()
    engine.add_request(list(range(5, 205)), max_tokens=2)
    steps_before = len(log.steps)
    while engine.has_unfinished():
        engine.step()
    during = log.steps[steps_before : steps_before + 12]
    # While the 200-token prompt is prefilled in chunks, the short request decodes every step.
    assert all(s.decode_tokens == 1 and s.prefill_tokens == 15 for s in during)
    assert log.for_request(short).count("tokens") == 39


def test_unchunked_prompt_longer_than_the_budget_gets_a_step_of_its_own(make_engine) -> None:
    engine = make_engine(enable_chunked_prefill=False, max_num_batched_tokens=8, num_blocks=16)
    log = EventLog()
    engine.attach(log)
    assert [len(t) for t in engine.generate([[1] * 3, list(range(1, 31)), [2] * 3], 4)] == [4, 4, 4]
    assert max(s.prefill_tokens for s in log.steps) == 30
