"""`fleet canary`: promote, hold or roll back, from histogram buckets and outcome counts.

The judge is measured on seeded canaries drawn through vLLM's own bucket bounds: alike canaries
of 10,000 requests a side are promoted at least 80 % of the time and rolled back at most 1 %; a
canary 10 % slower (twice ``--min-effect``) is rolled back and never promoted, and so is one whose
answers got 10 % longer or shorter. At 0.5 % errors the on-call's ``--max-error-rise 0.3`` lets
alike canaries of 10,000 a side be promoted at least 80 % of the time, and a rise of 0.6 points
is rolled back. Its rank test is checked against scipy's Mann–Whitney on the same requests. The command runs against a real
Prometheus on loopback over backfilled vLLM series under a namespace/pod label scheme.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fleetwatch.cli import main
from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.core.profiles.buckets import VLLM_TTFT_BUCKETS
from fleetwatch.fleet.canary.judge import Side, judge_canary, material_superiority, rank_test
from fleetwatch.fleet.compare.decision import ERROR_FLOOR, error_verdict, material_rise
from fleetwatch.scenarios.compare_runs import CANARY_OUTPUT, CANARY_SIGNALS, canary_side_draw
from tests.prometheus_blocks import ramp, serving

SIGNALS = CANARY_SIGNALS
_side = canary_side_draw


def _decisions(
    n: int,
    slow: float,
    trials: int,
    seed: int,
    errors: tuple[float, float] = (0.0005, 0.0005),
    max_error_rise: float | None = None,
) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    out = {"promote": 0, "hold": 0, "rollback": 0}
    for _ in range(trials):
        b, c = _side(rng, n, errors=errors[0]), _side(rng, n, slow, errors=errors[1])
        out[judge_canary(b, c, max_error_rise=max_error_rise).decision] += 1
    return out


def test_alike_canaries_of_10000_requests_are_promoted_and_seldom_rolled_back() -> None:
    got = _decisions(10_000, 1.0, 200, seed=1)
    assert got["promote"] >= 0.8 * 200, got
    assert got["rollback"] <= 0.02 * 200, got  # 1 % nominal; loose on 200 trials


def test_a_canary_10_percent_slower_is_rolled_back_and_never_promoted() -> None:
    for n in (1_000, 10_000):
        got = _decisions(n, 1.1, 100, seed=2)
        assert got["rollback"] >= 95 and got["promote"] == 0, (n, got)


def test_at_half_a_percent_errors_the_on_calls_threshold_lets_alike_canaries_be_promoted() -> None:
    """0.5 % errors on both sides, 10,000 requests a side: a 0.1-point rise cannot be ruled out
    (most alike canaries hold); with --max-error-rise 0.3 at least 80 % are promoted and at
    most 2 % rolled back."""
    default = _decisions(10_000, 1.0, 200, seed=21, errors=(0.005, 0.005))
    assert default["promote"] < 0.6 * 200 and default["rollback"] <= 4, default
    own = _decisions(10_000, 1.0, 200, seed=21, errors=(0.005, 0.005), max_error_rise=0.003)
    assert own["promote"] >= 0.8 * 200 and own["rollback"] <= 4, own


def test_errors_doubled_from_half_a_percent_are_rolled_back_with_latency_alike() -> None:
    """A rise of 0.6 points (twice --max-error-rise 0.3) at 10,000 a side is rolled back at
    least 95 % of the time and never promoted."""
    got = _decisions(10_000, 1.0, 200, seed=22, errors=(0.005, 0.011), max_error_rise=0.003)
    assert got["rollback"] >= 0.95 * 200 and got["promote"] == 0, got
    report = judge_canary(
        _side(np.random.default_rng(23), 10_000, errors=0.005),
        _side(np.random.default_rng(24), 10_000, errors=0.013),
        max_error_rise=0.003,
    )
    (rate,) = report.rates
    assert rate.material == 0.003 and rate.verdict == "regressed"
    assert report.reasons[-1].startswith("error_rate rose: 0.")
    assert "a failure rate's rise 0.3 points" in report.render()


def test_the_failure_threshold_leaves_output_shares_to_min_effect() -> None:
    """--max-error-rise sets what counts for failure rates only: a share of how answers end
    (``finished_reason=length``) keeps min_effect of the baseline's share."""
    rng = np.random.default_rng(25)
    hist = _side(rng, 10_000).histograms
    failures = frozenset({"finished_reason=error"})
    base = Side(
        hist, 10_000, {"finished_reason=length": 2000, "finished_reason=error": 50}, failures
    )
    can = Side(
        hist, 10_000, {"finished_reason=length": 2030, "finished_reason=error": 55}, failures
    )
    by = {r.rate: r for r in judge_canary(base, can, max_error_rise=0.0025).rates}
    assert by["finished_reason=error"].material == 0.0025
    assert by["finished_reason=length"].material == pytest.approx(0.05 * 0.2)


def test_a_rate_rise_counts_from_the_same_material_rise_as_fleet_compares() -> None:
    """Without --max-error-rise the canary's rates take ``material_rise``, as ``fleet compare``'s
    error rate does: ``min_effect`` of the baseline's rate, 0.1 point at least."""
    assert material_rise(0.2, 0.05) == pytest.approx(0.01)
    assert material_rise(0.005, 0.05) == ERROR_FLOOR
    hist = _side(np.random.default_rng(26), 10_000).histograms
    base = Side(hist, 10_000, {"finished_reason=length": 2000, "finished_reason=abort": 5})
    can = Side(hist, 10_000, {"finished_reason=length": 2150, "finished_reason=abort": 20})
    for r in judge_canary(base, can).rates:
        assert r.material == material_rise(r.baseline[0] / r.baseline[1], 0.05)
        verdict = error_verdict(
            r.baseline, r.canary, r.p_adjusted, alpha=0.01, min_effect=0.05, confidence=0.9
        )[0]
        assert {"regressed": "rose", "improved": "fell"}.get(verdict, verdict) == r.verdict


def test_answers_materially_longer_or_shorter_roll_back_and_are_never_promoted() -> None:
    """Output tokens 10 % longer or shorter (twice --min-effect), latency and errors alike: at
    10,000 requests a side rolled back at least 95 % of the time, never promoted."""
    for longer, word in ((1.1, "longer"), (0.9, "shorter")):
        rng = np.random.default_rng(26)
        out = {"promote": 0, "hold": 0, "rollback": 0}
        for _ in range(100):
            report = judge_canary(_side(rng, 10_000), _side(rng, 10_000, longer=longer))
            out[report.decision] += 1
        assert out["rollback"] >= 95 and out["promote"] == 0, (longer, out)
        assert report.reasons[0].startswith(f"answers {word}: output_length A=")
        assert "tokens" in report.render()


def test_too_few_requests_hold_whatever_the_latencies() -> None:
    report = judge_canary(
        _side(np.random.default_rng(3), 200), _side(np.random.default_rng(4), 200)
    )
    assert report.decision == "hold" and report.exit_code == 4
    assert "not enough data: the canary served 200 requests" in report.reasons[0]


def test_the_rank_test_is_mann_whitneys_on_the_bucketed_requests() -> None:
    rng = np.random.default_rng(5)
    bounds = [*VLLM_TTFT_BUCKETS, float("inf")]
    b = np.bincount(
        np.searchsorted(bounds, 0.08 * np.exp(0.5 * rng.standard_normal(3000))),
        minlength=len(bounds),
    )
    c = np.bincount(
        np.searchsorted(bounds, 0.09 * np.exp(0.5 * rng.standard_normal(800))),
        minlength=len(bounds),
    )
    a, _, p, p_lower = rank_test(b.astype(float), c.astype(float))
    xb, xc = np.repeat(np.arange(len(bounds)), b), np.repeat(np.arange(len(bounds)), c)
    ref = stats.mannwhitneyu(xc, xb, alternative="greater", method="asymptotic")
    assert a == pytest.approx(ref.statistic / (len(xb) * len(xc)), rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-9)
    # the other tail from the same pass: the test with the sides swapped
    less = stats.mannwhitneyu(xc, xb, alternative="less", method="asymptotic")
    assert p_lower == pytest.approx(less.pvalue, rel=1e-9)
    assert p_lower == pytest.approx(rank_test(c.astype(float), b.astype(float))[2], rel=1e-12)


def test_what_is_material_depends_on_the_buckets() -> None:
    fine = np.array([0, 100, 400, 300, 150, 50, 0], dtype=float)
    bounds = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, float("inf")]
    assert material_superiority(fine, bounds, 1.0) == pytest.approx(0.5)
    shifted = material_superiority(fine, bounds, 1.05)
    assert 0.51 < shifted < 0.56
    # everything beyond the last bound: no slowdown can be seen, nothing can be ruled out
    beyond = np.array([0, 0, 1000], dtype=float)
    assert material_superiority(beyond, [0.01, 10.0, float("inf")], 1.05) == pytest.approx(0.5)
    one = {0.01: 0.0, 10.0: 0.0, float("inf"): 1000.0}
    report = judge_canary(Side({"ttft": one}, 1000), Side({"ttft": one}, 1000), min_requests=100)
    assert report.decision == "hold" and "ttft inconclusive" in report.reasons[0]


# --- the command, against a real Prometheus --------------------------------------------------

T0 = 1_700_000_000
STEPS = 41  # 10 minutes at 15 s
AT = T0 + 15 * (STEPS - 1)
PER_STEP = 250  # requests per pod per step: 10,000 per pod in the window
LABELS = """\
replica: [namespace, pod]
routing: [namespace]
matchers: ['job="vllm"', 'namespace="llm-prod"']
"""


def _openmetrics() -> str:
    """Six pods of one model in llm-prod (p3 with TTFT 30 % slower, p4 with 35 % of its answers
    cut at max_tokens where the others have 20 %, p5 answering 30 % longer) and a pod of another
    namespace; 0.1 % errors everywhere."""
    prof = get_profile("vllm")
    out: list[str] = []
    pods = [("llm-prod", p, 1.3 if p == "p3" else 1.0) for p in ("p0", "p1", "p2", "p3", "p4")]
    for ns, pod, slow in [*pods, ("llm-prod", "p5", 1.0), ("llm-dev", "d0", 1.0)]:
        labels = f'job="vllm",namespace="{ns}",pod="{pod}",model_name="m"'
        median, spread = CANARY_OUTPUT
        longer = 1.3 if pod == "p5" else 1.0
        length = prof.metric(Signal.OUTPUT_LENGTH)
        for le in [*length.buckets, float("inf")]:
            share = stats.norm.cdf(np.log(le / (median * longer)) / spread) if le < np.inf else 1.0
            le_s = "+Inf" if le == float("inf") else repr(le)
            out += ramp(
                f'{length.name}_bucket{{{labels},le="{le_s}"}}', PER_STEP * share, T0, STEPS
            )
        for sig, name in ((Signal.TTFT, "ttft"), (Signal.TPOT, "tpot"), (Signal.E2E, "e2e")):
            ref = prof.metric(sig)
            _, median, spread = SIGNALS[name]
            factor = slow if name == "ttft" else 1.0
            for le in [*ref.buckets, float("inf")]:
                share = (
                    stats.norm.cdf(np.log(le / (median * factor)) / spread) if le < np.inf else 1.0
                )
                le_s = "+Inf" if le == float("inf") else repr(le)
                out += [
                    f'{ref.name}_bucket{{{labels},le="{le_s}"}} {round(k * PER_STEP * share)} {T0 + 15 * k}'
                    for k in range(STEPS)
                ]
        length = 0.35 if pod == "p4" else 0.2
        for reason, share in (("stop", 0.799 - length + 0.2), ("length", length), ("error", 0.001)):
            out += [
                f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} '
                f"{round(k * PER_STEP * share)} {T0 + 15 * k}"
                for k in range(STEPS)
            ]
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus_url(
    tmp_path_factory: pytest.TempPathFactory, promtool: Path, prometheus_bin: Path
) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("prom"), _openmetrics(), promtool, prometheus_bin) as url:
        yield url


def _canary(url: str, tmp: Path, canary: str, baseline: str, *extra: str) -> tuple[int, Any]:
    (tmp / "labels.yaml").write_text(LABELS)
    out = tmp / "canary.json"
    argv = [
        "fleet", "canary", "--prometheus", url, "--profile", "vllm",
        "--labels", str(tmp / "labels.yaml"), "--at", str(AT), "--window", "10m",
        "--canary", canary, "--baseline", baseline, "--json", str(out), *extra,
    ]  # fmt: skip
    rc = main(argv)
    return rc, json.loads(out.read_text()) if out.exists() else None


def test_a_slower_canary_is_rolled_back_from_prometheus(
    prometheus_url: str, tmp_path: Path
) -> None:
    rc, doc = _canary(prometheus_url, tmp_path, 'pod="p3"', 'pod=~"p[0-2]"')
    assert rc == 3 and doc["decision"] == "rollback"
    assert doc["reasons"][0].startswith("ttft slower")
    by = {v["signal"]: v for v in doc["latency"]}
    assert by["ttft"]["verdict"] == "regressed"
    assert by["ttft"]["requests"] == {"baseline": 30_000, "canary": 10_000}
    assert by["tpot"]["verdict"] == "unchanged" and by["e2e"]["verdict"] == "unchanged"
    # the namespace outside the label scheme's matchers is not read
    assert "baseline: 3 replicas" in doc["notes"][0]


def test_an_alike_canary_is_promoted_and_one_too_small_held(
    prometheus_url: str, tmp_path: Path
) -> None:
    rc, doc = _canary(prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"')
    assert rc == 0 and doc["decision"] == "promote", doc["reasons"]
    rates = {r["rate"]: r["verdict"] for r in doc["rates"]}
    assert rates == dict.fromkeys(
        ["finished_reason=error", "finished_reason=length", "finished_reason=stop"], "unchanged"
    )
    rc, doc = _canary(
        prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"', "--min-requests", "20000"
    )
    assert rc == 4 and "not enough data" in doc["reasons"][0]
    rc, doc = _canary(
        prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"', "--max-error-rise", "0.25"
    )
    material = {r["rate"]: r["material_rise"] for r in doc["rates"]}
    assert rc == 0 and doc["procedure"]["max_error_rise"] == 0.0025
    assert material["finished_reason=error"] == 0.0025  # the profile's failure outcome
    assert material["finished_reason=length"] == pytest.approx(0.01)  # 5 % of 20 %


def test_answers_cut_more_often_roll_back_with_latency_alike(
    prometheus_url: str, tmp_path: Path
) -> None:
    rc, doc = _canary(prometheus_url, tmp_path, 'pod="p4"', 'pod=~"p[0-2]"')
    assert rc == 3, doc["reasons"]
    (reason,) = doc["reasons"]
    assert reason.startswith("finished_reason=length rose: 20.00% -> 35.00% (Holm p=")
    shares = {r["rate"]: r["verdict"] for r in doc["rates"]}
    assert (
        shares["finished_reason=stop"] == "fell" and shares["finished_reason=error"] == "unchanged"
    )
    assert all(v["verdict"] == "unchanged" for v in doc["latency"])


def test_answers_longer_roll_back_from_prometheus_with_latency_alike(
    prometheus_url: str, tmp_path: Path
) -> None:
    rc, doc = _canary(prometheus_url, tmp_path, 'pod="p5"', 'pod=~"p[0-2]"')
    assert rc == 3, doc["reasons"]
    (reason,) = doc["reasons"]
    assert reason.startswith("answers longer: output_length A=0.")
    by = {v["signal"]: v for v in doc["latency"]}
    assert by["output_length"]["verdict"] == "longer"
    assert by["output_length"]["requests"] == {"baseline": 30_000, "canary": 10_000}
    assert {by[s]["verdict"] for s in ("ttft", "tpot", "e2e")} == {"unchanged"}
    # alike pods' output lengths are ruled out both ways
    rc, doc = _canary(prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"')
    (length,) = [v for v in doc["latency"] if v["signal"] == "output_length"]
    assert rc == 0 and length["verdict"] == "unchanged"
    assert 1 - length["material_superiority"] < length["superiority_lower"]


@pytest.mark.parametrize(
    ("canary", "baseline", "needle"),
    [
        ('pod="p3"', 'pod=~"p[0-3]"', "both select llm-prod/p3"),
        ('pod="nope"', 'pod=~"p[0-2]"', '--canary pod="nope": no replica'),
        ('pod="p3"', 'pod="p3"', "the same series"),
    ],
)
def test_sides_that_cannot_be_compared_are_bad_input(
    prometheus_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    canary: str,
    baseline: str,
    needle: str,
) -> None:
    rc, doc = _canary(prometheus_url, tmp_path, canary, baseline)
    assert rc == 2 and doc is None
    assert needle in capsys.readouterr().err


def _fingerprint_file(path: Path, odd: bool) -> Path:
    """A fingerprint written as `probe fingerprint --json` writes it: three replicas, the third
    with another chat template when ``odd``."""
    from fleetwatch.engine_probe.probe.fingerprint.collect import Answer, ReplicaPrint
    from fleetwatch.engine_probe.probe.fingerprint.judge import judge
    from fleetwatch.engine_probe.probe.fingerprint.prompts import load_prompt_set
    from fleetwatch.engine_probe.probe.fingerprint.report import to_dict

    prompts = load_prompt_set(None)

    def replica(url: str, prompt_tokens: int) -> ReplicaPrint:
        answers = [Answer(p.id, "ok", prompt_tokens, 3, "length") for p in prompts.prompts]
        return ReplicaPrint(url, "m", answers=answers)

    prints = [replica("http://a", 9), replica("http://b", 9), replica("http://c", 12 if odd else 9)]
    data = to_dict(
        prints, prompts, judge(prints, prompts), taken_at="2026-12-04T20:00:00+00:00", meta={}
    )
    path.write_text(json.dumps(data))
    return path


def test_a_fingerprint_that_found_other_answers_rolls_an_alike_canary_back(
    prometheus_url: str, tmp_path: Path
) -> None:
    odd = _fingerprint_file(tmp_path / "odd.json", odd=True)
    rc, doc = _canary(
        prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"', "--fingerprint", str(odd)
    )
    assert rc == 3 and doc["decision"] == "rollback"
    assert doc["reasons"] == [
        "fingerprint: http://c answers m unlike the reference on 12 prompts (prompt tokens; "
        "first chat-plain)"
    ]
    same = _fingerprint_file(tmp_path / "same.json", odd=False)
    rc, doc = _canary(
        prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"', "--fingerprint", str(same)
    )
    assert rc == 0 and any("answers agree" in n for n in doc["notes"])
    rc, doc = _canary(
        prometheus_url, tmp_path, 'pod="p2"', 'pod=~"p[01]"', "--fingerprint", str(prometheus_url)
    )
    assert rc == 2


def test_a_bucket_bound_only_one_side_has_is_left_out_not_read_as_a_slowdown() -> None:
    """The canary runs an engine with one more bucket bound (0.3 s): judged on the bounds both
    sides have, alike latencies are alike."""
    rng = np.random.default_rng(9)
    base, can = _side(rng, 20_000), _side(rng, 20_000)
    extra = np.searchsorted(
        np.sort(0.08 * np.exp(0.5 * rng.standard_normal(20_000))), [0.3], side="right"
    )
    can.histograms["ttft"][0.3] = float(extra[0])  # type: ignore[index]
    for b, c in ((base, can), (can, base)):
        report = judge_canary(b, c)
        assert report.decision != "rollback", report.reasons
        (ttft,) = [v for v in report.latency if v.signal == "ttft"]
        assert abs(ttft.superiority - 0.5) < 0.01
