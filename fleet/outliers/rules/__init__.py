"""The detector as Prometheus recording and alerting rules, with the promtool test that checks them."""
