"""Bucketed telemetry: the shape of the store's rollups, and the workers x buckets grid the analyzer reads.

``GpuBuckets`` / ``EngineBuckets`` hold the ``*_1h`` rollup columns, one row per (GPU or worker, bucket);
``WorkerGrid`` lays them out as dense (workers x buckets) arrays. Missing values are NaN, never 0.
Reasoning: docs/analyzer.md#grid
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.frames import ROLES, SOURCES, STATES, EngineFrame, FloatArray, GpuFrame, IntArray
from analyzer.telemetry.latency_cells import HISTOGRAM_COLUMNS, HistogramCells, summed_by_group
from fleet.contract import GpuState, Role, TelemetrySource

BUCKET_S = 3600.0
Columns = Mapping[str, Sequence[Any] | npt.NDArray[Any]]

GPU_BUCKET_COLUMNS = (
    "ts",
    "gpu_uuid",
    "worker_id",
    "samples",
    "window_s_sum",
    "sm_active_avg",
    "tensor_active_avg",
    "dram_active_avg",
    "gpu_util_avg",
    "gr_engine_active_avg",
    "mem_copy_util_avg",
    "mem_used_bytes_max",
    "lost_samples",
    "degraded_samples",
)
ENGINE_BUCKET_COLUMNS = (
    "ts",
    "worker_id",
    "role",
    "samples",
    "window_s_sum",
    "prompt_tokens_sum",
    "generation_tokens_sum",
    "preemptions_sum",
    "requests_running_avg",
    "requests_waiting_avg",
    "requests_waiting_max",
    "kv_cache_usage_avg",
    "kv_cache_usage_max",
    "ttft_p50_s_avg",
    "tpot_p50_s_avg",
    "ttft_p90_s_avg",
    "tpot_p90_s_avg",
    "e2e_p90_s_avg",
    "queued_share",
)
_GPU_MEANS = ("sm_active", "tensor_active", "dram_active", "gpu_util", "gr_engine_active", "mem_copy_util")
_ENGINE_MEANS = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "ttft_p50_s",
    "tpot_p50_s",
    "ttft_p90_s",
    "tpot_p90_s",
    "e2e_p90_s",
)
_ENGINE_MAXIMA = ("requests_waiting", "kv_cache_usage")


def _floats(values: Sequence[Any] | npt.NDArray[Any]) -> FloatArray:
    """Floats with None as NaN (numpy converts None to NaN for a float dtype)."""
    return np.asarray(values, dtype=np.float64)


def _column(columns: Columns, name: str, n: int) -> FloatArray:
    """A float column, all NaN (unknown) where the columns lack it (a reader that predates the field)."""
    values = columns.get(name)
    return np.full(n, np.nan) if values is None else _floats(values)


def _strings(values: Sequence[Any] | npt.NDArray[Any]) -> npt.NDArray[np.object_]:
    return np.asarray(list(values), dtype=object)


def _cells(keys: npt.NDArray[np.object_], ts: FloatArray, bucket_s: float) -> tuple[IntArray, IntArray, int]:
    """Group index per row over (key, bucket), the first row of each group, and the group count."""
    bucket = np.floor(ts / bucket_s + 1e-9).astype(np.int64)
    key_codes, key_index = np.unique(keys.astype(str), return_inverse=True)
    combined = key_index.astype(np.int64) * (int(bucket.max() - bucket.min()) + 1) + (bucket - bucket.min())
    _, first, group = np.unique(combined, return_index=True, return_inverse=True)
    del key_codes
    return group.astype(np.int64), first.astype(np.int64), int(first.size)


def _mean(group: IntArray, values: FloatArray, n: int) -> FloatArray:
    valid = ~np.isnan(values)
    sums = np.bincount(group[valid], weights=values[valid], minlength=n)
    counts = np.bincount(group[valid], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _max(group: IntArray, values: FloatArray, n: int) -> FloatArray:
    out = np.full(n, -np.inf)
    valid = ~np.isnan(values)
    np.maximum.at(out, group[valid], values[valid])
    return np.where(np.isinf(out), np.nan, out)


def _sum(group: IntArray, values: FloatArray, n: int) -> FloatArray:
    valid = ~np.isnan(values)
    sums = np.bincount(group[valid], weights=values[valid], minlength=n)
    counts = np.bincount(group[valid], minlength=n)
    return np.where(counts > 0, sums, np.nan)


def aggregate_gpu_samples(columns: Columns, bucket_s: float = BUCKET_S) -> dict[str, Any]:
    """Raw GPU sample columns (``ts`` in epoch seconds) -> the columns of a GPU rollup at ``bucket_s``."""
    ts = _floats(columns["ts"])
    if ts.size == 0:
        return {name: [] for name in GPU_BUCKET_COLUMNS}
    uuid = _strings(columns["gpu_uuid"])
    group, first, n = _cells(uuid, ts, bucket_s)
    states = _strings(columns["state"]) if "state" in columns else np.full(ts.size, "ok", dtype=object)
    workers = _strings(columns["worker_id"])
    # The rollup keeps the greatest worker id seen in the bucket (SQL max ignores NULL).
    order = np.lexsort((np.array([w or "" for w in workers], dtype=object).astype(str), group))
    last_of_group = np.zeros(n, dtype=np.int64)
    last_of_group[group[order]] = order
    out: dict[str, Any] = {
        "ts": np.floor(ts[first] / bucket_s + 1e-9) * bucket_s,
        "gpu_uuid": list(uuid[first]),
        "worker_id": [workers[i] for i in last_of_group],
        "samples": np.bincount(group, minlength=n).astype(np.float64),
        "window_s_sum": np.bincount(group, weights=_floats(columns["window_s"]), minlength=n),
        "mem_used_bytes_max": _max(group, _floats(columns.get("mem_used_bytes", [None] * ts.size)), n),
        "lost_samples": np.bincount(
            group, weights=(states == GpuState.LOST.value).astype(float), minlength=n
        ),
        "degraded_samples": np.bincount(
            group, weights=(states == GpuState.DEGRADED.value).astype(float), minlength=n
        ),
    }
    for name in _GPU_MEANS:
        out[f"{name}_avg"] = _mean(group, _floats(columns.get(name, [None] * ts.size)), n)
    return out


def aggregate_engine_samples(columns: Columns, bucket_s: float = BUCKET_S) -> dict[str, Any]:
    """Raw engine sample columns -> the columns of an engine rollup at ``bucket_s``."""
    ts = _floats(columns["ts"])
    if ts.size == 0:
        return {name: [] for name in ENGINE_BUCKET_COLUMNS}
    worker = _strings(columns["worker_id"])
    group, first, n = _cells(worker, ts, bucket_s)
    roles = _strings(columns["role"]).astype(str)
    order = np.lexsort((roles, group))
    greatest = np.empty(n, dtype=object)
    greatest[group[order]] = roles[order]
    out: dict[str, Any] = {
        "ts": np.floor(ts[first] / bucket_s + 1e-9) * bucket_s,
        "worker_id": list(worker[first]),
        "role": list(greatest),
        "samples": np.bincount(group, minlength=n).astype(np.float64),
        "window_s_sum": np.bincount(group, weights=_floats(columns["window_s"]), minlength=n),
        "prompt_tokens_sum": _sum(group, _floats(columns["prompt_tokens"]), n),
        "generation_tokens_sum": _sum(group, _floats(columns["generation_tokens"]), n),
        "preemptions_sum": _sum(group, _floats(columns.get("preemptions", [None] * ts.size)), n),
    }
    for name in _ENGINE_MEANS:
        out[f"{name}_avg"] = _mean(group, _floats(columns.get(name, [None] * ts.size)), n)
    for name in _ENGINE_MAXIMA:
        out[f"{name}_max"] = _max(group, _floats(columns.get(name, [None] * ts.size)), n)
    waiting = _floats(columns.get("requests_waiting", [None] * ts.size))
    with np.errstate(invalid="ignore"):
        out["queued_share"] = _mean(group, np.where(np.isnan(waiting), np.nan, waiting > 0), n)
    for name in HISTOGRAM_COLUMNS:  # summed per bucket, as the store's rollups sum them
        if name in columns:
            out[name] = summed_by_group(columns[name], group, n)
    return out


@dataclass(frozen=True)
class WorkerGrid:
    """Dense per-(worker, bucket) telemetry; rows follow ``workers``, columns ``bucket_start``."""

    workers: tuple[str, ...]
    bucket_start: FloatArray
    bucket_s: float
    engine_s: FloatArray  # seconds of engine windows received (0 where none)
    prompt_tokens: FloatArray  # sums (0 where none)
    generation_tokens: FloatArray
    preemptions: FloatArray
    running: FloatArray  # means (NaN where none)
    waiting: FloatArray
    waiting_max: FloatArray
    # Share of the bucket's windows (of those reporting a queue) with a request waiting: a queue held all
    # hour reads near 1, bursts the pool clears between them well under it (analyzer.pools.pool_state).
    queued_share: FloatArray
    kv_usage: FloatArray
    kv_usage_max: FloatArray
    ttft_s: FloatArray
    tpot_s: FloatArray
    role: npt.NDArray[np.int8]  # ROLES index, -1 where no engine sample
    gpu_s: FloatArray  # seconds of GPU windows received, averaged over the worker's GPUs
    sm_active: FloatArray
    tensor_active: FloatArray
    dram_active: FloatArray
    gpu_util: FloatArray
    gr_engine_active: FloatArray  # busy-time counters (weaker evidence; a MIG instance's own activity)
    mem_copy_util: FloatArray
    mem_used_bytes: FloatArray  # max over the worker's GPUs
    lost_share: FloatArray  # share of GPU samples reported lost
    degraded_share: FloatArray
    # The windows' 90th-percentile latencies (their mean over the bucket; NaN where no engine reports one):
    # what latency targets are measured against (analyzer.pools.attainment).
    ttft_p90_s: FloatArray
    tpot_p90_s: FloatArray
    e2e_p90_s: FloatArray
    # The latency histograms per cell ("ttft_histogram", ...), where the sources carried them: a pool's p90
    # from its merged buckets. A column no source carried is absent (unknown).
    latency_histograms: Mapping[str, HistogramCells] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.workers), int(self.bucket_start.size))

    def row(self, worker_id: str) -> int:
        return self.workers.index(worker_id)

    def rate(self, tokens: FloatArray, where: Any = (slice(None), slice(None))) -> FloatArray:
        """Tokens per second of received windows (NaN where nothing was received); ``tokens`` is the
        ``where`` part of a token grid."""
        seconds = self.engine_s[where]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(seconds > 0, tokens / np.maximum(seconds, 1e-9), np.nan)

    def bucket_of(self, epoch_s: float) -> int:
        return int(np.clip(np.floor((epoch_s - self.bucket_start[0]) / self.bucket_s), 0, self.shape[1] - 1))


def _positions(
    ids: Sequence[Any], ts: FloatArray, rows: Mapping[str, int], start: float, bucket_s: float, n_buckets: int
) -> tuple[IntArray, IntArray]:
    row = np.fromiter((rows.get(i, -1) if i is not None else -1 for i in ids), dtype=np.int64, count=len(ids))
    column = np.floor((ts - start) / bucket_s + 1e-9).astype(np.int64)
    keep = (row >= 0) & (column >= 0) & (column < n_buckets)
    return np.flatnonzero(keep), row[keep] * n_buckets + column[keep]


def build_grid(
    workers: Sequence[str],
    gpu_worker: Mapping[str, str],
    gpu_buckets: Columns,
    engine_buckets: Columns,
    *,
    start: float,
    end: float,
    bucket_s: float = BUCKET_S,
) -> WorkerGrid:
    """Lay bucket rows out as a (workers x buckets) grid over [start, end).

    ``gpu_worker`` attributes GPUs whose bucket row names no worker (e.g. from engine samples'
    ``gpu_uuids``); GPU rows attributed to no listed worker are left out.
    """
    start = float(np.floor(start / bucket_s + 1e-9) * bucket_s)
    n_buckets = max(1, int(np.ceil((end - start) / bucket_s - 1e-9)))
    rows = {w: i for i, w in enumerate(workers)}
    shape = (len(workers), n_buckets)
    size = shape[0] * shape[1]

    def grid(values: npt.NDArray[Any]) -> FloatArray:
        return values.astype(np.float64).reshape(shape)

    e_ts = _floats(engine_buckets["ts"])
    e_keep, e_cell = _positions(list(engine_buckets["worker_id"]), e_ts, rows, start, bucket_s, n_buckets)

    def e_col(name: str) -> FloatArray:
        return _column(engine_buckets, name, e_ts.size)[e_keep]

    def e_sum(name: str) -> FloatArray:
        return grid(np.bincount(e_cell, weights=np.nan_to_num(e_col(name)), minlength=size))

    e_samples = e_col("samples")

    def e_mean(name: str) -> FloatArray:
        values = e_col(name)
        valid = ~np.isnan(values)
        weights = np.bincount(e_cell[valid], weights=e_samples[valid], minlength=size)
        sums = np.bincount(e_cell[valid], weights=values[valid] * e_samples[valid], minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            return grid(np.where(weights > 0, sums / np.maximum(weights, 1e-12), np.nan))

    def e_max(name: str) -> FloatArray:
        out = np.full(size, -np.inf)
        values = e_col(name)
        valid = ~np.isnan(values)
        np.maximum.at(out, e_cell[valid], values[valid])
        return grid(np.where(np.isinf(out), np.nan, out))

    role_names = [str(r) for r in ROLES]
    role_codes = (
        np.array(
            [
                role_names.index(r) if r in role_names else ROLES.index(Role.UNKNOWN)
                for r in engine_buckets["role"]
            ],
            dtype=np.int8,
        )[e_keep]
        if len(e_keep)
        else np.zeros(0, np.int8)
    )
    role = np.full(size, -1, np.int8)
    role[e_cell] = role_codes

    g_ids = [
        w if w is not None else gpu_worker.get(u)
        for w, u in zip(gpu_buckets["worker_id"], gpu_buckets["gpu_uuid"], strict=True)
    ]
    g_ts = _floats(gpu_buckets["ts"])
    g_keep, g_cell = _positions(g_ids, g_ts, rows, start, bucket_s, n_buckets)
    g_samples = _floats(gpu_buckets["samples"])[g_keep]
    gpu_rows = np.bincount(g_cell, minlength=size).astype(np.float64)

    def g_mean(name: str) -> FloatArray:
        values = _column(gpu_buckets, name, len(g_ts))[g_keep]
        valid = ~np.isnan(values)
        weights = np.bincount(g_cell[valid], weights=g_samples[valid], minlength=size)
        sums = np.bincount(g_cell[valid], weights=values[valid] * g_samples[valid], minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            return grid(np.where(weights > 0, sums / np.maximum(weights, 1e-12), np.nan))

    mem = np.full(size, -np.inf)
    mem_values = _floats(gpu_buckets["mem_used_bytes_max"])[g_keep]
    valid_mem = ~np.isnan(mem_values)
    np.maximum.at(mem, g_cell[valid_mem], mem_values[valid_mem])
    all_samples = np.bincount(g_cell, weights=g_samples, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        lost = np.bincount(g_cell, weights=_floats(gpu_buckets["lost_samples"])[g_keep], minlength=size)
        degraded = np.bincount(
            g_cell, weights=_floats(gpu_buckets["degraded_samples"])[g_keep], minlength=size
        )
        lost_share = np.where(all_samples > 0, lost / np.maximum(all_samples, 1e-12), np.nan)
        degraded_share = np.where(all_samples > 0, degraded / np.maximum(all_samples, 1e-12), np.nan)
        gpu_s = np.bincount(g_cell, weights=_floats(gpu_buckets["window_s_sum"])[g_keep], minlength=size)
        gpu_s = np.where(gpu_rows > 0, gpu_s / np.maximum(gpu_rows, 1.0), 0.0)

    return WorkerGrid(
        workers=tuple(workers),
        bucket_start=start + bucket_s * np.arange(n_buckets, dtype=np.float64),
        bucket_s=bucket_s,
        engine_s=e_sum("window_s_sum"),
        prompt_tokens=e_sum("prompt_tokens_sum"),
        generation_tokens=e_sum("generation_tokens_sum"),
        preemptions=e_sum("preemptions_sum"),
        running=e_mean("requests_running_avg"),
        waiting=e_mean("requests_waiting_avg"),
        waiting_max=e_max("requests_waiting_max"),
        queued_share=e_mean("queued_share"),
        kv_usage=e_mean("kv_cache_usage_avg"),
        kv_usage_max=e_max("kv_cache_usage_max"),
        ttft_s=e_mean("ttft_p50_s_avg"),
        tpot_s=e_mean("tpot_p50_s_avg"),
        ttft_p90_s=e_mean("ttft_p90_s_avg"),
        tpot_p90_s=e_mean("tpot_p90_s_avg"),
        e2e_p90_s=e_mean("e2e_p90_s_avg"),
        role=role.reshape(shape),
        gpu_s=grid(gpu_s),
        sm_active=g_mean("sm_active_avg"),
        tensor_active=g_mean("tensor_active_avg"),
        dram_active=g_mean("dram_active_avg"),
        gpu_util=g_mean("gpu_util_avg"),
        gr_engine_active=g_mean("gr_engine_active_avg"),
        mem_copy_util=g_mean("mem_copy_util_avg"),
        mem_used_bytes=grid(np.where(np.isinf(mem), np.nan, mem)),
        lost_share=grid(lost_share),
        degraded_share=grid(degraded_share),
        latency_histograms={
            name: HistogramCells.laid_out([engine_buckets[name][i] for i in e_keep], e_cell, n_buckets)
            for name in HISTOGRAM_COLUMNS
            if name in engine_buckets
        },
    )


def bottleneck_frames(
    grid: WorkerGrid,
    gpu_buckets: Columns,
    gpu_worker: Mapping[str, str],
    gpu_source: Mapping[str, TelemetrySource],
) -> tuple[GpuFrame, EngineFrame]:
    """Frames for :func:`analyzer.telemetry.bottleneck.classify` with one pseudo-sample per (GPU or worker,
    bucket),
    stamped at the bucket's end, so the classifier runs at bucket resolution."""
    rows = {w: i for i, w in enumerate(grid.workers)}
    ids: list[str | None] = [
        w if w is not None else gpu_worker.get(u)
        for w, u in zip(gpu_buckets["worker_id"], gpu_buckets["gpu_uuid"], strict=True)
    ]
    ts = _floats(gpu_buckets["ts"])
    keep = np.array([i is not None and i in rows for i in ids], dtype=bool) if ids else np.zeros(0, bool)
    uuids = [u for u, k in zip(gpu_buckets["gpu_uuid"], keep, strict=True) if k]
    samples = _floats(gpu_buckets["samples"])[keep]
    lost = _floats(gpu_buckets["lost_samples"])[keep]
    state = np.where(lost >= 0.5 * samples, STATES.index(GpuState.LOST), STATES.index(GpuState.OK))
    source_names = [str(s) for s in SOURCES]
    gpu = GpuFrame(
        workers=grid.workers,
        ts=ts[keep] + grid.bucket_s - 1e-3,
        worker=np.array(
            [rows[i] for i, k in zip(ids, keep, strict=True) if k and i is not None], dtype=np.int64
        ),
        sm_active=_floats(gpu_buckets["sm_active_avg"])[keep],
        tensor_active=_floats(gpu_buckets["tensor_active_avg"])[keep],
        dram_active=_floats(gpu_buckets["dram_active_avg"])[keep],
        gpu_util=_floats(gpu_buckets["gpu_util_avg"])[keep],
        gr_engine_active=_column(gpu_buckets, "gr_engine_active_avg", len(ts))[keep],
        mem_copy_util=_column(gpu_buckets, "mem_copy_util_avg", len(ts))[keep],
        source=np.array(
            [source_names.index(str(gpu_source.get(u, TelemetrySource.NVML_BASIC))) for u in uuids],
            dtype=np.int64,
        ),
        state=state.astype(np.int64),
    )
    n_workers, n_buckets = grid.shape
    present = grid.engine_s.ravel() > 0
    worker_index = np.repeat(np.arange(n_workers, dtype=np.int64), n_buckets)[present]
    bucket_ts = np.tile(grid.bucket_start + grid.bucket_s - 1e-3, n_workers)[present]
    role = grid.role.ravel()[present].astype(np.int64)
    engine = EngineFrame(
        workers=grid.workers,
        ts=bucket_ts,
        worker=worker_index,
        role=np.where(role >= 0, role, ROLES.index(Role.UNKNOWN)),
        kv_cache_usage=grid.kv_usage.ravel()[present],
        requests_running=grid.running.ravel()[present],
        requests_waiting=grid.waiting.ravel()[present],
        preemptions=grid.preemptions.ravel()[present],
        prompt_tokens=grid.prompt_tokens.ravel()[present],
        generation_tokens=grid.generation_tokens.ravel()[present],
    )
    return gpu, engine
