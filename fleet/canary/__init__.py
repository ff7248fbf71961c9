"""``fleetwatch fleet canary``: promote, hold or roll back a canary from live Prometheus data.

- ``judge``: the decision from two sides' histogram buckets and outcome counts.
- ``report``: the decision and its verdicts as text, JSON and an exit status.
- ``prometheus``: each side's window from a Prometheus server, by label matchers.
"""
