"""``GET /v1/gpu-view``: the GPU view of a fleet with GPU telemetry and no serving engine (dcgm-exporter
alone), as ``phasefit analyze`` prints it (analyzer/telemetry/gpu_view.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, HTTPException
from sqlalchemy import Connection

from phasefit.service.deps import StateDep
from phasefit.service.models import GpuView
from phasefit.service.routers.common import READ_RESPONSES, From, To, read_store, time_range

router = APIRouter(tags=["fleet"])
NOTHING_TO_SHOW: dict[int | str, dict[str, Any]] = {
    404: {
        "model": READ_RESPONSES[503]["model"],
        "description": "No GPU view for the range: a serving engine reported in it (placement can be judged: "
        "read /v1/findings and /v1/lost-tokens), or no GPU sample lies in it; 'detail' says which.",
    }
}
ENGINE_REPORTED = "a serving engine reported in the range: placement can be judged (see /v1/findings)"
NO_GPU_SAMPLE = "no GPU sample in the range"


def gpu_view_of(connection: Connection, since: datetime, until: datetime) -> GpuView | str:
    """The store's GPU view over [since, until), or why there is none: the builder ``phasefit analyze`` and
    the dashboard use too (:mod:`analyzer.sources.store_gpu_view`), at the analysis' own thresholds."""
    from analyzer.settings import AnalyzerSettings
    from analyzer.sources.store_gpu_view import read_gpu_view

    found = read_gpu_view(connection, since, until, AnalyzerSettings().params().bottleneck)
    if found.view is None:
        return ENGINE_REPORTED if found.engine_reported else NO_GPU_SAMPLE
    return GpuView.model_validate(found.view.to_json_dict())


@router.get(
    "/v1/gpu-view",
    response_model=GpuView,
    response_model_by_alias=True,
    responses={**READ_RESPONSES, **NOTHING_TO_SHOW},
    summary="The GPU view of a fleet without a serving engine (dcgm-exporter alone)",
)
async def gpu_view(state: StateDep, start: From = None, end: To = None) -> GpuView:
    """Per GPU and per SKU: SM, tensor and DRAM activity, the bottleneck class where the DCGM profiling
    fields exist, idle GPUs and idle GPU-hours, degraded telemetry, and the engine metrics and labels that
    would let phasefit judge placement. Unknown values are null, never 0. The range is read in hourly
    buckets, its start aligned down to the hour.

    A rule between parameters, which JSON Schema cannot state: 'from' must be before 'to' ('to' defaults to
    now, 'from' to 24 h before 'to'; 422 naming 'from')."""
    begin, finish = time_range(state, start, end, timedelta(hours=24))
    found = await read_store(state, lambda c: gpu_view_of(c, begin, finish))
    if isinstance(found, str):
        raise HTTPException(404, f"no GPU view from {begin.isoformat()} to {finish.isoformat()}: {found}")
    return found
