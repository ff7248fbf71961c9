"""``fleetwatch engine serve``: its flags (server, tenants, telemetry) and what it checks before it binds a port."""
