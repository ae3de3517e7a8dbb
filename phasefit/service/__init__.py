"""The phasefit service: ingest for collectors, the query API, the Alertmanager receiver and ``/metrics``.

Build it with :func:`phasefit.service.app.create_app`; ``phasefit serve`` runs that factory under uvicorn.
Modules: ``settings`` (ServiceSettings), ``tokens`` (hashed bearer tokens, re-read on change), ``state``
(what one app holds: engine, clock, guards, metrics), ``deps`` (Annotated dependencies), ``body`` (bounded
body reading and gzip), ``batches`` (ingest envelope validation), ``guards`` (admission and the cardinality
budget), ``writes`` (the group-commit writer threads), ``metrics`` (the service's own metrics and
``GET /metrics``), ``analyzer_gauges`` (the analyzer's conclusions as gauges), ``models`` (request and
response models), ``series`` (time bucketing for the read API) and one router per area under ``routers/``.
"""
