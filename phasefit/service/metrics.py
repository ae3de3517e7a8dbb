"""The service's own metrics (``phasefit_service_*``) and the middleware that counts requests; the
``GET /metrics`` route is :mod:`phasefit.service.routers.metrics`.

Everything is registered on the app's own ``CollectorRegistry`` (injected, never the global one), so two
apps in one process (tests) never share a series. Own metrics are prefixed ``phasefit_service_``; the
analyzer's gauges use the names agreed in the team brief (:mod:`phasefit.service.analyzer_gauges`).
The gauges are moved with ``inc``/``dec`` where their quantity changes and summed over the live processes
(``livesum``), so they read the same whether one process serves or several (:mod:`.processes`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    """The service's own counters and histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "phasefit_service_requests",
            "HTTP requests answered, by route template and status code.",
            ["method", "route", "code"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            "phasefit_service_request_duration_seconds",
            "Time to answer an HTTP request, by route template.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.ingest_records = Counter(
            "phasefit_service_ingest_records",
            "Records accepted by POST /v1/ingest (stored or already there), by kind.",
            ["kind"],
            registry=registry,
        )
        self.ingest_stored = Counter(
            "phasefit_service_ingest_stored_records", "Records newly stored by ingest.", registry=registry
        )
        self.ingest_duplicates = Counter(
            "phasefit_service_ingest_duplicate_records",
            "Records ingest found already stored (collector re-sends).",
            registry=registry,
        )
        self.ingest_rejections = Counter(
            "phasefit_service_ingest_rejections",
            "Ingest requests refused, by reason (token_busy, body_timeout, too_large, encoding, bad_gzip, "
            "overload, invalid, too_many_records, forbidden_node, foreign_series, conflict, cardinality, "
            "concurrent_write, store_unavailable).",
            ["reason"],
            registry=registry,
        )
        self.client_disconnects = Counter(
            "phasefit_service_client_disconnects",
            "Requests whose client went away before their body arrived whole (also counted as code 499 in "
            "phasefit_service_requests_total), by route template.",
            ["method", "route"],
            registry=registry,
        )
        self.write_seconds = Histogram(
            "phasefit_service_store_write_seconds",
            "Time of one ingest store transaction (a group of one or more batches).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.alerts = Counter(
            "phasefit_service_alertmanager_alerts",
            "Alerts received from Alertmanager, by status.",
            ["status"],
            registry=registry,
        )
        self.alert_truncated = Counter(
            "phasefit_service_alertmanager_truncated_alerts",
            "Alerts Alertmanager left out of notifications (truncatedAlerts: max_alerts is set).",
            registry=registry,
        )
        self.alert_rejections = Counter(
            "phasefit_service_alertmanager_rejections",
            "Alertmanager notifications refused, by reason.",
            ["reason"],
            registry=registry,
        )
        self.auth_failures = Counter(
            "phasefit_service_auth_failures",
            "Requests refused for their credentials, by area (ingest, read, alertmanager) and reason.",
            ["area", "reason"],
            registry=registry,
        )
        self.token_file_errors = Counter(
            "phasefit_service_token_file_errors",
            "Token files that changed but could not be read (the previous tokens stay in force).",
            ["area"],
            registry=registry,
        )
        self.ingest_pending = Gauge(
            "phasefit_service_ingest_pending_requests",
            "Ingest requests admitted and not yet answered.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.ingest_writing = Gauge(
            "phasefit_service_ingest_writing_groups",
            "Store transactions of ingest batches in progress (each may hold several batches).",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.ingest_queued = Gauge(
            "phasefit_service_ingest_queued_batches",
            "Validated ingest batches waiting for a writer.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.processes = Gauge(
            "phasefit_service_processes",
            "Service processes serving this address (phasefit serve --workers), each counted while alive.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.processes.set(1)


class RequestMetricsMiddleware:
    """Counts and times every HTTP request by the route template it matched (not the raw path)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.request_seconds.labels(method, template).observe(time.perf_counter() - started)
