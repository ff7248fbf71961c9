"""KV block accounting stays exact under any interleaving of add / step / abort, including a pool
far too small for the load: free + used = total, and every block's reference count equals the
number of block tables holding it."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

MICRO = ModelConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    max_position_embeddings=256,
)


class KVAccounting(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine: LLMEngine | None = None
        self.ids: list[str] = []
        self.finished: set[str] = set()

    @precondition(lambda self: self.engine is None)
    @rule(
        num_blocks=st.integers(2, 24),
        block_size=st.sampled_from([1, 2, 4]),
        caching=st.booleans(),
        chunked=st.booleans(),
        budget=st.integers(1, 24),
        policy=st.sampled_from(["recompute", "restart"]),
        scheduling=st.sampled_from(["continuous", "continuous", "static"]),
    )
    def build(self, num_blocks, block_size, caching, chunked, budget, policy, scheduling) -> None:
        self.engine = LLMEngine(
            MICRO,
            EngineConfig(
                num_blocks=num_blocks,
                block_size=block_size,
                max_num_seqs=4,
                max_num_batched_tokens=budget,
                enable_prefix_caching=caching,
                enable_chunked_prefill=chunked,
                preemption=policy,
                scheduling=scheduling,
                watermark=0.1,
            ),
        )

    @precondition(lambda self: self.engine is not None)
    @rule(
        prompt=st.lists(st.integers(0, 7), min_size=1, max_size=20),
        max_tokens=st.integers(1, 12),
    )
    def add(self, prompt, max_tokens) -> None:
        assert self.engine is not None
        self.ids.append(self.engine.add_request(prompt, max_tokens=max_tokens))

    @precondition(lambda self: self.engine is not None)
    @rule(n=st.integers(1, 4))
    def step(self, n) -> None:
        assert self.engine is not None
        for _ in range(n):
            for out in self.engine.step():
                if out.finished:
                    assert out.request_id not in self.finished
                    self.finished.add(out.request_id)

    @precondition(lambda self: self.engine is not None and self.ids)
    @rule(data=st.data())
    def abort(self, data) -> None:
        assert self.engine is not None
        rid = data.draw(st.sampled_from(self.ids))
        was_open = rid in self.engine.unfinished_request_ids()
        assert self.engine.abort(rid) == was_open

    @invariant()
    def blocks_are_accounted(self) -> None:
        if self.engine is None:
            return
        sched = self.engine.scheduler
        pool = sched.pool
        pool.check()
        assert pool.num_free + pool.num_used == pool.num_blocks
        holders = Counter(
            b for r in [*sched.running, *sched.waiting, *sched.padding] for b in r.block_table
        )
        for b in range(pool.num_blocks):
            assert pool.refcount(b) == holders.get(b, 0)
        for r in sched.waiting:
            assert not r.block_table
        for r in sched.running:
            assert len(r.block_table) * sched.block_size >= r.num_computed
        assert len(sched.running) <= 4

    def teardown(self) -> None:
        if self.engine is None:
            return
        for _ in range(2000):
            if not self.engine.has_unfinished():
                break
            for out in self.engine.step():
                if out.finished:
                    self.finished.add(out.request_id)
        assert not self.engine.has_unfinished()
        assert set(self.ids) == self.finished
        assert self.engine.scheduler.pool.num_used == 0


KVAccounting.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
TestKVAccounting = KVAccounting.TestCase
