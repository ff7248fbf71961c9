"""The load probe: measures what users of an OpenAI-compatible endpoint feel, and the bound.

- ``client.Prober``: one aiohttp session driving open-loop (``arrivals``) or closed-loop load.
- ``measure``: the latency definitions (TTFT, TPOT, per-token ITL; from scheduled and actual send).
- ``stats``: percentiles, throughput, goodput against targets, capacity.
- ``runner``: a sweep plan, running it, and request records in the shared schema.
- ``bound`` and ``gpus``: the bandwidth bound of a model on a GPU.
- ``scripted_server``: a server that emits tokens at known instants (the probe's measuring stick).

Importing this package imports nothing heavy; each module pulls in what it needs.
"""
