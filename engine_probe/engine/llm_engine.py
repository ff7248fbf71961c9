"""``LLMEngine``: the synchronous step loop that ties scheduler, model and observers together.

One ``step()`` schedules, packs one batch, runs one forward pass, samples, updates request state,
applies injected faults, then tells observers (injected clock). Not thread-safe: one thread drives it.

The parts live beside it: ``admission`` (can a request be served, is it taken now), ``batch``
(packing the step), ``step_outcome`` (sampled tokens to request state and outputs),
``step_events`` (what observers are told), ``fault_injection`` and ``placement`` (device, threads).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import torch

from fleetwatch.engine_probe.engine import step_events as events
from fleetwatch.engine_probe.engine.admission import check_request, rejection
from fleetwatch.engine_probe.engine.batch import build_batch
from fleetwatch.engine_probe.engine.config import (
    EngineConfig,
    FaultConfig,
    ModelConfig,
    SamplingParams,
)
from fleetwatch.engine_probe.engine.cost import StepCostModel
from fleetwatch.engine_probe.engine.errors import EngineConfigError
from fleetwatch.engine_probe.engine.fanout import Fanout
from fleetwatch.engine_probe.engine.fault_injection import FaultInjector
from fleetwatch.engine_probe.engine.model import torch_dtype
from fleetwatch.engine_probe.engine.params import RequestParams
from fleetwatch.engine_probe.engine.placement import place
from fleetwatch.engine_probe.engine.request import Request, RequestOutput
from fleetwatch.engine_probe.engine.sampler import sample
from fleetwatch.engine_probe.engine.scheduler import Scheduler
from fleetwatch.engine_probe.engine.startup import StartupTimer, build_parts
from fleetwatch.engine_probe.engine.step_outcome import apply_sampled
from fleetwatch.telemetry.hooks import EngineObserver, RequestInfo

__all__ = ["LLMEngine"]

_GREEDY = SamplingParams()


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
        startup: StartupTimer | None = None,
    ) -> None:
        self.model_config = model_config or ModelConfig()
        self.engine_config = cfg = engine_config or EngineConfig()
        self._injector = FaultInjector(faults or FaultConfig())
        self._clock = clock
        self._sleep = sleep
        self.device = place(cfg)
        if self.model_config.max_position_embeddings < cfg.block_size:
            raise EngineConfigError(
                "ModelConfig.max_position_embeddings is smaller than one KV block"
            )
        dtype = torch_dtype(cfg.dtype)  # model and KV cache timed as phases when ``startup``
        self.model, self.kv_cache = build_parts(self.model_config, cfg, self.device, dtype, startup)
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
        self._step = 0
        self._reported: tuple[int, int, int] | None = None
        """(running, waiting, KV blocks used) as observers last heard it in a ``StepStats``."""

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
    def faults(self) -> FaultConfig:
        """The injected faults in force."""
        return self._injector.faults

    @property
    def active_faults(self) -> dict[str, float]:
        """The injected faults that are on (the ground truth for diagnosis tests); empty if none."""
        return self.faults.active

    def set_faults(self, faults: FaultConfig) -> None:
        """Change the injected faults while the engine runs (an error burst, a throttle that
        starts mid-run). Safe from any thread: the step loop reads ``faults`` once per use, and
        replacing the frozen value is atomic. The fault random stream is kept, not reseeded."""
        self._injector.faults = faults

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
        check_request(self.model_config, prompt_token_ids, max_tokens, sampling)

    def add_request(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        params: RequestParams = RequestParams(),
    ) -> str:
        """Queue a request for at most ``max_tokens`` output tokens, sampled, named and reported
        as ``params`` says; return its id. A request larger than the whole KV pool or arriving at
        a full waiting queue finishes at once with status "rejected" (seen on the next step)."""
        self.validate_request(prompt_token_ids, max_tokens, params.sampling)
        rid = params.request_id if params.request_id is not None else self.new_request_id()
        if rid in self._requests:
            raise EngineConfigError(f"request: id {rid!r} is already in the engine")
        now = self._clock()
        prompt = [int(t) for t in prompt_token_ids]
        obs = self._obs
        sampling = params.sampling or _GREEDY
        if obs is not None:
            arrival_s = params.arrival_s
            obs.on_request_arrived(
                now if arrival_s is None else min(arrival_s, now),
                RequestInfo(
                    rid,
                    len(prompt),
                    max_tokens,
                    params.traffic_class,
                    params.tenant,
                    params.traceparent,
                    params.operation,
                    tracestate=params.tracestate,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=sampling.seed,
                    http=params.http,
                ),
            )
        sched = self.scheduler
        reject = rejection(sched, self.engine_config, len(prompt) + max_tokens)
        if reject is not None:
            if obs is not None:
                obs.on_request_finished(now, rid, "rejected", None, reject, 0, 0)
            self._pending.append(RequestOutput(rid, (), True, "rejected", None, reject))
            return rid
        fail = self._injector.fails_at_first_token()
        req = Request(rid, prompt, max_tokens, sampling, fail)
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

    def finish(
        self, request_id: str, finish_reason: str = "stop", output_tokens: int | None = None
    ) -> bool:
        """End a request early as finished ok (a server found a stop string in its text), free its
        KV blocks now; ``output_tokens`` (at most the tokens generated) is what observers are told
        it produced. False if unknown or already finished."""
        req = self._requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.finish(req)
        n = req.num_output if output_tokens is None else max(0, min(output_tokens, req.num_output))
        if self._obs is not None:
            self._obs.on_request_finished(
                self._clock(), request_id, "ok", finish_reason, None, n, req.cached_prompt_tokens
            )
        self._pending.append(RequestOutput(request_id, (), True, "ok", finish_reason, None))
        return True

    def refuse(
        self,
        info: RequestInfo,
        error_type: str,
        status: str = "rejected",
        arrival_s: float | None = None,
    ) -> None:
        """Tell observers about a request refused before it reached this engine (by a server's
        front door: queue full, draining, invalid): it arrives (at ``arrival_s``, engine clock,
        when given) and finishes now with ``status``, so it gets a record, a span and a count
        like any other request."""
        obs = self._obs
        if obs is not None:
            now = self._clock()
            obs.on_request_arrived(now if arrival_s is None else min(arrival_s, now), info)
            obs.on_request_finished(now, info.request_id, status, None, error_type, 0, 0)

    # -- the step loop ------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one iteration; return the outputs it produced (plus aborts/rejections since the last)."""
        outputs = self._pending
        self._pending = []
        sched = self.scheduler
        if not sched.waiting and not sched.running:
            self._report_state()
            return outputs
        clock = self._clock
        obs = self._obs
        t0 = clock()
        plan = sched.schedule()
        if obs is not None:
            events.report_schedule(obs, t0, plan)
        prefill = [(r, n) for r, n in plan.prefill if n > 0]
        decode = plan.decode
        if not decode and not prefill:
            self._report_state()
            return outputs

        cfg = self.engine_config
        packed = build_batch(
            decode,
            prefill,
            plan.padding,
            block_size=cfg.block_size,
            scratch_slot=cfg.num_blocks * cfg.block_size,
            device=self.device,
        )
        samplers = packed.samplers
        with torch.inference_mode():
            logits = self.model.forward(packed.batch, self.kv_cache)
            sampled = sample(logits[: len(samplers)], samplers, cfg.seed)

        for req in decode:
            req.num_computed += 1
        for req, n in prefill:
            sched.commit_prefill(req, n)
        outcome = apply_sampled(samplers, sampled)
        for req, *_ in outcome.finished:
            sched.complete(req)
            del self._requests[req.request_id]

        t1 = clock()
        self._step += 1
        extra = self._injector.extra_step_s(self._step, t1 - t0)
        if extra > 0:
            self._sleep(extra)
            t1 = clock()

        events.report_progress(obs, t1, prefill, outcome)
        outputs.extend(outcome.outputs(samplers))
        if obs is not None:
            batch = packed.batch
            cost = self.cost.estimate(
                batch.input_ids.shape[0],
                packed.attn_pairs,
                packed.kv_read,
                batch.sample_index.shape[0],
            )
            stats = events.step_stats(self._step, t0, t1, plan, prefill, sched, cost)
            obs.on_step(stats)
            self._reported = (stats.num_running, stats.num_waiting, stats.kv_blocks_used)
        return outputs

    def _report_state(self) -> None:
        """Tell observers the running/waiting/KV state when it changed without a step (aborts,
        going idle): a ``StepStats`` with no tokens, so gauges follow the engine."""
        obs = self._obs
        if obs is None:
            return
        sched = self.scheduler
        state = (len(sched.running), len(sched.waiting), sched.pool.num_used)
        if state != self._reported:
            self._reported = state
            obs.on_step(events.state_stats(self._step, self._clock(), sched))

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
        params = RequestParams(sampling=sampling)
        ids = [
            self.add_request(p, max_tokens=m, params=params)
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
