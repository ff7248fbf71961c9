"""What ``fleetwatch fleet capacity`` does, apart from parsing options and printing."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.core.profiles import ProfileError, get_profile
from fleetwatch.core.profiles.labels import with_labels
from fleetwatch.fleet.capacity.manifests import (
    ScaleTarget,
    capacity_rules,
    capacity_rules_test,
    hpa_manifest,
    keda_manifest,
    render_yaml,
)
from fleetwatch.fleet.capacity.plan import CapacityPlan, PlanInputs, curve_from_probe, plan_capacity
from fleetwatch.fleet.capacity.simulate import ScaleConfig, simulate_scaling
from fleetwatch.fleet.errors import AnalysisError

__all__ = ["ModelOptions", "capacity_command", "scenario_config", "sim_config"]


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """What ``--model-config`` plans from: the model, its GPUs and the requests' size."""

    config: Path
    gpu: str = "H100-SXM"
    gpus: int | None = None
    """GPUs a replica: the product of the degrees (``None``: that product, or 1)."""
    dp_attention: int = 1
    context: int = 4096
    output_tokens: float = 256.0
    tp: int | None = None
    pp: int = 1
    ep: int = 1


def sim_config(plan: CapacityPlan, seed: int = 0) -> ScaleConfig:
    """The simulator scenario of a plan: its traffic, SLO, cold start and replica counts."""
    i = plan.inputs
    return ScaleConfig(
        rate_per_s=i.rate_per_s,
        peak_rate_per_s=i.peak_rate_per_s,
        burst_s=i.burst_s,
        per_replica_rate=plan.sustainable_per_replica,
        ttft_s=i.ttft_s,
        cold_start_s=i.cold_start_s,
        replicas=plan.replicas,
        warm_pool=plan.warm_pool_replicas,
        max_replicas=plan.peak_replicas + plan.warm_pool_replicas,
        queue_target=plan.queue_target_per_replica,
        sync_s=i.sync_period_s,
        cooldown_s=plan.cooldown_s,
        duration_s=max(480.0, 60.0 + i.burst_s + 2 * i.cold_start_s + plan.cooldown_s),
        seed=seed,
    )


def scenario_config(
    rate: float,
    peak_rate: float | None,
    burst: float,
    ttft: float,
    cold_start: float,
    headroom: float,
    seed: int = 0,
) -> ScaleConfig:
    """The simulator scenario of the flags alone (no probe, so no measured curve): the built-in
    replica's sustainable rate, replicas for ``rate`` and a warm pool for the peak (default
    three times ``rate``) at ``headroom`` spare, and room to scale past both. The flags' defaults
    give the built-in scenario."""
    base = ScaleConfig()
    peak = 3.0 * rate if peak_rate is None else peak_rate
    if not 0.0 <= headroom < 1.0:
        raise AnalysisError(f"--headroom must be in [0, 1), got {headroom}")
    usable = base.per_replica_rate * (1.0 - headroom)
    replicas = max(1, math.ceil(rate / usable))
    warm = max(0, math.ceil(peak / usable) - replicas)
    return ScaleConfig(
        rate_per_s=rate,
        peak_rate_per_s=peak,
        burst_s=burst,
        ttft_s=ttft,
        cold_start_s=cold_start,
        replicas=replicas,
        warm_pool=warm,
        max_replicas=replicas + 2 * warm,
        duration_s=max(base.duration_s, base.burst_start_s + burst + 2 * cold_start + 60.0),
        seed=seed,
    )


def _write(output: Path, files: dict[str, str]) -> list[str]:
    from fleetwatch.core.atomic import atomic_write_text

    try:
        output.mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            atomic_write_text(output / fname, text)
    except OSError as exc:
        raise AnalysisError(f"cannot write to {output}: {exc}") from None
    return [str(output / f) for f in files]


def capacity_command(
    *,
    probe: Path | None,
    rate: float,
    peak_rate: float | None,
    burst: float,
    ttft: float,
    tpot: float,
    cold_start: float,
    headroom: float,
    quantile: str,
    profile: str,
    target: tuple[str, str, str, str],
    output: Path | None,
    simulate: bool,
    seed: int,
    labels: Path | None = None,
    model: ModelOptions | None = None,
) -> tuple[dict[str, Any], str]:
    """(JSON document, text) of the command: the plan from a probe run's curve, else from the
    model arithmetic's (``model``: an upper bound, said so), else only the simulation."""
    from fleetwatch.core.kubernetes import dns_name
    from fleetwatch.core.preflight import http_url, input_file, output_dir
    from fleetwatch.core.rules.files import prometheus_rule_path, promtool_test_path
    from fleetwatch.core.rules.kubernetes import prometheus_rule

    if probe is None and model is None and not simulate:
        raise AnalysisError(
            "give a probe run JSON (`fleetwatch probe run --json`), a --model-config, or --simulate"
        )
    if probe is None and model is None and output is not None:
        raise AnalysisError(
            "-o writes the plan's manifests and rules, which need a probe run JSON "
            "(`fleetwatch probe run --json`) or a --model-config; --simulate alone prints the "
            "simulation (--json)"
        )
    if probe is not None:
        input_file(probe)
    http_url(target[3], option="--prometheus-url", error=AnalysisError)
    try:
        prof = with_labels(get_profile(profile), labels)
    except ProfileError as exc:
        raise AnalysisError(str(exc)) from None
    if output is not None:
        output_dir(output)
    doc: dict[str, Any] = {}
    texts: list[str] = []
    plan = None
    bound = None
    if model is not None:
        from fleetwatch.fleet.capacity.bound import model_bound

        bound = model_bound(
            model.config,
            model.gpu,
            gpus=model.gpus,
            dp_attention=model.dp_attention,
            tp=model.tp,
            pp=model.pp,
            ep=model.ep,
            context=model.context,
            output_tokens=model.output_tokens,
        )
        doc["bound"] = bound.to_dict()
        texts.append(bound.render())
    if probe is not None or bound is not None:
        inputs = PlanInputs(
            rate_per_s=rate,
            peak_rate_per_s=rate if peak_rate is None else peak_rate,
            burst_s=burst,
            ttft_s=ttft,
            tpot_s=tpot,
            cold_start_s=cold_start,
            headroom=headroom,
        )
        if probe is not None:
            try:
                raw = json.loads(probe.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise AnalysisError(f"{probe}: not a readable JSON file ({exc})") from None
            plan = plan_capacity(curve_from_probe(raw, quantile, str(probe)), inputs)
        else:
            assert bound is not None
            plan = plan_capacity(list(bound.curve), inputs)
        doc["plan"] = plan.to_dict()
        doc["plan_from"] = "probe" if probe is not None else "model arithmetic (an upper bound)"
        head = "plan from the model arithmetic (an upper bound, no probe run):\n"
        if probe is not None:
            head = ""
        if probe is not None and bound is not None:
            from fleetwatch.fleet.capacity.plan import sustainable_rate

            ceiling = sustainable_rate(bound.curve, ttft, tpot)
            if ceiling is not None and plan.sustainable_per_replica > ceiling:
                note = (
                    f"the probe's sustainable {plan.sustainable_per_replica:.3g}/s is above the "
                    f"model arithmetic's bound {ceiling:.3g}/s: check --model-config, --gpu, "
                    "--gpus and --output-tokens against what the probe served"
                )
                doc["notes"] = [note]
                texts.append("note: " + note)
        texts.append(head + plan.render())
        if output is not None:
            where = ScaleTarget(*target)
            rules = output / "capacity.rules.yaml"
            recorded = capacity_rules(prof, plan)
            # The same rules as the object a prometheus-operator loads, beside the HPA reading
            # them (through prometheus-adapter) in the deployment's namespace.
            kube_rules = prometheus_rule(
                recorded, dns_name(f"{where.name}-capacity"), namespace=where.namespace
            )
            written = _write(
                output,
                {
                    rules.name: render_yaml(recorded),
                    prometheus_rule_path(rules).name: render_yaml(kube_rules),
                    promtool_test_path(rules).name: render_yaml(
                        capacity_rules_test(prof, plan, rules.name)
                    ),
                    "hpa.yaml": render_yaml(hpa_manifest(prof, plan, where)),
                    "keda.yaml": render_yaml(keda_manifest(prof, plan, where)),
                },
            )
            doc["written"] = written
            texts.append("wrote " + ", ".join(written))
    if simulate:
        cfg = (
            sim_config(plan, seed)
            if plan is not None
            else scenario_config(rate, peak_rate, burst, ttft, cold_start, headroom, seed)
        )
        result = simulate_scaling(cfg)
        doc["simulation"] = result.as_dict()
        texts.append(result.render())
    return doc, "\n\n".join(texts)
