"""Benchmarks: side-by-side ratios in one run, medians reported. Run with ``make bench``."""
