"""Compare two runs (before and after an upgrade): which latencies moved, by how much, how sure
we are, which component moved, and whether the workload itself changed.

- Percentile shifts (p50, p90, p99 by default) with bootstrap confidence intervals, and
  Mann–Whitney U per metric with the effect size P(after > before), as Kayenta does
  (``statistics``).
- Which component moved: change in the mean queue, prefill, decode and stall, over all requests
  and over each run's e2e tail (``components``).
- Workload check: two-sample Kolmogorov–Smirnov on prompt and output lengths and the prefix-cache
  share, and the request rate; like-for-like ratios within prompt-length buckets (``workload``).
  When the workload differs, shifts may be the workload, not a regression, and the report says so
  before anything else.
- The report and its text and JSON forms (``report``); ``compare_runs`` puts them together
  (``run``).
"""

from fleet.compare.components import ComponentMove
from fleet.compare.report import CompareReport
from fleet.compare.run import compare_runs
from fleet.compare.statistics import MetricComparison, PercentileShift, bootstrap_quantiles
from fleet.compare.workload import WorkloadCheck

__all__ = [
    "CompareReport",
    "ComponentMove",
    "MetricComparison",
    "PercentileShift",
    "WorkloadCheck",
    "bootstrap_quantiles",
    "compare_runs",
]
