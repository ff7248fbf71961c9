"""The generated outlier alert on healthy fleets: its false-alarm rate, measured by promtool.

Sixty fleets (one ``model`` label value each) of five replicas whose requests all come from one
distribution (lognormal TTFT and TPOT; in half of them TPOT is bimodal, 70 % at 20 ms and 30 % at
60 ms, so the p50 sits by vLLM's 25 ms bucket edge), 0.5 requests a second each, exported as the
profile's real histogram buckets every 30 s for 25 minutes, with the default rule options (5 m
window, ``for: 10m``): promtool evaluates the rules over them and no ``FleetReplicaOutlier`` may
fire in any healthy fleet, while in each batch a planted fleet with one replica 2x slower fires
for that replica on every latency signal. Zero of sixty fleets per profile bounds the rule's
false-alarm rate per fleet over 25 minutes under 5 % (one-sided 95 %); the run is seeded.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.core.profiles import Profile, Signal, get_profile
from fleetwatch.fleet.outliers.rules.generate import (
    ALERT_NAME,
    RuleOptions,
    outlier_rules,
    render_yaml,
)
from fleetwatch.fleet.outliers.rules.parts import latency_refs, series_name
from fleetwatch.fleet.outliers.sources.exposition import ref_labels
from tests.promtool_run import promtool_test

STEP_S = 30
STEPS = 50
PER_STEP = 15  # requests per replica per step: 0.5 a second, so each p50 is noisy
FLEETS = 60
REPLICAS = 5


def _draws(rng: np.random.Generator, n: int, bimodal: bool, slow: float) -> dict[str, np.ndarray]:
    ttft = rng.lognormal(np.log(0.2), 0.5, n) * slow
    if bimodal:  # prefix-cache hits and misses: 70 % fast, 30 % three times slower
        tpot = np.where(rng.random(n) < 0.7, 0.02, 0.06) * rng.lognormal(0.0, 0.15, n)
    else:
        tpot = rng.lognormal(np.log(0.03), 0.2, n)
    tpot = tpot * slow
    return {"ttft": ttft, "tpot": tpot, "e2e": ttft + 64 * tpot}


def _replica_series(
    profile: Profile, labels: dict[str, str], rng: np.random.Generator, bimodal: bool, slow: float
) -> list[dict[str, str]]:
    refs = latency_refs(profile)
    cumulative = {name: np.zeros((STEPS + 1, len(ref.buckets) + 1)) for name, ref in refs}
    for k in range(1, STEPS + 1):
        drawn = _draws(rng, PER_STEP, bimodal, slow)
        for name, ref in refs:
            les = np.array([*ref.buckets, np.inf])
            counts = np.searchsorted(np.sort(drawn[name]), les, side="right")
            cumulative[name][k] = cumulative[name][k - 1] + counts
    out = []
    for name, ref in refs:
        c = cumulative[name]
        # Every bucket the data reaches, the empty one just below it and +Inf: buckets further
        # down are 0 and further up equal +Inf at every step, which no quantile here reads.
        low = max(0, int(np.argmax(c[-1] > 0)) - 1)
        high = int(np.argmax(c[-1] >= c[-1, -1]))
        les = [*ref.buckets, float("inf")]
        for j in (
            [*range(low, high + 1), len(les) - 1] if high < len(les) - 1 else range(low, len(les))
        ):
            le = "+Inf" if les[j] == float("inf") else f"{les[j]:g}"
            out.append(
                {
                    "series": series_name(ref.name + "_bucket", {**labels, "le": le}),
                    "values": " ".join(str(int(v)) for v in c[:, j]),
                }
            )
    counter = " ".join(str(PER_STEP * k) for k in range(STEPS + 1))
    for ref in (profile.outcomes.total, profile.outcomes.good):
        if ref is not None:
            out.append(
                {"series": series_name(ref.name, {**labels, **ref_labels(ref)}), "values": counter}
            )
    if profile.has(Signal.PROMPT_TOKENS):
        tokens = profile.metric(Signal.PROMPT_TOKENS)
        out.append(
            {
                "series": series_name(tokens.name, {**labels, **ref_labels(tokens)}),
                "values": " ".join(str(40 * PER_STEP * k) for k in range(STEPS + 1)),
            }
        )
    return out


BATCH = 10
"""Fleets per promtool run: promtool's test engine caps the samples one query may load."""


@pytest.mark.promtool
@pytest.mark.parametrize("name", ["fleetwatch", "vllm"])
def test_no_alert_on_sixty_healthy_fleets_and_one_on_the_planted_replica(tmp_path, promtool, name):
    profile = get_profile(name)
    r, m = profile.replica_label, profile.model_label
    rng = np.random.default_rng(2026 if name == "vllm" else 11)
    (tmp_path / "rules.yaml").write_text(render_yaml(outlier_rules(profile, RuleOptions())))
    fired = (
        f'count by ({m}, {r}) (max_over_time(ALERTS{{alertname="{ALERT_NAME}",'
        f'alertstate="firing"}}[{STEPS * STEP_S}s]))'
    )
    planted = [
        {
            "labels": series_name("", {m: "planted", r: "replica-3"}),
            "value": len(latency_refs(profile)),
        }
    ]
    for start in range(0, FLEETS, BATCH):
        series: list[dict[str, str]] = []
        for f in range(start, start + BATCH):
            for i in range(REPLICAS):
                labels = {m: f"m{f}", r: f"replica-{i}"}
                series += _replica_series(profile, labels, rng, bimodal=f % 2 == 1, slow=1.0)
        for i in range(REPLICAS):
            labels = {m: "planted", r: f"replica-{i}"}
            slow = 2.0 if i == 3 else 1.0
            series += _replica_series(profile, labels, rng, bimodal=False, slow=slow)
        test = {
            "rule_files": ["rules.yaml"],
            "evaluation_interval": f"{STEP_S}s",
            "tests": [
                {
                    "interval": f"{STEP_S}s",
                    "input_series": series,
                    "promql_expr_test": [
                        {"expr": fired, "eval_time": f"{STEPS * STEP_S}s", "exp_samples": planted}
                    ],
                }
            ],
        }
        done = promtool_test(promtool, tmp_path, render_yaml(test), "null.test.yaml")
        assert done.returncode == 0, (
            f"fleets m{start}..m{start + BATCH - 1}: " + (done.stdout + done.stderr)[-3000:]
        )
