"""Whether a worker's phase was at its limit, bucket by bucket: work waiting while prefill was busy (or its
TTFT rose with the queue) or decode held a full KV cache (or ran at its concurrency cap). Only there is a
worker's delivered throughput its capacity. Reasoning: docs/analyzer.md#saturation
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from analyzer.pools.concurrency import at_cap, row_caps
from analyzer.telemetry.frames import FloatArray
from analyzer.telemetry.grid import WorkerGrid


class Thresholds(Protocol):
    """What says a phase is at its limit (``analyzer.pools.calibration.CapacityParams`` has them all)."""

    @property
    def saturated_busy(self) -> float: ...
    @property
    def saturated_kv(self) -> float: ...
    @property
    def ttft_rise(self) -> float: ...
    @property
    def plateau_share(self) -> float: ...
    @property
    def plateau_buckets(self) -> int: ...


def busy_share(grid: WorkerGrid, rows: npt.NDArray[np.int64]) -> FloatArray:
    """Share of time a kernel ran: ``gpu_util``, else ``gr_engine_active`` (a MIG instance's own activity:
    GPU_UTIL is not supported on MIG), else SM activity over its high-water mark."""
    util = np.where(np.isnan(grid.gpu_util[rows]), grid.gr_engine_active[rows], grid.gpu_util[rows])
    sm = grid.sm_active[rows]
    finite_sm = sm[~np.isnan(sm)]
    sm_full = float(np.quantile(finite_sm, 0.99)) if finite_sm.size else 1.0
    busy: FloatArray = np.where(np.isnan(util), sm / max(sm_full, 1e-6), util)
    return busy


@dataclass(frozen=True)
class Limits:
    """Per (worker row, bucket): work waiting for it, and each phase's limit reached. A phase is saturated
    where work waits while it is at its limit (prefill: ``queued & prefill``; decode: ``queued & decode``)."""

    queued: npt.NDArray[np.bool_]  # at least one request waiting
    busy: npt.NDArray[np.bool_]  # busy at least ``saturated_busy`` of the time (a prefill limit)
    ttft_rising: npt.NDArray[np.bool_]  # TTFT ``ttft_rise`` x its unqueued level (the other prefill limit)
    kv_full: npt.NDArray[np.bool_]  # KV cache at least ``saturated_kv`` full (a decode limit)
    at_cap: npt.NDArray[np.bool_]  # running at the engine's concurrency cap (the other decode limit)

    @property
    def prefill(self) -> npt.NDArray[np.bool_]:
        """Prefill at its limit: busy, or its TTFT rising with the queue where busy time is not reported."""
        out: npt.NDArray[np.bool_] = self.busy | self.ttft_rising
        return out

    @property
    def decode(self) -> npt.NDArray[np.bool_]:
        """Decode at its limit: KV cache full or running at its concurrency cap."""
        out: npt.NDArray[np.bool_] = self.kv_full | self.at_cap
        return out


def limits(
    grid: WorkerGrid,
    rows: npt.NDArray[np.int64],
    busy: FloatArray,
    p: Thresholds,
    caps: Mapping[int, int] | None = None,
) -> Limits:
    """``Limits`` of ``rows`` over every bucket; ``busy`` is their :func:`busy_share`, ``caps`` the
    concurrency caps their engines report (grid row -> requests; the running plateau elsewhere). Unreported
    is not reached."""
    cap = row_caps(grid, rows, caps or {}, p.plateau_share, p.plateau_buckets)
    queued = np.nan_to_num(grid.waiting[rows]) >= 1.0
    return Limits(
        queued=queued,
        busy=np.nan_to_num(busy) >= p.saturated_busy,
        ttft_rising=ttft_rising(grid.ttft_s[rows], queued, np.isnan(busy), p.ttft_rise),
        kv_full=np.nan_to_num(grid.kv_usage[rows]) >= p.saturated_kv,
        at_cap=at_cap(grid, rows, cap, p.plateau_share),
    )


def ttft_rising(
    ttft: FloatArray, queued: npt.NDArray[np.bool_], busy_unknown: npt.NDArray[np.bool_], rise: float
) -> npt.NDArray[np.bool_]:
    """Per (row, bucket): a queue, no busy time reported, and the median TTFT at least ``rise`` times the
    row's own median TTFT in buckets without a queue (never where that baseline is unknown)."""
    calm = np.where(~queued & np.isfinite(ttft), ttft, np.nan)
    has_calm = np.isfinite(calm).any(axis=1)
    baseline = np.full(ttft.shape[0], np.nan)
    baseline[has_calm] = np.nanmedian(calm[has_calm], axis=1)
    limit = np.where(np.isfinite(baseline) & (baseline > 0), rise * baseline, np.inf)
    out: npt.NDArray[np.bool_] = queued & busy_unknown & (np.nan_to_num(ttft) >= limit[:, None])
    return out
