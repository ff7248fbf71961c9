"""The scheduler: which requests compute how many tokens in the next step.

Policy (close to vLLM's v1 scheduler):

- Running requests go first, oldest admission first: a decoding request computes one token, a
  prefilling one a chunk of its remaining prompt (as much as the step's token budget allows when
  chunked prefill is on; the whole rest otherwise, and a rest longer than the budget gets a
  step to itself, so a long prompt is delayed but never stuck).
- When a running request needs a block and none is free, the most recently admitted running
  request is preempted: its blocks are freed and it goes back to the head of the waiting queue.
  Under ``recompute`` it keeps its generated tokens and, once re-admitted, recomputes prompt +
  generated tokens (a prefill) and continues; under ``restart`` its generated tokens are dropped
  and regenerated from the prompt, the ones already handed out replayed (forced, not re-sampled:
  see ``Request.replay``) so the stream a client saw is never contradicted.
- Waiting requests are admitted in order while the running set has room, the budget lasts and
  the pool keeps ``watermark`` of its blocks free after the admission (ignored when nothing runs,
  so a lone request can always start). Full prompt blocks found in the prefix cache are reused.
  No admission happens in a step that preempted.
- ``static`` scheduling admits a whole new batch only when the running set is empty, and a
  member that finishes early stays in the batch as padding (its last position is recomputed each
  step and its blocks stay held) until the longest member finishes, as in a padded batch tensor.

Pure Python: it hands out block ids and token counts, the model runner does the tensors.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from fleetwatch.engine_probe.engine.block_pool import BlockPool, chain_hashes
from fleetwatch.engine_probe.engine.config import EngineConfig
from fleetwatch.engine_probe.engine.request import Request, RequestState

__all__ = ["Scheduler", "SchedulerOutput"]


@dataclass(slots=True)
class SchedulerOutput:
    """One step's plan. ``prefill`` pairs a request with the number of tokens it computes."""

    decode: list[Request] = field(default_factory=list)
    prefill: list[tuple[Request, int]] = field(default_factory=list)
    admitted: list[tuple[Request, int, bool]] = field(default_factory=list)
    """Admissions in order: (request, running count after it, first admission?)."""
    preempted: list[Request] = field(default_factory=list)
    padding: list[Request] = field(default_factory=list)
    """Static batching: finished batch members recomputed as padding (results discarded)."""
    cache_queries: int = 0
    cache_hits: int = 0


class Scheduler:
    """Owns the waiting queue, the running list (in admission order) and the block pool."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.block_size = config.block_size
        self.pool = BlockPool(config.num_blocks, caching=config.enable_prefix_caching)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.padding: list[Request] = []
        """Static batching only: finished members still occupying their batch slot."""
        self.watermark_blocks = int(config.watermark * config.num_blocks)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def schedule(self) -> SchedulerOutput:
        cfg = self.config
        out = SchedulerOutput()
        budget = full_budget = cfg.max_num_batched_tokens
        chunked = cfg.enable_chunked_prefill
        pool = self.pool
        static_batch_open = cfg.scheduling == "static" and not self.running
        if static_batch_open and self.padding:
            self._release_padding()
        out.padding = list(self.padding)
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            if req.num_computed < req.prefill_target:
                n = req.prefill_target - req.num_computed
                if n > budget:
                    if chunked:
                        n = budget
                    elif budget < full_budget:
                        i += 1
                        continue
            else:
                n = 1
            need = self.blocks_for(req.num_computed + n) - len(req.block_table)
            preempted_self = False
            while need > pool.num_free:
                victim = running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    preempted_self = True
                    break
            if preempted_self:
                break
            if need > 0:
                req.block_table.extend(pool.allocate(need))
            if n == 1 and req.num_computed >= req.prefill_target:
                out.decode.append(req)
            else:
                out.prefill.append((req, n))
            budget -= n
            i += 1

        if out.preempted or (cfg.scheduling == "static" and not static_batch_open):
            return out
        waiting = self.waiting
        while waiting and len(running) < cfg.max_num_seqs:
            if budget <= 0 and cfg.scheduling != "static":
                break
            req = waiting[0]
            target = req.prefill_target
            hits: list[int] = []
            if pool.caching:
                have = len(req.block_hashes)
                if have < target // self.block_size:
                    parent = req.block_hashes[-1] if have else None
                    req.block_hashes.extend(
                        chain_hashes(req.tokens, self.block_size, have, parent, target)
                    )
                hits = pool.lookup(req.block_hashes[: (target - 1) // self.block_size])
            cached = len(hits) * self.block_size
            n = target - cached
            if n > budget:
                if chunked:
                    n = max(budget, 0)
                elif budget == full_budget:
                    pass  # an unchunked prompt longer than the budget gets a step of its own
                elif cfg.scheduling != "static":
                    break
                else:
                    n = 0
            need = self.blocks_for(cached + n) - len(hits)
            revived = sum(1 for b in hits if pool.refcount(b) == 0)
            reserve = self.watermark_blocks if running else 0
            if pool.num_free - revived - need < reserve:
                break
            waiting.popleft()
            pool.touch(hits)
            req.block_table = hits + pool.allocate(need)
            req.num_computed = cached
            req.state = RequestState.RUNNING
            running.append(req)
            if pool.caching:
                out.cache_queries += target
                out.cache_hits += cached
            req.chunk_cached = cached
            first = not req.scheduled_once
            if first:
                req.scheduled_once = True
                req.cached_prompt_tokens = cached
            out.admitted.append((req, len(running), first))
            if n > 0:
                out.prefill.append((req, n))
                budget -= n
        return out

    def _preempt(self, req: Request) -> None:
        self.pool.free(req.block_table)
        req.block_table = []
        req.num_computed = 0
        if self.config.preemption == "restart":
            handed_out = req.tokens[req.num_prompt : req.num_prompt + req.num_emitted]
            if len(handed_out) > len(req.replay):
                req.replay = handed_out
            del req.tokens[req.num_prompt :]
        req.prefill_target = len(req.tokens)
        req.state = RequestState.WAITING
        self.waiting.appendleft(req)

    def commit_prefill(self, req: Request, n: int) -> None:
        """After the step ran: ``n`` more tokens of ``req`` are in the cache; full blocks whose
        tokens are all prompt (or resumed) tokens enter the prefix cache."""
        before = req.num_computed
        req.num_computed = before + n
        if self.pool.caching:
            hashes = req.block_hashes
            first = before // self.block_size
            last = min(req.num_computed // self.block_size, len(hashes))
            table = req.block_table
            for b in range(first, last):
                self.pool.cache(table[b], hashes[b])

    def complete(self, req: Request) -> None:
        """A running request finished normally. Under static batching it stays in the batch as
        padding (holding its blocks, computed every step) until the whole batch is done."""
        if self.config.scheduling == "static" and req.state is RequestState.RUNNING:
            self.running.remove(req)
            req.state = RequestState.FINISHED
            self.padding.append(req)
            if not self.running:
                self._release_padding()
        else:
            self.finish(req)

    def _release_padding(self) -> None:
        for req in self.padding:
            self.pool.free(req.block_table)
            req.block_table = []
        self.padding.clear()

    def finish(self, req: Request) -> None:
        """Drop a request from wherever it is and free its blocks at once."""
        if req.state is RequestState.RUNNING:
            self.running.remove(req)
        elif req.state is RequestState.WAITING:
            self.waiting.remove(req)
        self.pool.free(req.block_table)
        req.block_table = []
        req.state = RequestState.FINISHED
