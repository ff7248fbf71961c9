"""Data generators and engine scenarios shared by the tests, the benchmarks and the demo.

They live at the top floor because they compose lower ones (``engine_runs`` runs the reference
engine under telemetry); the packages that analyse data (``fleet``, ``slo``) never import them.
"""
