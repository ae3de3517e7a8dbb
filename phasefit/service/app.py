"""The app factory: ``create_app(settings, engine=None, clock=None)``; no module-level app.

``phasefit serve`` runs it under uvicorn (``factory=True``). Startup never fails on a store outage: the
service starts, ``/readyz`` answers 503 and writes answer 503 (collectors keep their spools) until the store
is back; an empty store is given the schema when ``create_schema`` is on, a store at another revision is
left alone and reported.

Read access (``settings.read_mode``) guards the query API, ``/metrics``, ``/openapi.json``, ``/docs`` and
``/redoc`` alike; only ``/healthz`` and ``/readyz`` (probes), ingest and the Alertmanager receiver (their
own credentials) are outside it. A client that goes away before its body arrived is answered (to no one)
with 499, counted in ``phasefit_service_client_disconnects_total`` and logged in one line.

With ``phasefit serve --workers N`` each worker process builds its own app from the environment
(:func:`app_from_environment`); on an empty PostgreSQL the first to take the migration lock creates the
schema and the others find it at head. What they share, and ``/metrics`` over all of them:
:mod:`phasefit.service.processes`.
"""

from __future__ import annotations

import gc
import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from pydantic.json_schema import models_json_schema
from sqlalchemy import Engine
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.requests import ClientDisconnect

from fleet.clock import Clock, SystemClock
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine
from fleet.store.migrate import SchemaNotCurrentError, ensure_schema
from fleet.store.partitions import ensure_partitions
from fleet.store.rows import INT32_MAX
from phasefit import __version__
from phasefit.service import processes
from phasefit.service.analyzer_gauges import AnalyzerCollector
from phasefit.service.batches import BatchValidator
from phasefit.service.deps import ReadAuth
from phasefit.service.guards import CardinalityGuard, TokenSlots, WriteGate
from phasefit.service.metrics import RequestMetricsMiddleware, ServiceMetrics
from phasefit.service.models import AlertmanagerPayload
from phasefit.service.routers import alerts, docs, findings, fleet, gpu_view, health, ingest, reports
from phasefit.service.routers import metrics as metrics_route
from phasefit.service.routers.common import no_nul_characters
from phasefit.service.settings import ServiceSettings
from phasefit.service.state import (
    BasicCredential,
    SchemaWatch,
    ServiceState,
    StoreNotReadyError,
    store_unavailable,
)
from phasefit.service.tokens import TokenRegistry, parse_tokens
from phasefit.service.writes import BatchWriter, SeriesCache

log = logging.getLogger(__name__)


def create_app(
    settings: ServiceSettings,
    engine: Engine | None = None,
    clock: Clock | None = None,
    *,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The service for ``settings``; ``engine`` (else one from ``settings.database_url``, disposed at
    shutdown), ``clock`` and the metrics ``registry`` are injectable for tests."""
    clock = clock or SystemClock()
    owns_engine = engine is None
    engine = engine if engine is not None else service_engine(settings)
    registry = registry if registry is not None else CollectorRegistry()
    state = _state(settings, engine, clock, registry, processes.files_directory())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(_startup, state)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(state.writer.close)
            if owns_engine:
                engine.dispose()

    app = FastAPI(
        title="phasefit",
        version=__version__,
        summary="Ingest, query API and Alertmanager receiver of phasefit (GPU placement for LLM inference).",
        lifespan=lifespan,
        openapi_url=None,  # served by routers/docs.py, behind the read access
        docs_url=None,
        redoc_url=None,
    )
    app.state.phasefit = state
    app.add_middleware(RequestMetricsMiddleware, metrics=state.metrics)
    read_guard = [ReadAuth] if settings.read_mode == "token" else []
    read_guard.append(Depends(no_nul_characters))
    app.include_router(health.router)
    app.include_router(ingest.router)
    app.include_router(alerts.router)
    for router in (
        fleet.router,
        gpu_view.router,
        findings.router,
        reports.router,
        metrics_route.router,
        docs.router,
    ):
        app.include_router(router, dependencies=read_guard)
    _store_error_handlers(app, state)
    _disconnect_handler(app, state)
    app.openapi = partial(_openapi, app, state)  # type: ignore[method-assign]
    return app


def service_engine(settings: ServiceSettings) -> Engine:
    """The store's engine, sized for the write concurrency and quick to fail when PostgreSQL is down."""
    if settings.database_url.startswith("sqlite"):
        return make_engine(settings.database_url, busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    return make_engine(
        settings.database_url,
        pool_size=settings.write_concurrency + 4,
        max_overflow=8,
        pool_timeout=settings.write_wait_s,
        # No ping per checkout (a round trip per request): a connection found dead fails that request with
        # 503 and SQLAlchemy then invalidates the whole pool, so the retry gets fresh connections.
        pool_pre_ping=False,
        connect_args={"connect_timeout": settings.db_connect_timeout_s},
    )


def _state(
    settings: ServiceSettings,
    engine: Engine,
    clock: Clock,
    registry: CollectorRegistry,
    metric_files: Path | None,
) -> ServiceState:
    """With ``metric_files`` (several processes) the metrics go to files and ``/metrics`` serves every
    process's; else to ``registry``, which ``/metrics`` serves."""
    metrics = ServiceMetrics(registry)
    if metric_files is not None:
        registry = processes.exposition_registry(metric_files)
    registry.register(AnalyzerCollector(engine))  # read from the store by whichever process is scraped
    sqlite = engine.dialect.name == "sqlite"
    gate = WriteGate(
        max_pending=settings.max_pending_ingests,
        retry_after_s=settings.retry_after_s,
        on_change=metrics.ingest_pending.inc,
    )
    token_slots = TokenSlots(limit=settings.ingest_limit_per_token, retry_after_s=settings.retry_after_s)
    cache = SeriesCache(refresh_s=settings.dimension_refresh_s)
    cardinality = CardinalityGuard(settings.max_new_series_per_token_per_hour, clock.monotonic)
    sku_resolver = catalog_sku_resolver(settings.catalog_path)
    writer = BatchWriter(
        engine,
        threads=1 if sqlite else settings.write_concurrency,  # SQLite has one writer
        max_queued=settings.max_pending_ingests,
        max_wait_s=settings.write_wait_s,
        retry_after_s=settings.retry_after_s,
        cache=cache,
        guard=cardinality,
        sku_resolver=sku_resolver,
        unavailable=partial(_unavailable, engine),
        monotonic=clock.monotonic,
        observe=metrics.write_seconds.observe,
        on_queued=metrics.ingest_queued.inc,
        on_writing=metrics.ingest_writing.inc,
    )
    password = settings.alertmanager_password_value()
    basic = (
        BasicCredential(settings.alertmanager_username, hashlib.sha256(password.encode()).digest())
        if settings.alertmanager_username is not None and password is not None
        else None
    )
    return ServiceState(
        settings=settings,
        engine=engine,
        clock=clock,
        registry=registry,
        metrics=metrics,
        ingest_tokens=_tokens(settings.ingest_tokens_file, settings.ingest_tokens, "ingest", metrics),
        read_tokens=_tokens(settings.read_tokens_file, settings.read_tokens, "read", metrics),
        alertmanager_tokens=_tokens(
            settings.alertmanager_tokens_file, settings.alertmanager_tokens, "alertmanager", metrics
        ),
        alertmanager_basic=basic,
        validator=BatchValidator(
            max_records=settings.max_records_per_batch, max_string_length=settings.max_string_length
        ),
        token_slots=token_slots,
        gate=gate,
        cardinality=cardinality,
        schema=SchemaWatch(engine, clock),
        sku_resolver=sku_resolver,
        cache=cache,
        writer=writer,
    )


def _unavailable(engine: Engine, exc: BaseException) -> bool:
    return store_unavailable(engine, exc)


def _tokens(path: Any, secret: Any, area: str, metrics: ServiceMetrics) -> TokenRegistry:
    static = (
        parse_tokens(secret.get_secret_value(), source=f"{area} tokens variable", split_spaces=True)
        if secret is not None
        else None
    )
    return TokenRegistry(static=static, path=path, on_reload_error=metrics.token_file_errors.labels(area).inc)


def _startup(state: ServiceState) -> None:
    try:
        if state.settings.create_schema:
            ensure_schema(state.engine, create_if_empty=True)
        state.schema.check()
        # Raw samples go to daily partitions on PostgreSQL: the days ahead exist before their samples arrive.
        ensure_partitions(state.engine, datetime.now(UTC))
    except SchemaNotCurrentError as exc:
        log.error("%s; /readyz answers 503 and writes are refused until then", exc)
    except Exception as exc:
        if not state.is_store_unavailable(exc):
            raise
        log.warning(
            "the store is unreachable at start (%s: %s); serving anyway: /readyz and writes answer 503 until "
            "it is back",
            type(exc).__name__,
            exc,
        )
    if not state.ingest_tokens.configured:
        log.warning("development mode: ingest accepts requests without a token")


def _store_error_handlers(app: FastAPI, state: ServiceState) -> None:
    """Any route that meets a store outage answers 503 with Retry-After, never 500."""
    retry = {"Retry-After": str(state.settings.store_retry_after_s)}

    async def not_ready(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers=retry)

    async def unavailable(_: Request, exc: Exception) -> JSONResponse:
        log.warning("store unavailable: %s: %s", type(exc).__name__, exc)
        detail = f"the store is unavailable ({type(exc).__name__}); retry later"
        return JSONResponse({"detail": detail}, status_code=503, headers=retry)

    app.add_exception_handler(StoreNotReadyError, not_ready)
    dbapi = state.engine.dialect.loaded_dbapi
    for error in (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError,
                  dbapi.OperationalError, dbapi.InterfaceError):  # fmt: skip
        app.add_exception_handler(error, unavailable)


def _disconnect_handler(app: FastAPI, state: ServiceState) -> None:
    """A client that went away mid-body is its own doing, not a server error: one log line, no traceback,
    code 499 in ``phasefit_service_requests_total`` and a count in ``phasefit_service_client_disconnects``."""

    async def client_gone(request: Request, _: Exception) -> Response:
        route = getattr(request.scope.get("route"), "path", None) or "unmatched"
        state.metrics.client_disconnects.labels(request.method, route).inc()
        peer = f"{request.client.host}:{request.client.port}" if request.client is not None else "a client"
        log.info(
            "%s disconnected before its %s %s body arrived whole; nothing stored (counted as 499)",
            peer,
            request.method,
            request.url.path,
        )
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    app.add_exception_handler(ClientDisconnect, client_gone)


CLIENT_CLOSED_REQUEST = 499  # nginx's code for "the client closed the connection before the answer"


def _openapi(app: FastAPI, state: ServiceState) -> dict[str, Any]:
    """FastAPI's document plus the request bodies of the routes that read their body themselves (to enforce
    size limits and gzip before parsing), so clients and schemathesis see the real schemas."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
    )
    envelope = state.validator.envelope
    _, definitions = models_json_schema(
        [(envelope, "validation"), (AlertmanagerPayload, "validation")],
        ref_template="#/components/schemas/{model}",
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(definitions.get("$defs", {}))
    _as_validated(schemas, state.settings)
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            model = operation.pop("x-phasefit-request-body", None)
            if model is not None:
                operation["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}},
                    "description": "JSON; Content-Encoding: gzip is accepted.",
                }
    app.openapi_schema = document
    return document


_LIMITED_NAMES = {  # the names whose length the service limits below the contract's (batches._name_errors)
    "GpuSample": ("node", "gpu_uuid", "gpu_name", "worker_id", "parent_gpu_uuid", "mig_profile"),
    "EngineSample": ("worker_id", "node", "engine", "model", "precision", "gpu_uuids"),
}


def _as_validated(schemas: dict[str, Any], settings: ServiceSettings) -> None:
    """Make the record schemas say what ingest validates, where pydantic's rendering of the contract says
    something else: ``kind`` is the union's discriminator, so required (the models' default applies only to
    records built in Python); ``gpu_index`` is stored as a 32-bit integer; names are at most
    ``max_string_length`` long; ``ts`` lies within a window around the service's clock (said in words: JSON
    Schema has no "now")."""
    window = (
        f"Window end, RFC 3339 with a time zone, within the window this service accepts: from "
        f"{settings.ingest_max_age:g} s before its clock (PHASEFIT_INGEST_MAX_AGE_S) to "
        f"{settings.ingest_max_future_s:g} s after it (PHASEFIT_INGEST_MAX_FUTURE_S); 422 otherwise."
    )
    for name in ("GpuSample", "EngineSample"):
        schema = schemas.get(name)
        if schema is None:
            continue
        properties = schema["properties"]
        properties["kind"].pop("default", None)
        if "kind" not in schema.setdefault("required", []):
            schema["required"].insert(0, "kind")
        properties["ts"]["description"] = window
        for field in _LIMITED_NAMES[name]:
            for variant in _variants(properties[field]):
                target = variant.get("items", variant)
                if "maxLength" in target:
                    target["maxLength"] = min(target["maxLength"], settings.max_string_length)
    gpu_index = schemas.get("GpuSample", {}).get("properties", {}).get("gpu_index")
    if gpu_index is not None:
        gpu_index["maximum"] = INT32_MAX


def _variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in schema.get("anyOf", [schema]) if v.get("type") != "null"]


def app_from_environment() -> FastAPI:
    """The uvicorn factory of ``phasefit serve``: settings from the environment (``PHASEFIT_*``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # /readyz checks the revision on every probe
    metric_files = processes.files_directory()
    if metric_files is not None:
        processes.start_process(metric_files)  # before the first metric of this process is made
    app = create_app(ServiceSettings())
    tune_gc_for_serving()
    return app


GC_GEN0_THRESHOLD = 10_000


def tune_gc_for_serving() -> None:
    """Cheaper garbage collection for a long-running service process (called once, by the serve factory).

    Every ingest request allocates a few thousand short-lived objects (records, rows), and with
    CPython's defaults (700, 10, 10) the collector then ran about once per request and its full
    collections, which walk the ~120,000 objects the imports and the app leave behind, paused every
    in-flight request for up to 100 ms (about a fifth of a request's CPU went to collection). Freezing
    what exists after start-up takes those objects out of every later collection, and a larger first
    generation threshold lets short-lived objects die before anyone walks them."""
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
