"""Columnar telemetry: GPU and engine samples as numpy arrays, and grouped medians over them.

Weeks of samples are too many for per-row Python objects. Missing values are NaN, never 0.
Reasoning: docs/analyzer.md#frames
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fleet.contract import EngineSample, GpuSample, GpuState, Role, TelemetrySource

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SOURCES: tuple[TelemetrySource, ...] = tuple(TelemetrySource)
ROLES: tuple[Role, ...] = tuple(Role)
STATES: tuple[GpuState, ...] = tuple(GpuState)


def _codes(values: Sequence[str], table: Sequence[str]) -> IntArray:
    index = {v: i for i, v in enumerate(table)}
    return np.fromiter((index[v] for v in values), dtype=np.int64, count=len(values))


def _floats(values: Iterable[float | int | None]) -> FloatArray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _unset() -> FloatArray:
    return np.empty(0, dtype=np.float64)


@dataclass(frozen=True)
class GpuFrame:
    """GPU samples attributed to workers. ``worker`` indexes ``workers``; ``source``/``state`` index
    ``SOURCES``/``STATES``; ``ts`` is the window end in epoch seconds.

    ``gr_engine_active`` (the engine's busy share; a MIG instance's own activity, where GPU_UTIL is not
    supported) and ``mem_copy_util`` (the memory controller's busy share) are busy-time counters, weaker
    evidence than the profiling fields; a frame built without them holds NaN (unknown) there."""

    workers: tuple[str, ...]
    ts: FloatArray
    worker: IntArray
    sm_active: FloatArray
    tensor_active: FloatArray
    dram_active: FloatArray
    gpu_util: FloatArray
    source: IntArray
    state: IntArray
    gr_engine_active: FloatArray = field(default_factory=_unset)
    mem_copy_util: FloatArray = field(default_factory=_unset)

    def __post_init__(self) -> None:
        n = self.ts.shape[0]
        for name in ("gr_engine_active", "mem_copy_util"):
            if getattr(self, name).shape == (0,) and n:
                object.__setattr__(self, name, np.full(n, np.nan))
        for name in (
            "worker", "sm_active", "tensor_active", "dram_active", "gpu_util", "source", "state",
            "gr_engine_active", "mem_copy_util",
        ):  # fmt: skip
            if getattr(self, name).shape != (n,):
                raise ValueError(f"GpuFrame.{name} has shape {getattr(self, name).shape}, expected ({n},)")

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @classmethod
    def from_samples(
        cls, samples: Iterable[GpuSample], gpu_workers: dict[str, str] | None = None
    ) -> tuple[GpuFrame, int]:
        """The frame of the samples attributed to a worker, and how many were unattributed.

        A sample's own ``worker_id`` wins; else ``gpu_workers`` (GPU UUID -> worker, e.g. from engine
        samples' ``gpu_uuids``) attributes it. Unattributed GPUs are counted, never guessed.
        """
        mapping = gpu_workers or {}
        kept: list[tuple[str, GpuSample]] = []
        unattributed = 0
        for s in samples:
            worker = s.worker_id or mapping.get(s.gpu_uuid)
            if worker is None:
                unattributed += 1
            else:
                kept.append((worker, s))
        workers = tuple(sorted({w for w, _ in kept}))
        return (
            cls(
                workers=workers,
                ts=np.array([s.ts.timestamp() for _, s in kept], dtype=np.float64),
                worker=_codes([w for w, _ in kept], workers),
                sm_active=_floats(s.sm_active for _, s in kept),
                tensor_active=_floats(s.tensor_active for _, s in kept),
                dram_active=_floats(s.dram_active for _, s in kept),
                gpu_util=_floats(s.gpu_util for _, s in kept),
                source=_codes([s.source for _, s in kept], SOURCES),
                state=_codes([s.state for _, s in kept], STATES),
                gr_engine_active=_floats(s.gr_engine_active for _, s in kept),
                mem_copy_util=_floats(s.mem_copy_util for _, s in kept),
            ),
            unattributed,
        )


@dataclass(frozen=True)
class EngineFrame:
    """Engine samples; ``worker`` indexes ``workers``, ``role`` indexes ``ROLES``."""

    workers: tuple[str, ...]
    ts: FloatArray
    worker: IntArray
    role: IntArray
    kv_cache_usage: FloatArray
    requests_running: FloatArray
    requests_waiting: FloatArray
    preemptions: FloatArray
    prompt_tokens: FloatArray
    generation_tokens: FloatArray

    def __post_init__(self) -> None:
        n = self.ts.shape[0]
        for name in (
            "worker", "role", "kv_cache_usage", "requests_running", "requests_waiting", "preemptions",
            "prompt_tokens", "generation_tokens",
        ):  # fmt: skip
            if getattr(self, name).shape != (n,):
                raise ValueError(f"EngineFrame.{name} has shape {getattr(self, name).shape}, expected ({n},)")

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @classmethod
    def from_samples(cls, samples: Iterable[EngineSample]) -> EngineFrame:
        rows = list(samples)
        workers = tuple(sorted({s.worker_id for s in rows}))
        return cls(
            workers=workers,
            ts=np.array([s.ts.timestamp() for s in rows], dtype=np.float64),
            worker=_codes([s.worker_id for s in rows], workers),
            role=_codes([s.role for s in rows], ROLES),
            kv_cache_usage=_floats(s.kv_cache_usage for s in rows),
            requests_running=_floats(s.requests_running for s in rows),
            requests_waiting=_floats(s.requests_waiting for s in rows),
            preemptions=_floats(s.preemptions for s in rows),
            prompt_tokens=_floats(s.prompt_tokens for s in rows),
            generation_tokens=_floats(s.generation_tokens for s in rows),
        )


def gpu_workers_from_engines(samples: Iterable[EngineSample]) -> dict[str, str]:
    """GPU UUID -> worker from engine samples' ``gpu_uuids`` (the latest sample wins)."""
    mapping: dict[str, str] = {}
    for s in sorted(samples, key=lambda e: e.ts):
        for uuid in s.gpu_uuids:
            mapping[uuid] = s.worker_id
    return mapping


def grouped_nanmedian(cells: IntArray, values: FloatArray, n_cells: int) -> FloatArray:
    """Median of ``values`` per cell index (NaNs ignored; NaN where a cell has no value).

    One sort orders the values within cells; each cell's median is the middle element(s) of its run.
    Values within [0, 1] (every activity ratio) sort as the single float key ``cell + value / 2``, several
    times faster than a two-key sort; other values fall back to ``np.lexsort``.
    """
    out = np.full(n_cells, np.nan)
    valid = ~np.isnan(values)
    if not valid.any():
        return out
    c = cells[valid]
    v = values[valid]
    counts = np.bincount(c, minlength=n_cells)
    if v.min() >= 0.0 and v.max() <= 1.0 and n_cells < 2**32:  # float64: values to ~1e-6 below 2**32 cells
        keys = np.sort(c.astype(np.float64) + 0.5 * v)
        v = (keys - np.floor(keys)) * 2.0
    else:
        order = np.lexsort((v, c))
        v = v[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    present = counts > 0
    low = starts[present] + (counts[present] - 1) // 2
    high = starts[present] + counts[present] // 2
    out[present] = 0.5 * (v[low] + v[high])
    return out


def grouped_sum(cells: IntArray, values: FloatArray, n_cells: int) -> FloatArray:
    """Sum of ``values`` per cell (NaNs ignored; NaN where a cell has no value)."""
    valid = ~np.isnan(values)
    sums = np.bincount(cells[valid], weights=values[valid], minlength=n_cells)
    counts = np.bincount(cells[valid], minlength=n_cells)
    return np.where(counts > 0, sums, np.nan)


def grouped_count(cells: IntArray, n_cells: int) -> IntArray:
    return np.bincount(cells, minlength=n_cells).astype(np.int64)


def grouped_mode(cells: IntArray, codes: IntArray, n_cells: int, n_codes: int) -> IntArray:
    """Most frequent code per cell (-1 where a cell is empty); ties go to the lower code."""
    if cells.size == 0:
        return np.full(n_cells, -1, dtype=np.int64)
    table = np.bincount(cells * n_codes + codes, minlength=n_cells * n_codes).reshape(n_cells, n_codes)
    mode: IntArray = table.argmax(axis=1).astype(np.int64)
    mode[table.sum(axis=1) == 0] = -1
    return mode
