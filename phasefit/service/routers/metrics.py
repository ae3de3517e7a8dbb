"""``GET /metrics``: the service's own health and, computed per scrape, the analyzer's conclusions.

Everything is on the app's own ``CollectorRegistry`` (injected, never the global one), so two apps in one
process (tests) never share a series. With several service processes on one port the registry reads every
process's metric files instead (:mod:`phasefit.service.processes`), so any process answers for all.
"""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from phasefit.service.deps import StateDep
from phasefit.service.models import ErrorMessage

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text exposition."},
        401: {
            "model": ErrorMessage,
            "description": "Read access is token-guarded and the token is missing or wrong.",
        },
        403: {"model": ErrorMessage, "description": "The token may not read (an ingest token)."},
    },
    summary="Prometheus metrics: the service's health and the analyzer's conclusions",
)
async def metrics(state: StateDep) -> Response:
    """Computed per scrape (the analyzer gauges read the store); a store outage gives store_up 0."""
    body = await anyio.to_thread.run_sync(generate_latest, state.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
