"""``POST /v1/alerts/alertmanager``: Alertmanager's webhook (payload version "4"), stored idempotently.

Alertmanager retries 5xx and connection errors and drops every other 4xx (notify/util.go), so: 2xx once the
alerts are stored (one row per (fingerprint, startsAt), status and endsAt updated on resolution); 503 with
Retry-After when the store is down or the body did not arrive within ``body_timeout_s``; 400/413/415/422
only for bodies that can never become valid (not JSON, not ``application/json``, a version other than "4",
a user-templated payload, an object repeating a key, a time outside the years 2000-2099, over the size
limit), the 422 naming the field; 401 for wrong credentials. ``endsAt: "0001-01-01T00:00:00Z"`` (Go's zero
time) is what Alertmanager sends for a firing alert and means "still firing"; no other time outside those
years is accepted.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from fleet.contract import error_message
from fleet.store.alerts import AlertEvent, upsert_alert_event
from fleet.store.engine import writing
from phasefit.service.body import BodyError, read_body
from phasefit.service.deps import AlertmanagerAuth, StateDep
from phasefit.service.models import AlertmanagerPayload, AlertmanagerResult, ErrorMessage
from phasefit.service.state import ServiceState, StoreNotReadyError
from phasefit.service.wire import repeated_key

log = logging.getLogger(__name__)
router = APIRouter(tags=["alerts"])

RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorMessage, "description": "Body claims gzip but is not gzip (never retried)."},
    401: {"model": ErrorMessage, "description": "Missing or wrong credentials (bearer or basic)."},
    413: {"model": ErrorMessage, "description": "Body over the size limit (never retried)."},
    415: {
        "model": ErrorMessage,
        "description": "A Content-Type other than application/json (optionally with charset=utf-8), or an "
        "unsupported Content-Encoding (never retried).",
    },
    422: {
        "model": ErrorMessage,
        "description": "Not a version 4 webhook payload, an object that repeats a key, or a time outside the "
        "years 2000-2099 (endsAt 0001-01-01T00:00:00Z excepted: still firing); the message names the field "
        "(never retried).",
    },
    503: {
        "model": ErrorMessage,
        "description": "Store unavailable, or the body did not arrive within the deadline: Alertmanager "
        "retries.",
    },
}


@router.post(
    "/v1/alerts/alertmanager",
    response_model=AlertmanagerResult,
    responses=RESPONSES,
    dependencies=[AlertmanagerAuth],
    summary="Alertmanager webhook receiver",
    openapi_extra={"x-phasefit-request-body": "AlertmanagerPayload"},
)
async def alertmanager(request: Request, state: StateDep) -> AlertmanagerResult | JSONResponse:
    """Store every alert of the notification; duplicates and re-deliveries update the same rows."""
    limit = state.settings.alert_max_body_bytes
    try:
        body = await read_body(
            request, max_bytes=limit, max_decoded_bytes=limit, timeout_s=state.settings.body_timeout_s
        )
    except BodyError as exc:
        if (
            exc.status == 408
        ):  # a slow link, not a bad payload: 503, which Alertmanager retries (408 it drops)
            retry = state.settings.store_retry_after_s
            return _refuse(state, exc.reason, 503, f"{exc.message}; retry", retry_after=retry)
        return _refuse(state, exc.reason, exc.status, exc.message)
    repeated = repeated_key(body)
    if repeated is not None:
        where = ".".join(str(part) for part in repeated)
        return _refuse(
            state, "repeated_key", 422,
            f"invalid Alertmanager notification: {where}: the key {repeated[-1]!r} appears more than once in "
            "one object",
        )  # fmt: skip
    try:
        payload = AlertmanagerPayload.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return _refuse(
            state, "invalid", 422, f"invalid Alertmanager notification: {where}: {error_message(first)}"
        )
    if payload.truncated_alerts:
        log.warning(
            "Alertmanager left %d alert(s) out (max_alerts is set on the receiver)", payload.truncated_alerts
        )
        state.metrics.alert_truncated.inc(payload.truncated_alerts)
    try:
        inserted = await anyio.to_thread.run_sync(_store, state, payload)
    except StoreNotReadyError as exc:
        return _refuse(
            state, "store_unavailable", 503, str(exc), retry_after=state.settings.store_retry_after_s
        )
    except Exception as exc:
        if not state.is_store_unavailable(exc):
            raise
        log.warning("alertmanager: store unavailable: %s: %s", type(exc).__name__, exc)
        return _refuse(
            state, "store_unavailable", 503, f"the store is unavailable ({type(exc).__name__}); retry later",
            retry_after=state.settings.store_retry_after_s,
        )  # fmt: skip
    for alert in payload.alerts:
        state.metrics.alerts.labels(alert.status).inc()
    return AlertmanagerResult(
        alerts=len(payload.alerts), inserted=inserted, updated=len(payload.alerts) - inserted
    )


def _store(state: ServiceState, payload: AlertmanagerPayload) -> int:
    state.schema.require_current()
    now = state.clock.now()
    inserted = 0
    with writing(state.engine) as connection:
        for alert in payload.alerts:
            event = AlertEvent(
                fingerprint=alert.fingerprint,
                starts_at=alert.starts_at,
                status=alert.status,
                receiver=payload.receiver,
                ends_at=alert.ends_at if alert.status == "resolved" else None,  # firing: 0001-01-01 = open
                labels=alert.labels,
                annotations=alert.annotations,
                generator_url=alert.generator_url,
                raw=alert.model_dump(mode="json", by_alias=True),
            )
            inserted += upsert_alert_event(connection, event, now=now) == "inserted"
    return inserted


def _refuse(
    state: ServiceState, reason: str, status: int, message: str, *, retry_after: int | None = None
) -> JSONResponse:
    state.metrics.alert_rejections.labels(reason).inc()
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"detail": message}, status_code=status, headers=headers)
