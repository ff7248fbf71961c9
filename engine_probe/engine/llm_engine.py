"""``LLMEngine``: the synchronous step loop that ties scheduler, model and observers together.

One ``step()`` schedules, builds one packed batch, runs one forward pass, samples, updates
request state, applies injected faults, then tells observers what happened (timestamps from the
injected clock). Not thread-safe: drive it from one thread (``AsyncEngine`` does that for servers).
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Callable, Sequence

import torch

from engine_probe.engine.config import EngineConfig, FaultConfig, ModelConfig, SamplingParams
from engine_probe.engine.cost import StepCostModel
from engine_probe.engine.errors import EngineConfigError
from engine_probe.engine.fanout import Fanout
from engine_probe.engine.model import KVCache, PrefillChunk, StepBatch, Transformer, torch_dtype
from engine_probe.engine.request import Request, RequestOutput
from engine_probe.engine.sampler import sample
from engine_probe.engine.scheduler import Scheduler
from telemetry.hooks import EngineObserver, RequestInfo, StepStats

__all__ = ["DEFAULT_CPU_THREADS", "THREADS_ENV", "LLMEngine"]

THREADS_ENV = "FLEETWATCH_ENGINE_THREADS"
"""Environment variable read at engine construction when ``EngineConfig.num_threads`` is None."""

DEFAULT_CPU_THREADS = 1
"""torch intra-op threads on CPU when neither the config nor the environment says: a small
model's step is dominated by per-operator overhead, and on a shared, oversubscribed machine two
OpenMP threads waiting on each other made steps 5-12x slower (measured on the 2-core CI box)."""

_GREEDY = SamplingParams()


def _resolve_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise EngineConfigError("EngineConfig.device is 'cuda' but no CUDA device is available")
        return torch.device("cuda")
    return torch.device("cpu")


class LLMEngine:
    """A continuous-batching engine over a paged KV cache.

    Example::

        engine = LLMEngine(ModelConfig(), EngineConfig(num_blocks=256))
        [tokens] = engine.generate([[1, 2, 3]], max_tokens=8)
    """

    def __init__(
        self,
        model_config: ModelConfig | None = None,
        engine_config: EngineConfig | None = None,
        faults: FaultConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        observer: EngineObserver | None = None,
    ) -> None:
        self.model_config = model_config or ModelConfig()
        self.engine_config = cfg = engine_config or EngineConfig()
        self.faults = faults or FaultConfig()
        self._clock = clock
        self._sleep = sleep
        threads = cfg.num_threads
        if threads is None and os.environ.get(THREADS_ENV):
            raw = os.environ[THREADS_ENV]
            threads = int(raw) if raw.strip().isdigit() else 0
            if threads < 1:
                raise EngineConfigError(f"{THREADS_ENV} must be an integer >= 1, got {raw!r}")
        self.device = _resolve_device(cfg.device)
        if threads is None and self.device.type == "cpu":
            threads = DEFAULT_CPU_THREADS
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        if self.model_config.max_position_embeddings < cfg.block_size:
            raise EngineConfigError(
                "ModelConfig.max_position_embeddings is smaller than one KV block"
            )
        dtype = torch_dtype(cfg.dtype)
        self.model = Transformer(self.model_config, self.device, dtype)
        # one extra block: the scratch slot that static-batching padding rows write to
        self.kv_cache = KVCache(
            self.model_config, cfg.num_blocks + 1, cfg.block_size, self.device, dtype
        )
        self.scheduler = Scheduler(cfg)
        self.cost = StepCostModel.for_model(
            self.model_config, torch.tensor([], dtype=dtype).element_size()
        )
        self._observers: list[EngineObserver] = []
        self._obs: EngineObserver | None = None
        if observer is not None:
            self.attach(observer)
        self._requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []
        self._ids = itertools.count()
        self._fault_rng = random.Random(self.faults.seed)
        self._step = 0

    # -- identity and state -------------------------------------------------------------------

    @property
    def replica(self) -> str:
        return self.engine_config.replica

    @property
    def model_name(self) -> str:
        return self.engine_config.model_name

    @property
    def clock(self) -> Callable[[], float]:
        """The engine's clock (seconds); every event timestamp comes from it."""
        return self._clock

    @property
    def active_faults(self) -> dict[str, float]:
        """The injected faults that are on (the ground truth for diagnosis tests); empty if none."""
        return self.faults.active

    def set_faults(self, faults: FaultConfig) -> None:
        """Change the injected faults while the engine runs (an error burst, a throttle that
        starts mid-run). Safe from any thread: the step loop reads ``faults`` once per use, and
        replacing the frozen value is atomic. The fault random stream is kept, not reseeded."""
        self.faults = faults

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks referenced by a request, 0..1 (free cached blocks count as free)."""
        return self.scheduler.pool.num_used / self.engine_config.num_blocks

    @property
    def step_index(self) -> int:
        """Steps that computed tokens so far."""
        return self._step

    def unfinished_request_ids(self) -> list[str]:
        """Ids of requests still waiting or running."""
        return list(self._requests)

    def has_unfinished(self) -> bool:
        return bool(self._requests) or bool(self._pending)

    # -- observers ----------------------------------------------------------------------------

    def attach(self, observer: EngineObserver) -> Callable[[], None]:
        """Add an observer; returns a function that detaches it."""
        self._observers.append(observer)
        self._rebuild_observer()

        def detach() -> None:
            for i, o in enumerate(self._observers):
                if o is observer:
                    del self._observers[i]
                    self._rebuild_observer()
                    return

        return detach

    def _rebuild_observer(self) -> None:
        obs = self._observers
        self._obs = None if not obs else obs[0] if len(obs) == 1 else Fanout(obs)

    # -- requests -----------------------------------------------------------------------------

    def new_request_id(self) -> str:
        """A fresh request id (thread-safe: ``itertools.count`` advances atomically)."""
        return f"{self.replica}-{next(self._ids)}"

    def validate_request(
        self,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        sampling: SamplingParams | None = None,
    ) -> None:
        """Raise ``EngineConfigError`` if the request can never be served by this model.

        Reads only configuration, so any thread may call it.
        """
        if len(prompt_token_ids) == 0:
            raise EngineConfigError("request: prompt_token_ids is empty")
        vocab = self.model_config.vocab_size
        lo, hi = min(prompt_token_ids), max(prompt_token_ids)
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            raise EngineConfigError(f"request: token id {bad} outside the vocabulary [0, {vocab})")
        if max_tokens < 1:
            raise EngineConfigError(f"request: max_tokens must be >= 1, got {max_tokens}")
        limit = self.model_config.max_position_embeddings
        if len(prompt_token_ids) + max_tokens > limit:
            raise EngineConfigError(
                f"request: prompt ({len(prompt_token_ids)} tokens) + max_tokens ({max_tokens}) "
                f"exceeds the model's {limit} positions"
            )
        if (
            sampling is not None
            and sampling.eos_token_id is not None
            and not 0 <= sampling.eos_token_id < vocab
        ):
            raise EngineConfigError(
                f"request: eos_token_id {sampling.eos_token_id} outside the vocabulary"
            )

    def add_request(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        request_id: str | None = None,
        sampling: SamplingParams | None = None,
        traffic_class: str = "default",
        tenant: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """Queue a request; return its id. A request larger than the whole KV pool or arriving at
        a full waiting queue finishes at once with status "rejected" (seen on the next step)."""
        self.validate_request(prompt_token_ids, max_tokens, sampling)
        rid = request_id if request_id is not None else self.new_request_id()
        if rid in self._requests:
            raise EngineConfigError(f"request: id {rid!r} is already in the engine")
        now = self._clock()
        prompt = [int(t) for t in prompt_token_ids]
        obs = self._obs
        if obs is not None:
            obs.on_request_arrived(
                now,
                RequestInfo(rid, len(prompt), max_tokens, traffic_class, tenant, traceparent),
            )
        sched = self.scheduler
        cfg = self.engine_config
        reject: str | None = None
        if sched.blocks_for(len(prompt) + max_tokens) > cfg.num_blocks:
            reject = "KVCapacityExceeded"
        elif cfg.max_waiting is not None and len(sched.waiting) >= cfg.max_waiting:
            reject = "QueueFull"
        if reject is not None:
            if obs is not None:
                obs.on_request_finished(now, rid, "rejected", None, reject, 0, 0)
            self._pending.append(RequestOutput(rid, (), True, "rejected", None, reject))
            return rid
        fail = self.faults.error_rate > 0 and self._fault_rng.random() < self.faults.error_rate
        req = Request(rid, prompt, max_tokens, sampling or _GREEDY, fail)
        self._requests[rid] = req
        sched.waiting.append(req)
        return rid

    def abort(self, request_id: str) -> bool:
        """Stop a waiting or running request and free its KV blocks now. False if unknown/finished."""
        req = self._requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.finish(req)
        if self._obs is not None:
            self._obs.on_request_finished(
                self._clock(),
                request_id,
                "aborted",
                "abort",
                None,
                req.num_output,
                req.cached_prompt_tokens,
            )
        self._pending.append(RequestOutput(request_id, (), True, "aborted", "abort", None))
        return True

    # -- the step loop ------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one iteration; return the outputs it produced (plus aborts/rejections since the last)."""
        outputs = self._pending
        self._pending = []
        sched = self.scheduler
        if not sched.waiting and not sched.running:
            return outputs
        clock = self._clock
        obs = self._obs
        t0 = clock()
        plan = sched.schedule()
        if obs is not None:
            for req in plan.preempted:
                obs.on_preempted(t0, req.request_id)
            for req, batch_size, first in plan.admitted:
                if first:
                    obs.on_request_scheduled(t0, req.request_id, batch_size)
                else:
                    obs.on_resumed(t0, req.request_id)
        prefill = [(r, n) for r, n in plan.prefill if n > 0]
        decode = plan.decode
        if not decode and not prefill:
            return outputs

        batch, samplers, attn_pairs, kv_read = self._build_batch(decode, prefill, plan.padding)
        with torch.inference_mode():
            logits = self.model.forward(batch, self.kv_cache)
            sampled = sample(logits[: len(samplers)], samplers, self.engine_config.seed)

        first_tokens: list[Request] = []
        token_ids: list[str] = []
        finished: list[tuple[Request, str, str | None, str | None]] = []
        new_tokens: dict[str, tuple[int, ...]] = {}
        for req in decode:
            req.num_computed += 1
        for req, n in prefill:
            sched.commit_prefill(req, n)
        for req, tok in zip(samplers, sampled, strict=True):
            if req.error_at_first_token and not req.num_emitted:
                finished.append((req, "error", "error", "InjectedFault"))
                continue
            req.tokens.append(tok)
            count = req.num_output
            if count > req.num_emitted:
                if req.num_emitted:
                    token_ids.append(req.request_id)
                else:
                    first_tokens.append(req)
                req.num_emitted = count
                new_tokens[req.request_id] = (tok,)
            sp = req.sampling
            if sp.eos_token_id is not None and tok == sp.eos_token_id:
                finished.append((req, "ok", "stop", None))
            elif count >= req.max_tokens:
                finished.append((req, "ok", "length", None))
        for req, *_ in finished:
            sched.complete(req)
            del self._requests[req.request_id]

        t1 = clock()
        extra = (self.faults.slowdown - 1.0) * (t1 - t0)
        self._step += 1
        every = self.faults.stall_every_steps
        if every and self._step % every == 0:
            extra += self.faults.stall_s
        if extra > 0:
            self._sleep(extra)
            t1 = clock()

        if obs is not None:
            for req, n in prefill:
                obs.on_prefill_chunk(t1, req.request_id, n, req.chunk_cached)
                req.chunk_cached = 0
            for req in first_tokens:
                obs.on_first_token(t1, req.request_id)
            if token_ids:
                obs.on_tokens(t1, token_ids)
            for req, status, reason, error_type in finished:
                obs.on_request_finished(
                    t1,
                    req.request_id,
                    status,
                    reason,
                    error_type,
                    req.num_output,
                    req.cached_prompt_tokens,
                )
        else:
            for req, _n in prefill:
                req.chunk_cached = 0

        done = {
            req.request_id: (status, reason, error_type)
            for req, status, reason, error_type in finished
        }
        for req in samplers:
            rid = req.request_id
            end = done.get(rid)
            toks = new_tokens.get(rid, ())
            if end is not None:
                outputs.append(RequestOutput(rid, toks, True, *end))
            elif toks:
                outputs.append(RequestOutput(rid, toks, False))

        if obs is not None:
            nbytes, flops = self.cost.estimate(
                batch.input_ids.shape[0], attn_pairs, kv_read, batch.sample_index.shape[0]
            )
            pool = sched.pool
            obs.on_step(
                StepStats(
                    step=self._step,
                    start_s=t0,
                    end_s=t1,
                    prefill_tokens=sum(n for _, n in prefill),
                    decode_tokens=len(decode),
                    num_running=len(sched.running),
                    num_waiting=len(sched.waiting),
                    kv_blocks_used=pool.num_used,
                    kv_blocks_total=pool.num_blocks,
                    prefix_cache_queries=plan.cache_queries,
                    prefix_cache_hits=plan.cache_hits,
                    preemptions=len(plan.preempted),
                    bytes_read=nbytes,
                    flops=flops,
                )
            )
        return outputs

    def _build_batch(
        self, decode: list[Request], prefill: list[tuple[Request, int]], padding: list[Request]
    ) -> tuple[StepBatch, list[Request], int, int]:
        """Pack the step: real decode rows, padding rows (static batching: the last position
        recomputed in place, same token, same slot), then prefill chunks. Logits rows: samplers
        first, padding last (computed for their cost, discarded)."""
        bs = self.engine_config.block_size
        device = self.device
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        tables: list[list[int]] = []
        lens: list[int] = []
        kv_read = 0
        for req in decode:
            p = req.num_computed
            ids.append(req.tokens[p])
            pos.append(p)
            table = req.block_table
            slots.append(table[p // bs] * bs + p % bs)
            tables.append(table)
            lens.append(p + 1)
            kv_read += p
        scratch = self.engine_config.num_blocks * bs
        for req in padding:
            p = req.num_computed - 1
            ids.append(req.tokens[p])
            pos.append(p)
            table = req.block_table
            slots.append(scratch)  # never overwrite a block a prefix-cache hit may share
            tables.append(table)
            lens.append(p + 1)
            kv_read += p
        num_decode = len(decode) + len(padding)
        attn_pairs = kv_read + num_decode
        samplers = list(decode)
        sample_index = list(range(len(decode)))
        chunks: list[PrefillChunk] = []
        offset = num_decode
        for req, n in prefill:
            start = req.num_computed
            ids.extend(req.tokens[start : start + n])
            pos.extend(range(start, start + n))
            table = req.block_table
            p, end = start, start + n
            while p < end:
                off = p % bs
                take = min(bs - off, end - p)
                base = table[p // bs] * bs + off
                slots.extend(range(base, base + take))
                p += take
            chunks.append(PrefillChunk(offset, n, start, torch.tensor(table, device=device)))
            attn_pairs += n * start + n * (n + 1) // 2
            kv_read += start
            offset += n
            if start + n >= req.prefill_target:
                samplers.append(req)
                sample_index.append(offset - 1)
        sample_index.extend(range(len(decode), num_decode))
        width = max((len(t) for t in tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in tables]
        batch = StepBatch(
            input_ids=torch.tensor(ids, dtype=torch.long, device=device),
            positions=torch.tensor(pos, dtype=torch.long, device=device),
            slots=torch.tensor(slots, dtype=torch.long, device=device),
            num_decode=num_decode,
            decode_tables=torch.tensor(padded, dtype=torch.long, device=device).view(
                num_decode, width
            ),
            decode_lens=torch.tensor(lens, dtype=torch.long, device=device),
            prefills=tuple(chunks),
            sample_index=torch.tensor(sample_index, dtype=torch.long, device=device),
        )
        return batch, samplers, attn_pairs, kv_read

    # -- convenience --------------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: int | Sequence[int],
        sampling: SamplingParams | None = None,
    ) -> list[list[int]]:
        """Add every prompt, step until all are done, return the generated token ids per prompt."""
        limits = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
        if len(limits) != len(prompts):
            raise EngineConfigError(
                f"generate: {len(limits)} max_tokens values for {len(prompts)} prompts"
            )
        ids = [
            self.add_request(p, max_tokens=m, sampling=sampling)
            for p, m in zip(prompts, limits, strict=True)
        ]
        result: dict[str, list[int]] = {rid: [] for rid in ids}
        open_ids = set(ids)
        while open_ids:
            for out in self.step():
                if out.request_id in result:
                    result[out.request_id].extend(out.new_token_ids)
                    if out.finished:
                        open_ids.discard(out.request_id)
        return [result[rid] for rid in ids]
