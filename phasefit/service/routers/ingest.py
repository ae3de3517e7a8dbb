"""``POST /v1/ingest``: a batch of data-contract records from a collector, stored whole or not at all.

Order of refusals, cheapest first: credentials (401/403), the token's requests in progress (429, before the
body is read), the body's media type and encoding, size and deadline (415/413/408/400, read before any
admission slot is taken, so a slow body holds none), admission (429), an object repeating a key and the
contract, timestamps inside the window the service accepts (422 naming record and field; 413 for too many
records), the records' nodes against the token's binding (403); then, in the write transaction, GPUs
and workers the store holds on nodes outside the binding (403), re-sent keys with other values (409), the
cardinality budget (429); the write queue (429 when full or when a batch waited too long), the store (503).
Every refusal stores nothing; a batch is written in one transaction (with others: group commit), and a
re-sent batch with the same values is answered 200 with its records counted as duplicates. An answer sent
before the body was read whole closes the connection.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from fleet.store.rows import RowBatch
from fleet.store.writer import WriteCounts
from phasefit.service.batches import BatchRejectedError, check_nodes, rows_for
from phasefit.service.body import BodyError, read_body
from phasefit.service.claims import AnyRecord, References, references
from phasefit.service.deps import IngestToken, StateDep
from phasefit.service.guards import CardinalityExceededError, OverloadedError, TokenBusyError
from phasefit.service.models import ErrorMessage, IngestResult, RecordErrors
from phasefit.service.state import ServiceState, StoreNotReadyError
from phasefit.service.tokens import Token
from phasefit.service.writes import ConcurrentWriteError

log = logging.getLogger(__name__)
router = APIRouter(tags=["ingest"])

_INLINE_PARSE_BYTES = 64 * 1024  # larger bodies are validated off the event loop

RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorMessage, "description": "The body claims gzip but is not valid gzip."},
    401: {"model": ErrorMessage, "description": "Missing, unknown or revoked token."},
    403: {
        "model": RecordErrors,
        "description": "A read-only token, records for a node this token is not bound to, or a GPU or worker "
        "the store holds on such a node.",
    },
    408: {"model": ErrorMessage, "description": "The body did not arrive within the deadline."},
    409: {
        "model": RecordErrors,
        "description": "A sample key already stored (or repeated in the batch) with other values; each error "
        "names the key and the fields that differ. Nothing of the batch is stored.",
    },
    413: {"model": RecordErrors, "description": "Body, decoded body or record count over the limit."},
    415: {
        "model": ErrorMessage,
        "description": "A Content-Type other than application/json (optionally with charset=utf-8), or a "
        "Content-Encoding other than gzip.",
    },
    422: {
        "model": RecordErrors,
        "description": "Invalid records, each error naming the record and field: the schema's rules, an "
        "object that repeats a key, and a ts outside the window the service accepts (from "
        "PHASEFIT_INGEST_MAX_AGE_S before its clock, 14 days by default, to PHASEFIT_INGEST_MAX_FUTURE_S "
        "after it, 1 h by default).",
    },
    429: {
        "model": ErrorMessage,
        "description": "Overloaded, the token's requests in progress at their limit, or over the token's "
        "budget of new GPUs/workers; retry after Retry-After seconds.",
    },
    503: {
        "model": ErrorMessage,
        "description": "The store is unavailable; retry after Retry-After seconds "
        "and keep the records spooled.",
    },
}


@router.post(
    "/v1/ingest",
    response_model=IngestResult,
    responses=RESPONSES,
    summary="Store a batch of gpu_sample / engine_sample records",
    openapi_extra={"x-phasefit-request-body": "IngestBatch"},
)
async def ingest(request: Request, state: StateDep, token: IngestToken) -> IngestResult | JSONResponse:
    """Body ``{"records": [...]}`` (``Content-Type: application/json``, optionally ``Content-Encoding:
    gzip``); all stored or none. Each record's ``ts`` must lie within the window the service accepts, from
    PHASEFIT_INGEST_MAX_AGE_S (default: the raw retention, 14 days) before the service's clock to
    PHASEFIT_INGEST_MAX_FUTURE_S (default 1 h) after it; the JSON Schema cannot say "relative to now", so the
    422 does, naming the record."""
    settings = state.settings
    try:
        async with state.token_slots.taken(token.name):
            body = await read_body(
                request,
                max_bytes=settings.max_body_bytes,
                max_decoded_bytes=settings.max_decompressed_bytes,
                timeout_s=settings.body_timeout_s,
            )
            async with state.gate.admitted():
                if len(body) > _INLINE_PARSE_BYTES:
                    prepared = await anyio.to_thread.run_sync(partial(_prepare, state, token, body))
                else:
                    prepared = _prepare(state, token, body)
                if not state.schema.current:
                    await anyio.to_thread.run_sync(state.schema.require_current)
                counts = await _write(state, token, prepared)
    except TokenBusyError as exc:
        return _refuse(state, "token_busy", 429, str(exc), retry_after=exc.retry_after_s, close=True)
    except ConcurrentWriteError as exc:
        return _refuse(state, "concurrent_write", 429, str(exc), retry_after=exc.retry_after_s)
    except OverloadedError as exc:
        return _refuse(state, "overload", 429, str(exc), retry_after=exc.retry_after_s)
    except BodyError as exc:
        close = exc.status in (408, 413, 415)  # the rest of the body was not read
        if exc.status == 413:
            return _refuse(state, exc.reason, 413, None, errors=[_envelope_error(exc.message)], close=close)
        return _refuse(state, exc.reason, exc.status, exc.message, close=close)
    except BatchRejectedError as exc:
        errors = [{"index": e.index, "field": e.field, "message": e.message} for e in exc.errors]
        return _refuse(state, exc.reason, exc.status, None, errors=errors)
    except CardinalityExceededError as exc:
        return _refuse(state, "cardinality", 429, str(exc), retry_after=exc.retry_after_s)
    except StoreNotReadyError as exc:
        return _refuse(state, "store_unavailable", 503, str(exc), retry_after=settings.store_retry_after_s)
    except Exception as exc:
        if not state.is_store_unavailable(exc):
            raise
        log.warning("ingest: store unavailable: %s: %s", type(exc).__name__, exc)
        detail = f"the store is unavailable ({type(exc).__name__}); retry later"
        return _refuse(state, "store_unavailable", 503, detail, retry_after=settings.store_retry_after_s)
    batch = prepared.batch
    state.metrics.ingest_records.labels("gpu_sample").inc(len(batch.gpu_rows))
    state.metrics.ingest_records.labels("engine_sample").inc(len(batch.engine_rows))
    state.metrics.ingest_stored.inc(counts.stored)
    state.metrics.ingest_duplicates.inc(counts.duplicates)
    return IngestResult(accepted=len(batch), stored=counts.stored, duplicates=counts.duplicates)


@dataclass(frozen=True)
class _Prepared:
    records: list[AnyRecord]
    batch: RowBatch
    references: References | None  # for a node-bound token only


def _prepare(state: ServiceState, token: Token, body: bytes) -> _Prepared:
    records = state.validator.parse(body, ingest_window(state))
    refs = None
    if token.nodes:
        check_nodes(records, token.allows_node)
        refs = references(records)
    return _Prepared(records, rows_for(records, state.time_encoding), refs)


def ingest_window(state: ServiceState) -> tuple[datetime, datetime]:
    """The timestamps ingest accepts now: [clock - max age, clock + max future)."""
    now = state.clock.now()
    age, future = state.settings.ingest_max_age, state.settings.ingest_max_future_s
    return now - timedelta(seconds=age), now + timedelta(seconds=future)


async def _write(state: ServiceState, token: Token, prepared: _Prepared) -> WriteCounts:
    """Hand the batch to the writer threads and wait for its own outcome."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[WriteCounts] = loop.create_future()

    def settle(result: WriteCounts | BaseException) -> None:
        if outcome.done():
            return
        if isinstance(result, BaseException):
            outcome.set_exception(result)
        else:
            outcome.set_result(result)

    def done(result: WriteCounts | BaseException) -> None:  # called from a writer thread
        loop.call_soon_threadsafe(settle, result)

    state.writer.submit(prepared.batch, token, done, records=prepared.records, references=prepared.references)
    return await outcome


def _envelope_error(message: str) -> dict[str, Any]:
    return {"index": None, "field": None, "message": message}


def _refuse(
    state: ServiceState,
    reason: str,
    status: int,
    message: str | None,
    *,
    errors: list[dict[str, Any]] | None = None,
    retry_after: int | None = None,
    close: bool = False,
) -> JSONResponse:
    state.metrics.ingest_rejections.labels(reason).inc()
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if close:
        headers["Connection"] = "close"
    return JSONResponse(
        {"detail": errors if errors is not None else message}, status_code=status, headers=headers
    )
