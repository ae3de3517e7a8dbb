"""Measured bottleneck of every worker in every analysis window, from its counters.

Per (worker, window): compute-, memory-bandwidth- or capacity-bound, under-utilised, or unknown with the
reason; from profiling counters, else (weaker evidence) busy-time counters; smoothed, with hysteresis.
Reasoning: docs/analyzer.md#bottleneck
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.frames import (
    ROLES,
    SOURCES,
    STATES,
    EngineFrame,
    FloatArray,
    GpuFrame,
    IntArray,
    grouped_count,
    grouped_mode,
    grouped_nanmedian,
    grouped_sum,
)
from analyzer.tunable import tunable
from fleet.contract import ActivityEvidence, Bottleneck, GpuState, Role, TelemetrySource

BOTTLENECKS: tuple[Bottleneck, ...] = (
    Bottleneck.UNKNOWN,
    Bottleneck.COMPUTE,
    Bottleneck.MEMORY_BANDWIDTH,
    Bottleneck.CAPACITY,
    Bottleneck.UNDERUTILISED,
)
_UNKNOWN, _COMPUTE, _MEMORY, _CAPACITY, _IDLE = range(5)
# The evidence behind a cell's GPU activity (``BottleneckGrid.evidence`` indexes this): none (no GPU
# activity: a verdict there comes from the engine's counters alone, e.g. a full KV cache), the profiling
# fields, or busy-time counters only.
EVIDENCE: tuple[ActivityEvidence | None, ...] = (
    None,
    ActivityEvidence.PROFILING,
    ActivityEvidence.UTILISATION,
)
_NO_EVIDENCE, _PROFILING, _UTILISATION = range(3)


class Reason(IntEnum):
    """Why a cell got its verdict (or why it could not get one)."""

    MEASURED = 0
    NO_TELEMETRY = 1
    GPU_LOST = 2
    UTILIZATION_ONLY = 3
    SM_ONLY = 4
    ROLE_TIEBREAK = 5
    KV_FULL = 6
    UTILISATION_MEMORY = 7
    UTILISATION_UNDECIDED = 8
    UTILISATION_IDLE = 9


REASON_TEXT: Mapping[Reason, str] = MappingProxyType(
    {
        Reason.MEASURED: "measured from tensor, DRAM and engine counters",
        Reason.NO_TELEMETRY: "no GPU telemetry for the worker in this window",
        Reason.GPU_LOST: "the worker's GPUs are reported lost (Xid 79 / GPU_IS_LOST)",
        Reason.UTILIZATION_ONLY: (
            "the source reports only utilization (a kernel was running: nvml-basic, or dcgm-exporter "
            "without DCGM_FI_PROF_* profiling fields), which cannot tell compute from memory pressure; no "
            "memory-copy utilisation (DCGM_FI_DEV_MEM_COPY_UTIL) either"
        ),
        Reason.UTILISATION_MEMORY: (
            "utilisation counters only (weaker evidence): busy nearly all the time with the memory "
            "controller busy most of it (MEM_COPY_UTIL); busy-time says how often memory was in use, not "
            "whether its bandwidth limited throughput"
        ),
        Reason.UTILISATION_UNDECIDED: (
            "utilisation counters cannot decide: busy, with the memory controller busy only part of the "
            "time; busy-time counters say how often an engine or the memory controller ran, not which "
            "limited throughput (compute-bound, latency- or launch-bound work read alike)"
        ),
        Reason.UTILISATION_IDLE: (
            "utilisation counters only (weaker evidence): the GPU was busy less than the idle threshold"
        ),
        Reason.SM_ONLY: "no tensor activity reported: compute pressure read from SM activity (less specific)",
        Reason.ROLE_TIEBREAK: "compute and memory pressure within the margin: the role label broke the tie",
        Reason.KV_FULL: "KV cache nearly full with preemptions or a growing queue",
    }
)

_DEFAULT_DRAM_SATURATION = MappingProxyType(
    {
        TelemetrySource.DCGM: 0.8,  # DCGM_FI_PROF_DRAM_ACTIVE peaks near 0.8 in practice
        TelemetrySource.PROMETHEUS: 0.8,  # dcgm-exporter through Prometheus: the same field
        TelemetrySource.NVML_GPM: 0.9,  # GPM DRAM bandwidth utilisation
        TelemetrySource.NVML_BASIC: 0.8,
    }
)


@dataclass(frozen=True)
class BottleneckThresholds:
    window_s: float = 60.0  # the classification window; the pipeline sets it to its bucket
    smoothing_windows: int = tunable(5, "Windows in the trailing rolling median that smooths the counters.")
    min_dwell_windows: int = tunable(3, "Windows a new verdict must hold before it is reported (hysteresis).")
    tensor_saturation: float = tunable(
        0.8, "Tensor activity of a saturated dense-GEMM kernel mix: compute pressure is activity over this."
    )
    sm_saturation: float = tunable(
        0.95, "SM activity counted as saturated where no tensor activity is reported."
    )
    dram_saturation: Mapping[TelemetrySource, float] = tunable(
        _DEFAULT_DRAM_SATURATION,
        "DRAM activity a saturated memory system reaches, per telemetry source (DCGM's peaks near 0.8): "
        "memory pressure is activity over this.",
    )
    busy: float = tunable(0.5, "Normalised pressure counted as near a limit (compute- or memory-bound).")
    margin: float = tunable(0.1, "Pressures closer than this are a tie (the role label breaks it).")
    idle_utilization: float = tunable(0.3, "Utilisation-only sources: busy less than this share is idle.")
    util_busy: float = tunable(
        0.8, "Utilisation-only sources: busy at least this share of the time may read memory-bound..."
    )
    util_memory_busy: float = tunable(0.6, "...when the memory controller is busy at least this share of it.")
    util_confidence: float = tunable(
        0.4, "The most confidence a utilisation-only verdict gets (below a role drift's bar)."
    )
    kv_full: float = tunable(0.9, "KV cache use counted as full (with preemptions or a growing queue).")
    kv_saturated: float = tunable(0.97, "KV cache use counted as saturated on its own.")

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.smoothing_windows < 1 or self.min_dwell_windows < 1:
            raise ValueError("window_s must be > 0, smoothing_windows and min_dwell_windows >= 1")


@dataclass(frozen=True)
class BottleneckGrid:
    """Verdicts per worker (rows) and window (columns). Label arrays index ``BOTTLENECKS``."""

    workers: tuple[str, ...]
    window_start: FloatArray  # epoch seconds, one per column
    window_s: float
    raw: npt.NDArray[np.int8]
    stable: npt.NDArray[np.int8]
    confidence: npt.NDArray[np.float32]  # of the raw verdict, 0..1
    stable_confidence: npt.NDArray[np.float32]
    reason: npt.NDArray[np.int8]  # Reason codes
    evidence: npt.NDArray[np.int8]  # EVIDENCE index: what the cell's GPU activity came from
    role: npt.NDArray[np.int8]  # ROLES index, -1 where no engine sample
    compute_pressure: npt.NDArray[np.float32]  # normalised 0..~1
    memory_pressure: npt.NDArray[np.float32]
    tensor_active: npt.NDArray[np.float32]  # smoothed medians, as reported
    dram_active: npt.NDArray[np.float32]
    kv_cache_usage: npt.NDArray[np.float32]
    requests_waiting: npt.NDArray[np.float32]
    preemptions: npt.NDArray[np.float32]  # per window (not smoothed)
    busy: npt.NDArray[np.float32]  # smoothed busy share (GPU_UTIL / GR_ENGINE_ACTIVE), as reported
    mem_copy_util: npt.NDArray[np.float32]  # smoothed memory-controller busy share

    def verdict(self, worker_id: str, window: int = -1) -> tuple[Bottleneck, float, str]:
        """The stable bottleneck of a worker in a window, its confidence and the reason text."""
        row = self.workers.index(worker_id)
        return (
            BOTTLENECKS[int(self.stable[row, window])],
            float(self.stable_confidence[row, window]),
            REASON_TEXT[Reason(int(self.reason[row, window]))],
        )


@dataclass(frozen=True)
class Episode:
    """A stretch of windows over which a worker's stable bottleneck did not change."""

    worker_id: str
    bottleneck: Bottleneck
    start: float  # epoch seconds
    end: float
    windows: int
    confidence: float  # mean raw confidence where the raw verdict agreed
    role: Role
    reason: str
    evidence: dict[str, float | None]


def _rolling(values: npt.NDArray[np.float32], span: int) -> tuple[npt.NDArray[np.float32], IntArray]:
    """Trailing nan-median over ``span`` windows along axis 1, and the number of valid values."""
    if span == 1 or not (~np.isnan(values)).any():
        return values, (~np.isnan(values)).astype(np.int64)
    padded = np.concatenate([np.full((values.shape[0], span - 1), np.nan, np.float32), values], axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(padded, span, axis=1)
    ordered = np.sort(windows, axis=2)  # NaN sorts last
    valid = (~np.isnan(windows)).sum(axis=2)
    low = np.clip((valid - 1) // 2, 0, span - 1)
    high = np.clip(valid // 2, 0, span - 1)
    med = 0.5 * (
        np.take_along_axis(ordered, low[..., None], axis=2)[..., 0]
        + np.take_along_axis(ordered, high[..., None], axis=2)[..., 0]
    )
    return np.where(valid > 0, med, np.nan).astype(np.float32), valid.astype(np.int64)


def _rolling_sum(values: npt.NDArray[np.float32], span: int) -> npt.NDArray[np.float32]:
    filled = np.nan_to_num(values, nan=0.0)
    cumulative = np.cumsum(filled, axis=1, dtype=np.float64)
    shifted = np.concatenate([np.zeros((values.shape[0], span), np.float64), cumulative], axis=1)
    sums: npt.NDArray[np.float32] = (cumulative - shifted[:, : cumulative.shape[1]]).astype(np.float32)
    return sums


def _cells(ts: FloatArray, worker_rows: IntArray, start: float, window_s: float, n_windows: int) -> IntArray:
    """Cell index per sample (-1 outside the range); a sample belongs to the window its end falls in."""
    column = np.floor((ts - start) / window_s - 1e-9).astype(np.int64)
    inside = (column >= 0) & (column < n_windows)
    return np.where(inside, worker_rows * n_windows + column, -1)


def _grid(values: FloatArray, shape: tuple[int, int]) -> npt.NDArray[np.float32]:
    return values.reshape(shape).astype(np.float32)


def classify(
    gpu: GpuFrame,
    engine: EngineFrame | None,
    *,
    start: float,
    end: float,
    thresholds: BottleneckThresholds | None = None,
) -> BottleneckGrid:
    """Classify every worker seen in ``gpu`` or ``engine`` over [start, end) in windows of window_s."""
    t = thresholds or BottleneckThresholds()
    engine = engine or EngineFrame.from_samples([])
    workers = tuple(sorted(set(gpu.workers) | set(engine.workers)))
    rows = {w: i for i, w in enumerate(workers)}
    n_windows = max(1, math.ceil((end - start) / t.window_s))
    shape = (len(workers), n_windows)
    n = shape[0] * shape[1]

    gpu_rows = (
        np.array([rows[w] for w in gpu.workers], dtype=np.int64)[gpu.worker] if len(gpu) else gpu.worker
    )
    cells = _cells(gpu.ts, gpu_rows, start, t.window_s, n_windows)
    lost = gpu.state == STATES.index(GpuState.LOST)
    live = (cells >= 0) & ~lost
    # A source without a calibrated ceiling (one the contract added later) reads as DCGM's field.
    saturation = np.array([t.dram_saturation.get(s, 0.8) for s in SOURCES])[gpu.source]
    c = cells[live]
    tensor_values = gpu.tensor_active[live]
    tensor = grouped_nanmedian(c, tensor_values, n)
    # SM activity only matters where a sample lacks tensor activity (it stands in for it there).
    sm = grouped_nanmedian(c, np.where(np.isnan(tensor_values), gpu.sm_active[live], np.nan), n)
    dram = grouped_nanmedian(c, np.clip(gpu.dram_active[live] / saturation[live], 0.0, 1.0), n)
    # Busy share: GPU_UTIL, or GR_ENGINE_ACTIVE (a MIG instance's own; the larger where both are reported).
    util = grouped_nanmedian(c, np.fmax(gpu.gpu_util[live], gpu.gr_engine_active[live]), n)
    mem_copy = grouped_nanmedian(c, gpu.mem_copy_util[live], n)
    cell_saturation = grouped_nanmedian(
        c, np.where(np.isnan(gpu.dram_active[live]), np.nan, saturation[live]), n
    )
    lost_cells = grouped_count(cells[(cells >= 0) & lost], n) > 0
    live_cells = grouped_count(c, n) > 0

    e_rows = (
        np.array([rows[w] for w in engine.workers], dtype=np.int64)[engine.worker]
        if len(engine)
        else engine.worker
    )
    e_cells = _cells(engine.ts, e_rows, start, t.window_s, n_windows)
    ok = e_cells >= 0
    ec = e_cells[ok]
    kv = grouped_nanmedian(ec, engine.kv_cache_usage[ok], n)
    waiting = grouped_nanmedian(ec, engine.requests_waiting[ok], n)
    preempt = grouped_sum(ec, engine.preemptions[ok], n)
    role = grouped_mode(ec, engine.role[ok], n, len(ROLES)).reshape(shape).astype(np.int8)

    span = t.smoothing_windows
    tensor_s, _ = _rolling(_grid(tensor, shape), span)
    sm_s, _ = _rolling(_grid(sm, shape), span)
    dram_s, coverage = _rolling(_grid(dram, shape), span)
    util_s, util_cov = _rolling(_grid(util, shape), span)
    mem_copy_s, mem_cov = _rolling(_grid(mem_copy, shape), span)
    kv_s, _ = _rolling(_grid(kv, shape), span)
    waiting_s, _ = _rolling(_grid(waiting, shape), span)
    preempt_w = _grid(preempt, shape)
    preempt_s = _rolling_sum(preempt_w, span)
    growing = (
        waiting_s
        > np.concatenate([np.full((shape[0], span), np.nan, np.float32), waiting_s], axis=1)[:, : shape[1]]
    )

    has_tensor = ~np.isnan(tensor_s)
    compute = np.where(has_tensor, tensor_s / t.tensor_saturation, sm_s / t.sm_saturation)
    has_pressure = ~np.isnan(compute) & ~np.isnan(dram_s)
    memory = dram_s
    kv_known = ~np.isnan(kv_s)
    queued = np.nan_to_num(waiting_s) >= 1.0
    capacity = (
        kv_known
        & (kv_s >= t.kv_full)
        & ((preempt_s > 0) | (queued & growing) | (queued & (kv_s >= t.kv_saturated)))
    )

    label = np.full(shape, _UNKNOWN, np.int8)
    reason = np.full(shape, Reason.NO_TELEMETRY, np.int8)
    confidence = np.zeros(shape, np.float32)

    top = np.fmax(compute, memory)
    busy = has_pressure & (top >= t.busy)
    tie = busy & (np.abs(compute - memory) < t.margin)
    prefill, decode = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE)
    compute_wins = np.where(
        tie & (role == prefill), True, np.where(tie & (role == decode), False, compute >= memory)
    )
    separation = np.clip(0.5 + np.abs(compute - memory) / 0.6, 0.5, 1.0)
    span_coverage = 0.5 + 0.5 * coverage / span
    base = np.where(has_tensor, 1.0, 0.6)

    measured_busy = busy
    label[measured_busy] = np.where(compute_wins[measured_busy], _COMPUTE, _MEMORY)
    confidence[measured_busy] = (base * separation * span_coverage)[measured_busy]
    reason[measured_busy] = np.where(has_tensor[measured_busy], Reason.MEASURED, Reason.SM_ONLY)
    role_decided = tie & ((role == prefill) | (role == decode))
    reason[role_decided] = Reason.ROLE_TIEBREAK
    confidence[role_decided] = np.minimum(confidence[role_decided], 0.5)

    idle = has_pressure & ~busy
    headroom = np.clip(0.5 + (t.busy - top) / 0.4, 0.5, 1.0)
    label[idle] = _IDLE
    confidence[idle] = (base * headroom * span_coverage)[idle]
    reason[idle] = np.where(has_tensor[idle], Reason.MEASURED, Reason.SM_ONLY)

    # Busy-time counters only. The memory controller busy implies the GPU busy at least as often.
    mem_known = ~np.isnan(mem_copy_s)
    busy_share = np.fmax(util_s, mem_copy_s)
    basic = ~has_pressure & ~np.isnan(busy_share)
    basic_idle = basic & (busy_share < t.idle_utilization)
    label[basic_idle] = _IDLE
    confidence[basic_idle] = (0.5 * (0.5 + 0.5 * np.maximum(util_cov, mem_cov) / span))[basic_idle]
    reason[basic] = Reason.UTILIZATION_ONLY
    reason[basic_idle] = Reason.UTILISATION_IDLE
    basic_busy = basic & ~basic_idle
    memory_busy = basic_busy & mem_known & (busy_share >= t.util_busy) & (mem_copy_s >= t.util_memory_busy)
    label[memory_busy] = _MEMORY
    confidence[memory_busy] = (t.util_confidence * (0.5 + 0.5 * mem_cov / span))[memory_busy]
    reason[memory_busy] = Reason.UTILISATION_MEMORY
    reason[basic_busy & mem_known & ~memory_busy] = Reason.UTILISATION_UNDECIDED
    evidence = np.full(shape, _NO_EVIDENCE, np.int8)
    evidence[has_pressure] = _PROFILING
    evidence[basic] = _UTILISATION

    label[capacity] = _CAPACITY
    strong = (preempt_s > 0) | (kv_s >= t.kv_saturated)
    confidence[capacity] = np.where(strong, 0.9, 0.7)[capacity]
    reason[capacity] = Reason.KV_FULL

    gone = (lost_cells & ~live_cells).reshape(shape)
    label[gone & ~capacity] = _UNKNOWN
    reason[gone & ~capacity] = Reason.GPU_LOST
    confidence[gone & ~capacity] = 0.0
    evidence[gone] = _NO_EVIDENCE

    # The role is a prior: counters that contradict it keep their verdict at slightly lower confidence.
    contradicts = ((role == prefill) & (label == _MEMORY)) | ((role == decode) & (label == _COMPUTE))
    confidence[contradicts] *= 0.9

    stable, stable_conf = _hysteresis(label, confidence, t.min_dwell_windows)
    return BottleneckGrid(
        workers=workers,
        window_start=start + t.window_s * np.arange(n_windows, dtype=np.float64),
        window_s=t.window_s,
        raw=label,
        stable=stable,
        confidence=confidence,
        stable_confidence=stable_conf,
        reason=reason,
        evidence=evidence,
        role=role,
        compute_pressure=compute.astype(np.float32),
        memory_pressure=memory.astype(np.float32),
        tensor_active=tensor_s,
        dram_active=(dram_s * np.nan_to_num(_grid(cell_saturation, shape), nan=0.8)).astype(np.float32),
        kv_cache_usage=kv_s,
        requests_waiting=waiting_s,
        preemptions=preempt_w,
        busy=util_s,
        mem_copy_util=mem_copy_s,
    )


def _hysteresis(
    raw: npt.NDArray[np.int8], confidence: npt.NDArray[np.float32], dwell: int
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Stable verdicts: switch only after the raw verdict held ``dwell`` windows in a row."""
    n_workers, n_windows = raw.shape
    stable = np.empty_like(raw)
    stable_conf = np.empty_like(confidence)
    state = np.full(n_workers, _UNKNOWN, np.int8)
    state_conf = np.zeros(n_workers, np.float32)
    run_label = np.full(n_workers, -1, np.int8)
    run_length = np.zeros(n_workers, np.int64)
    for w in range(n_windows):
        current = raw[:, w]
        run_length = np.where(current == run_label, run_length + 1, 1)
        run_label = current
        switch = (run_length >= dwell) & (current != state)
        state = np.where(switch, current, state)
        agree = current == state
        state_conf = np.where(agree, confidence[:, w], state_conf * np.float32(0.9)).astype(np.float32)
        stable[:, w] = state
        stable_conf[:, w] = state_conf
    return stable, stable_conf


def _median(values: npt.NDArray[np.float32]) -> float | None:
    finite = values[~np.isnan(values)]
    return float(np.median(finite)) if finite.size else None


def episodes(grid: BottleneckGrid) -> list[Episode]:
    """Runs of one stable verdict per worker, with the median evidence over each run."""
    out: list[Episode] = []
    for row, worker in enumerate(grid.workers):
        labels = grid.stable[row]
        changes = np.flatnonzero(np.diff(labels)) + 1
        bounds = np.concatenate(([0], changes, [labels.size]))
        for a, b in itertools.pairwise(bounds.tolist()):
            code = int(labels[a])
            agree = grid.raw[row, a:b] == code
            conf = float(grid.confidence[row, a:b][agree].mean()) if agree.any() else 0.0
            reasons = grid.reason[row, a:b]
            warming = code == _UNKNOWN and (grid.raw[row, a:b] != _UNKNOWN).mean() > 0.5
            roles = grid.role[row, a:b]
            known_roles = roles[roles >= 0]
            out.append(
                Episode(
                    worker_id=worker,
                    bottleneck=BOTTLENECKS[code],
                    start=float(grid.window_start[a]),
                    end=float(grid.window_start[b - 1] + grid.window_s),
                    windows=int(b - a),
                    confidence=conf,
                    role=ROLES[int(np.bincount(known_roles).argmax())] if known_roles.size else Role.UNKNOWN,
                    reason=(
                        "verdict not yet stable (hysteresis: a new verdict must hold for a few windows)"
                        if warming
                        else REASON_TEXT[Reason(int(np.bincount(reasons.astype(np.int64)).argmax()))]
                    ),
                    evidence={
                        "tensor_active": _median(grid.tensor_active[row, a:b]),
                        "dram_active": _median(grid.dram_active[row, a:b]),
                        "compute_pressure": _median(grid.compute_pressure[row, a:b]),
                        "memory_pressure": _median(grid.memory_pressure[row, a:b]),
                        "kv_cache_usage": _median(grid.kv_cache_usage[row, a:b]),
                        "requests_waiting": _median(grid.requests_waiting[row, a:b]),
                        "preemptions": float(np.nansum(grid.preemptions[row, a:b])),
                        "busy": _median(grid.busy[row, a:b]),
                        "mem_copy_util": _median(grid.mem_copy_util[row, a:b]),
                    },
                )
            )
    return out
