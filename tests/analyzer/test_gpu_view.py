"""The GPU view (analyzer/telemetry/gpu_view.py): per GPU and per SKU activity, bottleneck class where
the profiling fields exist, idle GPU-hours, degraded telemetry;
unknown activity is null with a reason, never 0."""

from __future__ import annotations

import json
from typing import Any

from analyzer.telemetry.gpu_view import PROFILING_FIELDS, PROFILING_HELP, build_gpu_view
from analyzer.telemetry.grid import aggregate_gpu_samples
from fleet.inventory import GpuRecord

HOUR = 3600.0
BUSY = "GPU-00000000-0000-0000-0000-000000000001"
IDLE = "GPU-00000000-0000-0000-0000-000000000002"
BLIND = "GPU-00000000-0000-0000-0000-000000000003"
MEMORY = "GPU-00000000-0000-0000-0000-000000000004"
SILENT = "GPU-00000000-0000-0000-0000-000000000005"


def _record(uuid: str, sku: str, name: str, worker: str | None = None) -> GpuRecord:
    return GpuRecord(uuid, "node-a", name, sku, worker, "dcgm", "ok")


def _samples(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    names = ("ts", "window_s", "gpu_uuid", "worker_id", "sm_active", "tensor_active", "dram_active",
             "gpu_util", "gr_engine_active", "mem_copy_util", "mem_used_bytes", "state")  # fmt: skip
    return {n: [r.get(n) for r in rows] for n in names}


def _fleet() -> tuple[dict[str, Any], list[GpuRecord]]:
    rows = []
    for hour in range(4):
        ts = 1_717_372_800.0 + (hour + 1) * HOUR
        base = {"ts": ts, "window_s": HOUR, "state": "ok"}
        rows.append({**base, "gpu_uuid": BUSY, "worker_id": "llm/[red]pod", "sm_active": 0.9,
                     "tensor_active": 0.7, "dram_active": 0.3, "gpu_util": 1.0})  # fmt: skip
        rows.append({**base, "gpu_uuid": IDLE, "sm_active": 0.0, "tensor_active": 0.0, "dram_active": 0.0,
                     "gpu_util": 0.0, "mem_used_bytes": 0})  # fmt: skip
        rows.append({**base, "gpu_uuid": BLIND, "gpu_util": 0.6, "state": "degraded"})
        rows.append({**base, "gpu_uuid": MEMORY, "sm_active": 0.5, "tensor_active": 0.1, "dram_active": 0.7,
                     "gpu_util": 1.0})  # fmt: skip
    records = [
        _record(BUSY, "H100-SXM", "NVIDIA H100 80GB HBM3", "llm/[red]pod"),
        _record(IDLE, "H100-SXM", "NVIDIA H100 80GB HBM3"),
        _record(BLIND, "H200-SXM", "NVIDIA H200"),
        _record(MEMORY, "H200-SXM", "NVIDIA H200"),
        _record(SILENT, "H200-SXM", "NVIDIA H200"),
    ]
    return aggregate_gpu_samples(_samples(rows)), records


def test_per_gpu_activity_bottleneck_and_idle_hours() -> None:
    buckets, records = _fleet()
    view = build_gpu_view(buckets, records, start="a", end="b")
    gpus = {g.gpu_uuid: g for g in view.gpus}
    busy, idle, memory = gpus[BUSY], gpus[IDLE], gpus[MEMORY]
    assert (busy.sm_active, busy.tensor_active, busy.dram_active) == (0.9, 0.7, 0.3)
    assert busy.bottleneck == "compute" and busy.idle is False and busy.idle_gpu_hours == 0.0
    assert memory.bottleneck == "memory-bandwidth"
    assert idle.bottleneck == "underutilised" and idle.idle is True and idle.idle_gpu_hours == 4.0
    assert busy.worker_id == "llm/[red]pod" and busy.sku == "H100-SXM" and busy.hours == 4.0
    assert view.totals.idle_gpus == 1 and view.totals.idle_gpu_hours == 4.0
    assert view.totals.gpu_hours == 16.0 and view.totals.silent_gpus == 1


def test_a_gpu_without_profiling_has_unknown_activity_never_zero() -> None:
    buckets, records = _fleet()
    view = build_gpu_view(buckets, records, start="a", end="b")
    blind = next(g for g in view.gpus if g.gpu_uuid == BLIND)
    assert (blind.sm_active, blind.tensor_active, blind.dram_active) == (None, None, None)
    assert blind.bottleneck == "unknown"
    assert blind.activity_unknown_reason is not None
    assert all(field in blind.activity_unknown_reason for field in PROFILING_FIELDS)
    assert blind.gpu_util == 0.6 and blind.idle is False  # GPU_UTIL still tells it ran kernels
    assert blind.degraded_share == 1.0
    assert view.profiling_help == PROFILING_HELP
    assert any("DCGM_EXPORTER_COLLECTORS" in w and "-f" in w for w in view.warnings)


def test_per_sku_rows() -> None:
    buckets, records = _fleet()
    skus = {s.sku: s for s in build_gpu_view(buckets, records, start="a", end="b").skus}
    h100, h200 = skus["H100-SXM"], skus["H200-SXM"]
    assert (h100.gpus, h100.idle_gpus, h100.idle_gpu_hours, h100.gpus_without_profiling) == (2, 1, 4.0, 0)
    assert h100.sm_active == 0.45 and h100.bottlenecks == {"compute": 1, "underutilised": 1}
    assert (h200.gpus, h200.gpus_without_profiling, h200.degraded_gpus) == (2, 1, 1)
    assert h200.sm_active == 0.5  # the mean over the GPUs that reported it, not over a 0 for the blind one
    assert h200.bottlenecks == {"memory-bandwidth": 1, "unknown": 1}


def test_a_gpu_with_no_activity_field_at_all_has_unknown_idle_hours() -> None:
    rows = [{"ts": 1_717_376_400.0, "window_s": HOUR, "gpu_uuid": BLIND, "state": "degraded"}]
    view = build_gpu_view(aggregate_gpu_samples(_samples(rows)), [], start="a", end="b")
    (gpu,) = view.gpus
    assert gpu.idle is None and gpu.idle_gpu_hours is None and gpu.gpu_util is None
    assert view.totals.idle_gpu_hours is None and view.totals.idle_unknown_gpus == 1
    assert "no activity field at all" in (gpu.activity_unknown_reason or "")


def test_json_has_from_first_and_no_nan() -> None:
    buckets, records = _fleet()
    payload = build_gpu_view(buckets, records, start="2024-06-03T00:00:00Z", end="b").to_json_dict()
    assert next(iter(payload)) == "from"
    text = json.dumps(payload, allow_nan=False)  # raises on NaN
    assert "vllm:generation_tokens_total" in text and "sglang:num_queue_reqs" in text
    assert payload["engine_metrics_needed"][0]["labels"] == ["model_name", "pod", "namespace"]
