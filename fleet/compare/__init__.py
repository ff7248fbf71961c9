"""Compare two runs (before and after an upgrade): which latencies moved, by how much, how sure
we are, which component moved, and whether the workload itself changed.

- Percentile shifts (p50, p90, p99 by default) with bootstrap confidence intervals, and
  Mann–Whitney U per metric with the effect size P(after > before), as Kayenta does
  (``statistics``).
- One decision per metric at a stated family-wise error rate (1 % by default): an exact
  permutation test per percentile (``quantile_test``), Bonferroni within a metric, Holm across
  metrics, and a practical gate of 5 % (``decision``). Two runs of the same system list any
  regression at most 1 % of the time.
- Which component moved: change in the mean queue, prefill, decode and stall, over all requests
  and over each run's e2e tail (``components``).
- Workload check: two-sample Kolmogorov–Smirnov on prompt and output lengths and the prefix-cache
  share, and the request rate (``workload``).
  When the workload differs, shifts may be the workload, not a regression, and the report says so
  before anything else; the test and the practical gate then compare like with like within
  quantile-matched strata of request size (``matching``), so a workload change alone is never a
  regression.
- Per model: ``compare_runs_by_model`` compares each model's before and after records apart
  (matched by model) and reports per model.
- The report and its text and JSON forms (``report``); ``compare_runs`` puts them together
  (``run``).
"""

from fleetwatch.fleet.compare.components import ComponentMove
from fleetwatch.fleet.compare.decision import holm
from fleetwatch.fleet.compare.quantile_test import quantile_test
from fleetwatch.fleet.compare.report import CompareReport
from fleetwatch.fleet.compare.run import compare_runs, compare_runs_by_model
from fleetwatch.fleet.compare.statistics import (
    MetricComparison,
    PercentileShift,
    bootstrap_quantiles,
)
from fleetwatch.fleet.compare.workload import WorkloadCheck

__all__ = [
    "CompareReport",
    "ComponentMove",
    "MetricComparison",
    "PercentileShift",
    "WorkloadCheck",
    "bootstrap_quantiles",
    "compare_runs",
    "compare_runs_by_model",
    "holm",
    "quantile_test",
]
