"""One router per area: ingest, fleet (GPUs and workers), findings, reports, alerts, health."""
