"""`fleetwatch demo`: a four-replica reference fleet on loopback, two planted problems, an error
burst, and what fleetwatch finds (``run.run_demo``), optionally under a real Prometheus."""
