"""The reference engine (``fleetwatch.engine_probe.engine``), its HTTP server and the load probe.

Importing this package does not import torch; only ``fleetwatch.engine_probe.engine``'s model modules do.
"""
