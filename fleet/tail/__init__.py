"""Tail attribution: why are the slowest requests slow?

Each request's latency is split into measured components (queue, prefill, decode, preemption
stall; they add up exactly). The tail cohort (at or above the chosen percentile of the target
latency, p99 by default) is compared with the body (the rest): the difference of their means is the
tail's *excess*, and the difference of each component's means says where it went (``cohorts``).

Suspects are ranked by how many seconds of that excess each explains (``suspects``):

- queueing: the tail's extra queue time (measured);
- preemption: the tail's extra preemption stall (measured);
- prompt-length variance, output length, prefill interference, one bad replica: the service time
  (latency minus queue and stall) is fitted by least squares on uncached prompt tokens, output
  tokens, the prompt tokens of *other* long-prompt prefills running on the same replica while the
  request was in flight (an approximation of sharing steps with them), and an indicator for the
  replica most over-represented in the tail (``model``). Each factor explains coefficient ×
  (tail mean − body mean) seconds, an Oaxaca-style decomposition; what is left is reported as
  unexplained.

Replicas of different models are never one fleet: ``attribute_tail_by_model`` attributes each
model's tail apart, at its own percentile, and reports per model.

``attribute_tail`` runs those steps and returns a ``TailReport`` (``report``). Everything is
vectorised (numpy sorts and one small least-squares solve): a million records take well under two
seconds.
"""

from fleetwatch.fleet.tail.attribute import attribute_tail, attribute_tail_by_model
from fleetwatch.fleet.tail.report import Component, Suspect, TailReport

__all__ = ["Component", "Suspect", "TailReport", "attribute_tail", "attribute_tail_by_model"]
