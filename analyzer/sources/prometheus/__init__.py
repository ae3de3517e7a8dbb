"""Zero-agent mode: the analysis input read from a Prometheus-compatible API."""
