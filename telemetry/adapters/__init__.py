"""Engine adapters: code an engine loads to feed fleetwatch's records, spans and metrics.

Each adapter turns one engine's own statistics into fleetwatch values through the same record
type, span builder, worker and sink the reference engine uses. Only the module the engine itself
loads (the plugin class) imports the engine; everything else runs without it.
"""
