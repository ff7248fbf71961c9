"""``engine serve``'s per-tenant flags as a ``TenantLimits`` (or None: the limits are off).

``--tenant-limits`` turns them on; ``--tenant-rate`` and ``--tenant-burst`` (cost units per second
and held, per tenant), ``--tenant-prompt-weight`` and ``--tenant-output-weight`` (cost units per
prompt and per output token), ``--tenant-weight NAME=W`` (repeatable: fair-queue weight of one
tenant, others 1), ``--tenant-limit NAME=RATE[:BURST]`` (repeatable: one tenant's own bucket,
burst defaulting to ``--tenant-burst``) and ``--max-tenants`` tune them. A tuning flag without ``--tenant-limits`` is
refused, so a limit never silently does nothing; so is a value that is not a finite number, and
naming more tenants (the default one included) than ``--max-tenants`` keeps apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fleetwatch.engine_probe.engine.errors import EngineConfigError
from fleetwatch.engine_probe.serve.front.tenants import TenantLimits
from fleetwatch.engine_probe.serve.request_context import TRAFFIC_CLASS_RULE, valid_traffic_class

__all__ = ["parse_tenant_overrides", "parse_tenant_weights", "tenant_limits"]


def parse_tenant_weights(items: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """``["a=2", "b=0.5"]`` -> ``(("a", 2.0), ("b", 0.5))``; a malformed item names itself."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not sep or not valid_traffic_class(name) or not (math.isfinite(weight) and weight > 0):
            raise EngineConfigError(
                f"--tenant-weight must be NAME=WEIGHT (NAME: {TRAFFIC_CLASS_RULE}; WEIGHT a"
                " finite number > 0),"
                f" got {item!r}"
            )
        if name in out:
            raise EngineConfigError(f"--tenant-weight names tenant {name!r} twice")
        out[name] = weight
    return tuple(out.items())


def parse_tenant_overrides(
    items: Sequence[str], default_burst: float
) -> tuple[tuple[str, float, float], ...]:
    """``["gold=8000:64000", "free=100"]`` -> ``(("gold", 8000, 64000), ("free", 100, B))`` with
    ``B`` = ``default_burst``; a malformed item names itself."""
    out: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        rate_text, colon, burst_text = value.partition(":")
        try:
            rate = float(rate_text)
            burst = float(burst_text) if colon else default_burst
        except ValueError:
            rate = burst = float("nan")
        finite = math.isfinite(rate) and math.isfinite(burst)
        if not sep or not valid_traffic_class(name) or not (finite and rate > 0 and burst > 0):
            raise EngineConfigError(
                f"--tenant-limit must be NAME=RATE[:BURST] (NAME: {TRAFFIC_CLASS_RULE}; RATE and"
                f" BURST finite numbers > 0), got {item!r}"
            )
        if name in out:
            raise EngineConfigError(f"--tenant-limit names tenant {name!r} twice")
        out[name] = (rate, burst)
    return tuple((name, rate, burst) for name, (rate, burst) in out.items())


def tenant_limits(
    enabled: bool,
    *,
    rate: float | None = None,
    burst: float | None = None,
    prompt_weight: float | None = None,
    output_weight: float | None = None,
    weights: Sequence[str] = (),
    overrides: Sequence[str] = (),
    max_tenants: int | None = None,
) -> TenantLimits | None:
    """The limits the flags ask for; ``EngineConfigError`` naming the flag when one is bad."""
    given = {
        "--tenant-rate": rate,
        "--tenant-burst": burst,
        "--tenant-prompt-weight": prompt_weight,
        "--tenant-output-weight": output_weight,
        "--max-tenants": max_tenants,
        "--tenant-weight": weights or None,
        "--tenant-limit": overrides or None,
    }
    if not enabled:
        named = [flag for flag, value in given.items() if value is not None]
        if named:
            raise EngineConfigError(f"{', '.join(named)} needs --tenant-limits")
        return None
    defaults = TenantLimits()
    burst = defaults.burst if burst is None else burst
    cap = defaults.max_tenants if max_tenants is None else max_tenants
    tenants = {"default"} | {w.partition("=")[0].strip() for w in [*weights, *overrides]}
    if cap >= 1 and len(tenants) > cap:
        raise EngineConfigError(
            f"--max-tenants {cap} is less than the {len(tenants)} tenants named (default plus"
            " --tenant-weight/--tenant-limit): raise --max-tenants or name fewer"
        )
    try:
        return TenantLimits(
            rate_per_s=defaults.rate_per_s if rate is None else rate,
            burst=burst,
            prompt_weight=defaults.prompt_weight if prompt_weight is None else prompt_weight,
            output_weight=defaults.output_weight if output_weight is None else output_weight,
            weights=parse_tenant_weights(weights),
            overrides=parse_tenant_overrides(overrides, burst),
            max_tenants=defaults.max_tenants if max_tenants is None else max_tenants,
        )
    except ValueError as exc:
        flags = {
            "rate_per_s": "--tenant-rate",
            "burst": "--tenant-burst",
            "prompt_weight": "--tenant-prompt-weight",
            "output_weight": "--tenant-output-weight",
            "max_tenants": "--max-tenants",
        }
        message = str(exc).replace("TenantLimits.", "")
        for field, flag in flags.items():
            message = message.replace(field, flag)
        raise EngineConfigError(message) from None
