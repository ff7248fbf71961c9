"""``fleetwatch probe fingerprint``: do a model's replicas answer the same prompts the same way?

- ``prompts``: the versioned prompt set (``fingerprint-v1.json`` ships; ``--prompts FILE``).
- ``collect``: each replica asked every prompt, greedy and seeded, one at a time.
- ``judge``: per model, the majority (or an earlier fingerprint) and who differs from it.
- ``report``: the text report and the JSON file ``--against`` reads back.
"""
