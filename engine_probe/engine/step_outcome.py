"""What one step did to its requests: sampled tokens appended, first tokens and finishes found,
and the ``RequestOutput`` values handed back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetwatch.engine_probe.engine.request import Request, RequestOutput

__all__ = ["Finish", "StepOutcome", "apply_sampled"]

Finish = tuple[Request, str, str | None, str | None]
"""A request that finished this step: (request, status, finish_reason, error_type)."""


@dataclass(slots=True)
class StepOutcome:
    """The step's effect per request, in the order the requests sampled."""

    first_tokens: list[Request] = field(default_factory=list)
    """Requests that handed out their first output token."""
    token_ids: list[str] = field(default_factory=list)
    """Ids of requests that handed out a later output token."""
    finished: list[Finish] = field(default_factory=list)
    new_tokens: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The tokens each request hands out this step, by request id."""

    def outputs(self, samplers: Sequence[Request]) -> list[RequestOutput]:
        """One output per request that finished or handed out a token, in sampling order."""
        done = {
            req.request_id: (status, reason, error_type)
            for req, status, reason, error_type in self.finished
        }
        out: list[RequestOutput] = []
        for req in samplers:
            rid = req.request_id
            end = done.get(rid)
            toks = self.new_tokens.get(rid, ())
            if end is not None:
                out.append(RequestOutput(rid, toks, True, *end))
            elif toks:
                out.append(RequestOutput(rid, toks, False))
        return out


def apply_sampled(samplers: Sequence[Request], sampled: Sequence[int]) -> StepOutcome:
    """Append each sampled token to its request and note what that means: a first or later
    output token, a stop token or the length limit reached, or an injected failure (a request
    marked to fail does so instead of handing out its first token). A restarted request takes
    its already handed-out tokens back in place of the sampled ones (``Request.replay``)."""
    outcome = StepOutcome()
    for req, tok in zip(samplers, sampled, strict=True):
        if req.error_at_first_token and not req.num_emitted:
            outcome.finished.append((req, "error", "error", "InjectedFault"))
            continue
        if req.num_output < len(req.replay):
            tok = req.replay[req.num_output]  # handed out before a restart: replayed
        req.tokens.append(tok)
        count = req.num_output
        if count > req.num_emitted:
            if req.num_emitted:
                outcome.token_ids.append(req.request_id)
            else:
                outcome.first_tokens.append(req)
            req.num_emitted = count
            outcome.new_tokens[req.request_id] = (tok,)
        sp = req.sampling
        if sp.eos_token_id is not None and tok == sp.eos_token_id:
            outcome.finished.append((req, "ok", "stop", None))
        elif count >= req.max_tokens:
            outcome.finished.append((req, "ok", "length", None))
    return outcome
