"""Several reference-engine models behind one server: the byte-accounted model cache with pinning, its metrics, one merged ``/metrics`` body, and starting, stopping and commanding such a server."""
