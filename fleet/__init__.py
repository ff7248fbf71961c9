"""Fleet analysis: slow replicas against the fleet median (``outliers``), p99 tail attribution
(``tail``) and before/after run comparison (``compare``). All read ``fleetwatch.records`` frames;
``outliers`` also reads Prometheus and ``/metrics`` snapshots.
"""

from fleetwatch.fleet.errors import AnalysisError

__all__ = ["AnalysisError"]
