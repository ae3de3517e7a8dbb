"""A zero-agent read in the shapes the store path hands the analyzer: the fleet inventory
(:class:`analyzer.pools.pool.Inventory`) and raw sample columns (as :mod:`fleet.store.queries` returns them).

What Prometheus cannot say (precision, model, TP degree, KV budget, concurrency cap) is left unknown.
Reasoning: docs/analyzer.md#inventory
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from analyzer.pipeline import AnalysisInput, input_from_samples
from analyzer.pools.pool import Inventory
from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.telemetry.frames import ROLES, STATES
from analyzer.telemetry.grid import BUCKET_S
from fleet.contract import TelemetrySource
from fleet.inventory import GpuRecord, WorkerRecord

UNKNOWN = "unknown"


def inventory(fleet: PrometheusFleet) -> Inventory:
    """Workers and GPUs as last seen in the range (a GPU reassigned between pods: its latest pod)."""
    workers = tuple(
        WorkerRecord(
            worker_id=w.worker_id,
            node=w.node,
            engine=w.engine,
            model=w.model or UNKNOWN,
            role=w.role,
            role_source=w.role_source.value,
            precision=None,
            tp=w.tp,
            gpu_uuids=w.gpu_uuids,
            cluster=w.cluster,
            deployment=w.deployment,
            kv_capacity_tokens=w.kv_capacity_tokens,
            max_running_requests=w.max_running_requests,
        )
        for w in fleet.workers
    )
    latest: dict[str, GpuRecord] = {}
    for gpu in sorted((g for g in fleet.gpus if g.windows), key=lambda g: g.last_seen or 0.0):
        latest[gpu.gpu_uuid] = GpuRecord(
            gpu_uuid=gpu.gpu_uuid,
            node=gpu.node,
            gpu_name=gpu.gpu_name,
            sku=gpu.sku,
            worker_id=gpu.worker_id,
            source=TelemetrySource.PROMETHEUS.value,
            state=gpu.state.value,
            cluster=gpu.cluster,
            parent_gpu_uuid=gpu.parent_gpu_uuid,
            mig_profile=gpu.mig_profile,
        )
    return Inventory(workers, tuple(latest[u] for u in sorted(latest)))


def sample_columns(fleet: PrometheusFleet) -> tuple[dict[str, Any], dict[str, Any]]:
    """(GPU sample columns, engine sample columns), one row per frame row; ``ts`` in epoch seconds.

    GPU rows cover the GPUs attributed to a worker (the frame's rows); missing values are NaN.
    """
    gpus = fleet.gpus
    g = fleet.gpu
    rows = fleet.gpu_row_gpu.tolist()
    gpu_columns: dict[str, Any] = {
        "ts": g.ts,
        "window_s": np.full(len(g), fleet.window_s),
        "gpu_uuid": [gpus[r].gpu_uuid for r in rows],
        "worker_id": [gpus[r].worker_id for r in rows],
        "node": [gpus[r].node for r in rows],
        "gpu_index": [gpus[r].gpu_index for r in rows],
        "gpu_name": [gpus[r].gpu_name for r in rows],
        "sm_active": g.sm_active,
        "tensor_active": g.tensor_active,
        "dram_active": g.dram_active,
        "gpu_util": g.gpu_util,
        **fleet.gpu_row_busy,
        "mem_used_bytes": fleet.gpu_row_mem_used_bytes,
        "state": [STATES[s].value for s in g.state.tolist()],
        "source": [TelemetrySource.PROMETHEUS.value] * len(g),
        "parent_gpu_uuid": [gpus[r].parent_gpu_uuid for r in rows],
        "mig_profile": [gpus[r].mig_profile for r in rows],
        "cluster": [gpus[r].cluster for r in rows],
    }
    e = fleet.engine
    by_id = {w.worker_id: w for w in fleet.workers}
    specs = [by_id[e.workers[i]] for i in e.worker.tolist()]
    engine_columns: dict[str, Any] = {
        "ts": e.ts,
        "window_s": np.full(len(e), fleet.window_s),
        "worker_id": [w.worker_id for w in specs],
        "node": [w.node for w in specs],
        "engine": [w.engine for w in specs],
        "model": [w.model or UNKNOWN for w in specs],
        "role": [ROLES[r].value for r in e.role.tolist()],
        "role_source": [w.role_source.value for w in specs],
        "precision": [None] * len(e),
        "tp": [w.tp for w in specs],
        "gpu_uuids": [list(w.gpu_uuids) for w in specs],
        "prompt_tokens": e.prompt_tokens,
        "generation_tokens": e.generation_tokens,
        "requests_running": e.requests_running,
        "requests_waiting": e.requests_waiting,
        "kv_cache_usage": e.kv_cache_usage,
        "preemptions": e.preemptions,
        **fleet.engine_row_latency,
        **fleet.engine_row_histograms,  # per row: stored form or counts on the shared grid, None: not read
        "cluster": [w.cluster for w in specs],
        "deployment": [w.deployment for w in specs],
        "kv_capacity_tokens": [w.kv_capacity_tokens for w in specs],
        "max_running_requests": [w.max_running_requests for w in specs],
    }
    return gpu_columns, engine_columns


def analysis_input(fleet: PrometheusFleet, *, bucket_s: float = BUCKET_S) -> AnalysisInput:
    """The pipeline's input for a zero-agent read: its sample columns bucketed as the store's rollups are,
    with the read's own inventory (SKUs resolved, unattributed GPUs kept). Covers [start, end] of the read."""
    gpu_columns, engine_columns = sample_columns(fleet)
    data = input_from_samples(
        gpu_columns,
        engine_columns,
        start=fleet.grid.start - fleet.window_s,
        end=fleet.grid.end + 1e-3,
        bucket_s=bucket_s,
    )
    return dataclasses.replace(data, inventory=inventory(fleet))


def gpu_view_buckets(fleet: PrometheusFleet, *, bucket_s: float = BUCKET_S) -> dict[str, Any]:
    """Every reporting GPU's samples (attributed to a pod or not) bucketed as the store's rollups are, for
    the GPU view (analyzer/telemetry/gpu_view.py)."""
    from analyzer.telemetry.grid import aggregate_gpu_samples

    columns = fleet.all_gpu_columns
    if columns is None:
        columns = sample_columns(fleet)[0]
    return aggregate_gpu_samples(columns, bucket_s)
