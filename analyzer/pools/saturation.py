"""Saturation evidence: was a worker at its limit, read from what its engine exports, bucket by bucket.

A worker is saturated in a bucket when work waits for it (requests waiting, at least one) while it runs
at its limit:

- decode: its KV cache nearly full (``saturated_kv``), or its running requests at its engine's concurrency
  cap (within ``plateau_share``): the cap its engine reports, else the plateau the fleet shows (the most it
  ran, held in ``plateau_buckets`` buckets or more; :mod:`analyzer.pools.concurrency`);
- prefill: busy (``saturated_busy`` of the time a kernel ran), or, where no busy time is reported, its median
  TTFT ``ttft_rise`` times its own TTFT without a queue (TTFT rising with the queue);
- mixed (colocated): either.

Unsaturated where it reported a queue and was not at its limit; unknown where its engine reports no queue
(nothing says whether work waited). Only a saturated worker's delivered throughput is its capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from analyzer.pools.calibration import CapacityParams
from analyzer.pools.concurrency import running_plateau
from analyzer.pools.limits import busy_share, limits
from analyzer.telemetry.grid import WorkerGrid
from analyzer.tunable import tunable
from fleet.contract import Role

SaturationState = Literal["saturated", "unsaturated", "unknown"]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SaturationParams:
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


_LIMIT = {
    Role.DECODE: "KV cache nearly full or running requests at their concurrency cap",
    Role.PREFILL: "busy, or TTFT rising with the queue where busy time is not reported",
}


def saturated_buckets(
    grid: WorkerGrid,
    row: int,
    role: Role,
    first: int,
    last: int,
    capacity: CapacityParams,
    caps: Mapping[int, int] | None = None,
) -> tuple[BoolArray, BoolArray, float | None]:
    """(saturated, queue reported) per bucket of [first, last), and the worker's concurrency cap (reported
    in ``caps``, else the plateau of its running requests; None where neither)."""
    sl = slice(first, last)
    rows = np.array([row])
    reached = limits(grid, rows, busy_share(grid, rows), capacity, caps)
    queued, busy = reached.queued[0, sl], reached.prefill[0, sl]
    plateau = (
        float(caps[row])
        if caps and row in caps
        else running_plateau(grid.running[row], capacity.plateau_share, capacity.plateau_buckets)
    )
    decode_limit = reached.decode[0, sl]
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
    caps: Mapping[int, int] | None = None,
) -> Saturation:
    """The worker's saturation over buckets [first, last) where it served (module docstring)."""
    cap, p = capacity or CapacityParams(), params or SaturationParams()
    sl = slice(first, last)
    serving = grid.engine_s[row, sl] > 0
    saturated, reported, plateau = saturated_buckets(grid, row, role, first, last, cap, caps)
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
    limit = _LIMIT.get(role, "KV cache nearly full, running requests at their cap, or busy")
    reason = f"work waiting while at its limit ({limit}) in {share:.0%} of {n} serving buckets"
    return Saturation(state, share, n, waiting, kv, plateau, reason)


def saturated_together(
    grid: WorkerGrid, rows: npt.NDArray[np.int64], sl: slice, saturated: BoolArray, *, any_one: bool = False
) -> BoolArray:
    """Per bucket of ``sl``: ``rows``' workers all reported and were all saturated (``saturated``: per
    worker and bucket), as a load-aware router keeps them at once; ``any_one``: one of them was, as under
    round-robin, where the slowest bounds the rest."""
    together = np.any(saturated, axis=0) if any_one else np.all(saturated, axis=0)
    reporting = np.all(grid.engine_s[rows, sl] > 0, axis=0)
    out: BoolArray = together & reporting
    return out


def colocated_at_limit(
    grid: WorkerGrid,
    rows: npt.NDArray[np.int64],
    first: int,
    last: int,
    capacity: CapacityParams,
    caps: Mapping[int, int] | None = None,
) -> bool:
    """Whether a colocated pool's workers (``rows``, each serving both phases) were seen saturated over
    buckets [first, last): in at least ``min_saturated_buckets`` buckets all of them queued work at their
    limit (KV cache full or running at its cap, or busy): the rule of a disaggregated pool's phase
    (``phase_evidence.measured_phases``) under a load-aware router."""
    if rows.size == 0:
        return False
    sl = slice(first, last)
    reached = limits(grid, rows, busy_share(grid, rows), capacity, caps)
    saturated = reached.queued[:, sl] & (reached.decode[:, sl] | reached.prefill[:, sl])
    return int(saturated_together(grid, rows, sl, saturated).sum()) >= capacity.min_saturated_buckets
