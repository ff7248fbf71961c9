"""Grafana dashboards, built with grafana-foundation-sdk from the metric profiles."""
