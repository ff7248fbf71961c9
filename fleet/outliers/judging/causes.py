"""Why a replica stands out: the replica itself, or what it was sent.

A latency outlier is blamed on the replica only when it is slow like-for-like: its per-prompt-length
bucket medians exceed the fleet's in the same buckets. When it is not (or cannot be compared) and
its workload differs from the fleet's (longer prompts, fewer prefix-cache hits, more requests), the
finding is workload-side and the replica is not blamed.

Replica-side causes are told apart by their evidence: configuration drift (a fingerprint value that
differs from the fleet majority), slow or throttled hardware (GPU clock below its peers, clock-event
reasons set, power off the fleet). Without GPU counters slow hardware and host contention cannot be
told apart and the cause says so.

Host contention is a cause, not a blame: a replica slowed by its machine (CPU, memory bandwidth, a
noisy neighbour) is fine elsewhere, so its finding is host-side and the replica is not blamed (not
drained, not set aside as bad). It is named on evidence, after configuration drift and GPU
hardware, which stay with the replica:

- every replica on its host slowed together: at least two of them run there, and at least
  ``HOST_SHARE`` of them are worse than the fleet median by the signal's effect size;
- its process waited for a CPU at least ``CPU_WAIT`` of the time (``FleetTable.cpu_wait``), and
  more than its peers by enough to explain the deviation: waiting a share w of the time against
  peers' w_med makes it ``(1 − w_med)/(1 − w)`` slower, and what is left is under the effect
  size. Replicas that all wait alike (one busy machine) are slowed alike and compared with each
  other; the wait then explains nothing, and a replica far slower than its peers stays blamed;
- GPU counters present and in line with the fleet while the replica is slow: the GPU is waiting
  on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from fleetwatch.fleet.outliers.signals import SignalSpec

__all__ = ["CPU_WAIT", "HOST_SHARE", "Cause", "ReplicaContext", "Side", "classify"]

HOST_SHARE = 0.75
"""Share of a host's replicas that must be slow together for host contention."""
CPU_WAIT = 0.10
"""Share of wall time a process waiting for a CPU that counts as starvation."""


class Side(StrEnum):
    """Who is to blame: the replica (fix or drain it), its traffic (fix the routing), or nobody
    but the machine it runs on (relieve or move off the host)."""

    REPLICA = "replica"
    WORKLOAD = "workload"
    HOST = "host"


class Cause(StrEnum):
    """Suspected cause of a finding."""

    SLOW_HARDWARE = "slow_or_throttled_hardware"
    CONFIG_DRIFT = "config_or_version_drift"
    HOST_CONTENTION = "host_contention"
    HARDWARE_OR_HOST = "slow_hardware_or_host_contention"
    REPLICA_ERRORS = "replica_errors"
    OUTPUT_SHAPE = "output_shape"
    PROMPT_LENGTH_MIX = "prompt_length_mix"
    PREFIX_CACHE_SKEW = "prefix_cache_hit_skew"
    LOAD_SKEW = "request_load_skew"


@dataclass(frozen=True, slots=True)
class ReplicaContext:
    """Everything known about one replica besides the flagged signal.

    ``matched_slow``: True when slow like-for-like, False when normal like-for-like, None when no
    like-for-like comparison was possible. ``workload``: (cause, evidence) for each way its traffic
    differs from the fleet's, largest first.
    """

    matched_slow: bool | None = None
    matched_evidence: tuple[str, ...] = ()
    workload: tuple[tuple[Cause, str], ...] = ()
    workload_evidence: tuple[str, ...] = ()
    gpu_present: bool = False
    gpu_bad: tuple[str, ...] = ()
    drift: tuple[str, ...] = ()
    low_request_rate: bool = False
    decode_slow: bool = False
    """The replica is also slow like-for-like on a prompt-insensitive signal (TPOT): per
    prompt-length bucket, or raw where its traffic is like the fleet's."""
    host: tuple[str, ...] = ()
    """Evidence that its host is contended: host-mates slow together, its process starved."""
    extra: tuple[str, ...] = field(default_factory=tuple)


def _replica_cause(ctx: ReplicaContext) -> tuple[Side, Cause, tuple[str, ...]]:
    if ctx.drift:
        return Side.REPLICA, Cause.CONFIG_DRIFT, ctx.drift
    if ctx.gpu_bad:
        return Side.REPLICA, Cause.SLOW_HARDWARE, ctx.gpu_bad
    if ctx.host:
        return Side.HOST, Cause.HOST_CONTENTION, (*ctx.host, "host-side: no replica to blame")
    if ctx.gpu_present:
        return (
            Side.HOST,
            Cause.HOST_CONTENTION,
            (
                "GPU counters are in line with the fleet while the replica is slow: the GPU is "
                "waiting on the host (CPU, memory, noisy neighbour); host-side: no replica to blame",
            ),
        )
    return (
        Side.REPLICA,
        Cause.HARDWARE_OR_HOST,
        ("no GPU counters: slow hardware and host contention cannot be told apart",),
    )


def classify(spec: SignalSpec, ctx: ReplicaContext) -> tuple[Side, Cause, tuple[str, ...]]:
    """Side, cause and the evidence lines that support them, for a flagged ``spec`` signal."""
    evidence: list[str] = []
    if spec.family == "errors":
        if ctx.drift:
            return Side.REPLICA, Cause.CONFIG_DRIFT, ctx.drift
        return Side.REPLICA, Cause.REPLICA_ERRORS, ()
    if spec.family == "output":
        if ctx.drift:
            return Side.REPLICA, Cause.CONFIG_DRIFT, ctx.drift
        return (
            Side.REPLICA,
            Cause.OUTPUT_SHAPE,
            (
                "its answers end unlike its peers' on the same model: a chat template, tokenizer, "
                "weights or sampling defaults of its own (unless its clients ask for shorter "
                "answers: records do not say what max_tokens was asked)",
            ),
        )
    if spec.family == "gpu":
        if ctx.drift:
            return Side.REPLICA, Cause.CONFIG_DRIFT, ctx.drift
        return Side.REPLICA, Cause.SLOW_HARDWARE, ctx.gpu_bad
    if spec.family == "throughput":
        if ctx.low_request_rate:
            return Side.WORKLOAD, Cause.LOAD_SKEW, ctx.workload_evidence
        return _replica_cause(ctx)
    # Latency: like-with-like decides.
    evidence.extend(ctx.matched_evidence)
    evidence.extend(ctx.workload_evidence)
    if ctx.drift or ctx.gpu_bad:
        side, cause, why = _replica_cause(ctx)
        return side, cause, (*evidence, *why)
    matched = ctx.matched_slow
    if matched is None and not spec.prompt_sensitive:
        if ctx.workload:
            evidence.append(
                f"{spec.name} includes the stalls of the replica's own prefills in a batched "
                "engine: with traffic unlike the fleet's its raw value is not like-for-like"
            )
        else:
            evidence.append(
                f"{spec.name} barely depends on prompt length and its traffic is like the fleet's: "
                "its raw value is already like-for-like"
            )
            matched = True
    if matched is None and ctx.decode_slow:
        evidence.append(
            "its time per output token is slow like-for-like too: replica-side"
            + (" even though its workload differs" if ctx.workload else "")
        )
        matched = True
    if matched is True:
        side, cause, why = _replica_cause(ctx)
        return side, cause, (*evidence, *why)
    if ctx.workload:
        return Side.WORKLOAD, ctx.workload[0][0], tuple(evidence)
    if matched is False:
        evidence.append("slow only on its raw median: within prompt-length buckets it is normal")
        return Side.WORKLOAD, Cause.PROMPT_LENGTH_MIX, tuple(evidence)
    side, cause, why = _replica_cause(ctx)
    return side, cause, (*evidence, *why)
