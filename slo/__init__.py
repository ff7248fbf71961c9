"""SLOs for LLM serving: specs, error budgets, burn-rate alerts, Prometheus rules, backtests."""
