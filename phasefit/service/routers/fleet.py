"""``GET /v1/fleet``, ``/v1/workers``, ``/v1/workers/{id}`` and ``/v1/workers/{id}/samples``."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request
from sqlalchemy import Connection

from fleet.contract import FindingStatus
from fleet.inventory import WorkerRecord
from fleet.store.findings import list_findings
from fleet.store.queries import (
    engine_samples,
    get_worker,
    gpu_samples,
    list_gpus,
    list_workers,
    sample_time_range,
    telemetry_span,
)
from fleet.store.rollup_retention import RollupRetention
from phasefit.service.deps import StateDep
from phasefit.service.models import (
    FleetGroup,
    FleetSummary,
    Gpu,
    Worker,
    WorkerDetail,
    WorkerPage,
    WorkerSamples,
)
from phasefit.service.routers.common import (
    NO_NUL,
    READ_RESPONSES,
    From,
    Instant,
    Limit,
    Offset,
    Step,
    To,
    invalid,
    next_link,
    page_limit,
    read_store,
    text_query,
    time_range,
)
from phasefit.service.routers.findings import finding_out
from phasefit.service.series import cut_page, engine_points, gpu_points, parse_step
from phasefit.service.state import ServiceState
from phasefit.service.tiers import read_tiers

router = APIRouter(tags=["fleet"])
WorkerId = Annotated[str, Path(pattern=NO_NUL, description="The worker's id (slashes allowed).")]
Source = Literal["raw", "rollup-1m", "rollup-1h"]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": READ_RESPONSES[503]["model"], "description": "No such worker."}
}


@router.get(
    "/v1/fleet", response_model=FleetSummary, responses=READ_RESPONSES, summary="GPUs by SKU, role and state"
)
async def fleet(
    state: StateDep,
    since: Annotated[
        Instant | None, Query(description="Only GPUs last seen at or after this time (RFC 3339 or POSIX).")
    ] = None,
) -> FleetSummary:
    """Counts of GPUs per (SKU, role of their worker, state); 'unattributed' when no worker is known."""

    def load(connection: Connection) -> FleetSummary:
        gpus = list_gpus(connection)
        workers = {w.worker_id: w for w in list_workers(connection)}
        if since is not None:
            gpus = [g for g in gpus if g.last_seen is not None and g.last_seen >= since]
        groups: Counter[tuple[str, str, str]] = Counter()
        unattributed = 0
        for gpu in gpus:
            worker = workers.get(gpu.worker_id) if gpu.worker_id is not None else None
            if worker is None:
                unattributed += 1
            role = worker.role.value if worker is not None else "unattributed"
            groups[(gpu.sku or "unresolved", role, gpu.state)] += 1
        data_from, data_until = telemetry_span(connection)
        return FleetSummary(
            data_from=data_from,
            data_until=data_until,
            gpus=len(gpus),
            workers=len(workers),
            nodes=len({g.node for g in gpus} | {w.node for w in workers.values()}),
            unattributed_gpus=unattributed,
            groups=[FleetGroup(sku=k[0], role=k[1], state=k[2], gpus=n) for k, n in sorted(groups.items())],
        )

    return await read_store(state, load)


@router.get("/v1/workers", response_model=WorkerPage, responses=READ_RESPONSES, summary="Serving workers")
async def workers(
    *,
    request: Request,
    state: StateDep,
    model: Annotated[str | None, text_query(253, "Served model id.")] = None,
    role: Annotated[str | None, text_query(32, "prefill, decode, mixed or unknown.")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> WorkerPage:
    """Workers ordered by id, as last reported."""
    limit = page_limit(state, limit)
    found = await read_store(
        state, lambda c: list_workers(c, model=model, role=role, limit=limit + 1, offset=offset)
    )
    return WorkerPage(
        items=[_worker(w) for w in found[:limit]],
        limit=limit,
        offset=offset,
        next=next_link(request, offset=offset, limit=limit, more=len(found) > limit),
    )


@router.get(
    "/v1/workers/{worker_id:path}/samples",
    response_model=WorkerSamples,
    response_model_by_alias=True,
    responses={**READ_RESPONSES, **_NOT_FOUND},
    summary="A worker's engine and GPU samples over time",
)
async def worker_samples(
    *,
    request: Request,
    state: StateDep,
    worker_id: WorkerId,
    start: From = None,
    end: To = None,
    step: Step = None,
    limit: Annotated[int, Query(ge=1, le=100_000, description="Most timestamps in this page.")] = 1000,
) -> WorkerSamples:
    """Raw samples (no ``step``) or buckets of ``step`` (from rollups when the range reaches past raw
    retention; from hourly rollups, with a notice, where per-minute ones are past their retention). Ranges
    are half-open: from <= ts < to.

    Rules between parameters, which JSON Schema cannot state: 'from' must be before 'to' ('to' defaults to
    now, 'from' to 1 h before 'to'; 422 naming 'from'); without a step, raw samples span at most
    PHASEFIT_MAX_RAW_RANGE_S (6 h by default; 422 naming 'step'); with one, the (to - from) / step buckets
    requested must not exceed PHASEFIT_MAX_POINTS (10,000 by default; 422 naming 'step')."""
    limit = page_limit(state, limit)
    start, end = time_range(state, start, end, timedelta(hours=1))
    step_s = _step(state, step, start, end)

    def load(connection: Connection) -> tuple[WorkerRecord | None, Source, list[Any], list[Any], list[str]]:
        worker = get_worker(connection, worker_id)
        if worker is None:
            return None, "raw", [], [], []
        if step_s is not None and not _raw_serves(state, connection, start, end):
            resolution: Literal["1m", "1h"] = "1h" if step_s >= 3600 and step_s % 3600 == 0 else "1m"
            read = read_tiers(
                connection, resolution, start, end, worker_id, now=state.clock.now(), retention=_tiers(state)
            )
            if read.resolutions:
                source: Source = "rollup-1m" if "1m" in read.resolutions else "rollup-1h"
                points = engine_points(read.engine, step_s, rollup=True)
                return worker, source, points, gpu_points(read.gpus, step_s, rollup=True), read.notices
            # not rolled up yet (prune has not run): the raw rows are still there
        engine = engine_samples(connection, start, end, worker_ids=[worker_id])
        gpus = gpu_samples(connection, start, end, worker_ids=[worker_id])
        return (
            worker,
            "raw",
            engine_points(engine, step_s, rollup=False),
            gpu_points(gpus, step_s, rollup=False),
            [],
        )

    worker, source, engine, gpus, notices = await read_store(state, load)
    if worker is None:
        raise HTTPException(404, f"no worker {worker_id!r}")
    engine, gpus, cut = cut_page(engine, gpus, limit)
    next_url = None
    if cut is not None:
        next_url = str(request.url.include_query_params(**{"from": cut.isoformat(), "to": end.isoformat()}))
    return WorkerSamples.model_validate({
        "worker_id": worker_id, "from": start, "to": end, "step_s": step_s, "source": source,
        "engine": engine, "gpus": gpus, "next": next_url, "notices": notices,
    })  # fmt: skip


@router.get(
    "/v1/workers/{worker_id:path}",
    response_model=WorkerDetail,
    responses={**READ_RESPONSES, **_NOT_FOUND},
    summary="One worker, its GPUs and its open findings",
)
async def worker(state: StateDep, worker_id: WorkerId) -> WorkerDetail:
    def load(connection: Connection) -> WorkerDetail | None:
        info = get_worker(connection, worker_id)
        if info is None:
            return None
        gpus = [
            Gpu.model_validate(vars(g))
            for g in list_gpus(connection, node=info.node)
            if g.worker_id == worker_id or g.gpu_uuid in info.gpu_uuids
        ]
        findings = list_findings(connection, worker_id=worker_id, status=FindingStatus.OPEN, limit=1000)
        return WorkerDetail(**vars(info), gpus=gpus, open_findings=[finding_out(f) for f in findings])

    detail = await read_store(state, load)
    if detail is None:
        raise HTTPException(404, f"no worker {worker_id!r}")
    return detail


def _worker(info: WorkerRecord) -> Worker:
    return Worker.model_validate(vars(info))


def _step(state: ServiceState, step: str | None, start: datetime, end: datetime) -> float | None:
    span = (end - start).total_seconds()
    if step is None:
        if span > state.settings.max_raw_range_s:
            raise invalid(
                "step",
                f"raw samples span at most {state.settings.max_raw_range_s:g} s per request; this range is "
                f"{span:g} s: narrow it or give a step",
            )
        return None
    try:
        seconds = parse_step(step)
    except ValueError as exc:
        raise invalid("step", str(exc), step) from None
    if span / seconds > state.settings.max_points:
        message = (
            f"{span / seconds:.0f} buckets requested; at most {state.settings.max_points}: widen the step"
        )
        raise invalid("step", message, step)
    return seconds


def _tiers(state: ServiceState) -> RollupRetention:
    settings = state.settings
    return RollupRetention(settings.rollup_minute_retention_days, settings.rollup_hour_retention_days)


def _raw_serves(state: ServiceState, connection: Connection, start: datetime, end: datetime) -> bool:
    """Raw samples answer bucketed reads over a day or less whose start they still cover; longer ranges,
    or ranges reaching past what raw retention kept, read the rollups."""
    if (end - start).total_seconds() > 4 * state.settings.max_raw_range_s:
        return False
    if start >= state.clock.now() - timedelta(days=state.settings.raw_retention_days):
        return True
    span = sample_time_range(connection)
    return span is not None and span[0] <= start
