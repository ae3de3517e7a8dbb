"""``GET /healthz`` (the process answers) and ``GET /readyz`` (store reachable, schema at head)."""

from __future__ import annotations

import logging

import anyio.to_thread
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from phasefit.service.deps import StateDep
from phasefit.service.models import Health, Readiness

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    """Always 200 while the process serves requests; a store outage does not make it fail."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Store unreachable or schema not at head."}},
    summary="The store is reachable and its schema is at head",
)
async def readyz(state: StateDep) -> Readiness | JSONResponse:
    """200 when the store answers and its schema is at this phasefit's head revision, else 503."""
    head = state.schema.head()
    try:
        status = await anyio.to_thread.run_sync(state.schema.check)
    except Exception as exc:
        if not state.is_store_unavailable(exc):
            raise
        log.warning("readyz: store unreachable: %s: %s", type(exc).__name__, exc)
        body = Readiness(
            status="not-ready", store="unreachable", schema_state=None, schema_revision=None,
            head_revision=head, detail=f"store unreachable ({type(exc).__name__})",
        )  # fmt: skip
        return JSONResponse(body.model_dump(mode="json"), status_code=503)
    ready = Readiness(
        status="ready" if state.schema.current else "not-ready", store="reachable",
        schema_state=status.state.value, schema_revision=status.current, head_revision=status.head,
        detail=state.schema.reason or None,
    )  # fmt: skip
    if not state.schema.current:
        return JSONResponse(ready.model_dump(mode="json"), status_code=503)
    return ready
