"""The period's error ratio, built from the shortest window's recorded counts, is the traffic-
weighted ratio of the raw counters (to the edges of one window), not a mean of short ratios:
proven by promtool on traffic that grows tenfold with its errors halfway through the period."""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetwatch.core.profiles import get_profile
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules, render_rules
from tests.promtool_run import promtool_test

SPEC = """
service: s
evaluation_interval: 1m
slos:
  - name: a
    objective: 99
    period: 2h
    sli: {kind: availability}
    windows: [{severity: page, long: 20m, short: 2m, burn: 14.4}]
"""
# 60 minutes at 100 good requests a minute and 1 bad; then 60 at 1000 good and 100 bad.
GOOD = "0+100x60 6000+1000x60"
BAD = "0+1x60 60+100x60"
RAW = (60 * 1 + 60 * 100) / (60 * 101 + 60 * 1100)  # 0.0841: what the counters say
MEAN = (1 / 101 + 100 / 1100) / 2  # 0.0504: a mean of short ratios (Sloth's period)


def test_the_period_ratio_is_the_traffic_weighted_ratio(promtool: Path, tmp_path: Path) -> None:
    ruleset = generate_rules(load_spec(SPEC), get_profile("fleetwatch"))
    rules = tmp_path / "slo.rules.yaml"
    rules.write_text(render_rules(ruleset))
    period = 'slo:sli_error:ratio_rate2h{service="s",slo="a"}'
    labels = 'service="s",slo="a",window="2h"'
    series = "fleetwatch_requests_total{model='m',replica='r',traffic_class='default',status='%s'}"
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": (series % "ok").replace("'", '"'), "values": GOOD},
                    {"series": (series % "error").replace("'", '"'), "values": BAD},
                ],
                "promql_expr_test": [
                    {
                        "expr": f"abs({period} - {RAW!r}) < bool 0.005",
                        "eval_time": "120m",
                        "exp_samples": [{"labels": f"{{{labels}}}", "value": 1}],
                    },
                    {
                        "expr": f"abs({period} - {MEAN!r}) > bool 0.02",
                        "eval_time": "120m",
                        "exp_samples": [{"labels": f"{{{labels}}}", "value": 1}],
                    },
                ],
            }
        ],
    }
    result = promtool_test(promtool, tmp_path, yaml.safe_dump(test, sort_keys=False))
    assert result.returncode == 0, result.stdout + result.stderr
