"""The GPU view of a store range where GPUs reported and no serving engine did (dcgm-exporter alone).

One builder for the three readers, so they show the same view: ``phasefit analyze`` in store mode, the
service's ``GET /v1/gpu-view`` and the dashboard's store source. Engines known only by their pod are joined
to the GPUs whose series name that pod first (:func:`analyzer.sources.store.join_by_pod`): a fleet whose
engines join has placement to judge, and no GPU view. The join's notes and the missing-profiling advice
are the view's warnings; the bottleneck thresholds are the analysis' own (``PHASEFIT_ANALYZER_THRESHOLDS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from analyzer.pipeline import AnalysisInput
from analyzer.results.summary import iso
from analyzer.sources.store import join_by_pod, profiling_warnings, read_input, rename_gpu_owners
from analyzer.telemetry.bottleneck import BottleneckThresholds
from analyzer.telemetry.gpu_view import GpuView, build_gpu_view


@dataclass(frozen=True)
class StoreGpuView:
    """The view, or None with why: an engine reported (after the pod join) or no GPU sample was read."""

    view: GpuView | None
    engine_reported: bool
    gpu_samples: int


def gpu_view_from(data: AnalysisInput, thresholds: BottleneckThresholds | None = None) -> StoreGpuView:
    """The GPU view of what was read (see the module docstring)."""
    joined, notes = join_by_pod(data.inventory)
    data = rename_gpu_owners(data, joined)
    engines = bool(data.inventory.workers)
    if engines or not data.gpu_bucket_count:
        return StoreGpuView(None, engines, data.gpu_bucket_count)
    view = build_gpu_view(
        data.gpu_buckets,
        data.inventory.gpus,
        start=iso(data.start),
        end=iso(data.end),
        thresholds=thresholds,
        warnings=[*notes, *profiling_warnings(data)],
    )
    return StoreGpuView(view, False, data.gpu_bucket_count)


def read_gpu_view(
    connection: Connection, since: datetime, until: datetime, thresholds: BottleneckThresholds | None = None
) -> StoreGpuView:
    """:func:`gpu_view_from` of the store's [since, until)."""
    return gpu_view_from(read_input(connection, since, until), thresholds)
