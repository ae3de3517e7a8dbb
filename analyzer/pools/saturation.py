"""Saturation evidence: was a worker at its limit, read from what its engine exports, bucket by bucket.

A worker is saturated in a bucket when work waits for it (requests waiting, at least one) while it runs
at its limit:

- decode: its KV cache nearly full (``saturated_kv``), or its running requests on their plateau: within
  ``plateau_share`` of the most it ran over the range, a level it held in ``plateau_buckets`` buckets or
  more (the engine's concurrency cap as the fleet shows it, where the engine does not export it);
- prefill: busy (``saturated_busy`` of the time a kernel ran);
- mixed (colocated): either.

Unsaturated where it reported a queue and was not at its limit; unknown where its engine reports no queue
(nothing says whether work waited). Only a saturated worker's delivered throughput is its capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from analyzer.pools.calibration import CapacityParams, busy_share, limits
from analyzer.telemetry.grid import WorkerGrid
from analyzer.tunable import tunable
from fleet.contract import Role

SaturationState = Literal["saturated", "unsaturated", "unknown"]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SaturationParams:
    plateau_share: float = tunable(
        0.98, "Running requests within this share of the most a worker ran count as its concurrency plateau."
    )
    plateau_buckets: int = tunable(
        3, "Buckets a worker must hold its running-requests peak to call it a plateau."
    )
    saturated_share: float = tunable(
        0.5,
        "A worker is reported saturated when it was saturated in at least this share of its serving buckets.",
    )


@dataclass(frozen=True)
class Saturation:
    """One worker over a range of buckets: its state, the share of serving buckets saturated, the evidence."""

    state: SaturationState
    share: float | None  # None: unknown
    buckets: int  # serving buckets read
    waiting_median: float | None
    kv_usage_median: float | None
    running_plateau: float | None  # the concurrency plateau it held (None: none seen)
    reason: str


def _median(values: npt.NDArray[np.float64]) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else None


def _plateau(running: npt.NDArray[np.float64], p: SaturationParams) -> float | None:
    finite = running[np.isfinite(running)]
    if finite.size == 0 or float(finite.max()) < 1.0:
        return None
    peak = float(finite.max())
    held = int((finite >= p.plateau_share * peak).sum())
    return peak if held >= p.plateau_buckets else None


_LIMIT = {
    Role.DECODE: "KV cache nearly full or running requests on their plateau",
    Role.PREFILL: "busy",
}


def saturated_buckets(
    grid: WorkerGrid,
    row: int,
    role: Role,
    first: int,
    last: int,
    capacity: CapacityParams,
    p: SaturationParams,
) -> tuple[BoolArray, BoolArray, float | None]:
    """(saturated, queue reported) per bucket of [first, last), and the plateau of running requests."""
    sl = slice(first, last)
    rows = np.array([row])
    reached = limits(grid, rows, busy_share(grid, rows), capacity)
    queued, busy = reached.queued[0, sl], reached.busy[0, sl]
    plateau = _plateau(grid.running[row], p)
    at_cap = (
        np.nan_to_num(grid.running[row, sl]) >= p.plateau_share * plateau
        if plateau
        else np.zeros_like(queued)
    )
    decode_limit = reached.kv_full[0, sl] | at_cap
    at_limit = {Role.DECODE: decode_limit, Role.PREFILL: busy}.get(role, decode_limit | busy)
    return queued & at_limit, np.isfinite(grid.waiting[row, sl]), plateau


def worker_saturation(
    grid: WorkerGrid,
    row: int,
    role: Role,
    first: int,
    last: int,
    capacity: CapacityParams | None = None,
    params: SaturationParams | None = None,
) -> Saturation:
    """The worker's saturation over buckets [first, last) where it served (module docstring)."""
    cap, p = capacity or CapacityParams(), params or SaturationParams()
    sl = slice(first, last)
    serving = grid.engine_s[row, sl] > 0
    saturated, reported, plateau = saturated_buckets(grid, row, role, first, last, cap, p)
    waiting = _median(np.where(serving, grid.waiting[row, sl], np.nan))
    kv = _median(np.where(serving, grid.kv_usage[row, sl], np.nan))
    n = int(serving.sum())
    if n == 0 or not (reported & serving).any():
        why = (
            "not serving in the range"
            if n == 0
            else "its engine reports no queue: nothing says whether work waited"
        )
        return Saturation("unknown", None, n, waiting, kv, plateau, why)
    share = float((saturated & serving).sum()) / n
    state: SaturationState = "saturated" if share >= p.saturated_share else "unsaturated"
    limit = _LIMIT.get(role, "KV cache nearly full, running requests on their plateau, or busy")
    reason = f"work waiting while at its limit ({limit}) in {share:.0%} of {n} serving buckets"
    return Saturation(state, share, n, waiting, kv, plateau, reason)
