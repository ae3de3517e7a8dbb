"""A pool's state from its queues, never from the model: supply-limited, demand-limited or unknown.

- Supply-limited: requests wait in the median bucket, more than ``backlog_per_worker`` per serving worker,
  and the pool's bound is seen at its limit (a phase saturated: KV cache full or busy with work queued) or
  its queues grow (arrivals outrun service).
- Demand-limited: fewer wait in the median bucket (it served what arrived; its loss is idle capacity). An
  engine near its limit holds a request or so between two iterations without any backlog, so the pool's
  sum alone would call every large pool supply-limited at any busy hour: the threshold scales with it.
  The slack is checked before the growth: a queue that truly grows for a segment (hours) holds far more than
  one request per worker in its median bucket, so a median under the slack with a positive least-squares
  slope is a diurnal peak at the segment's end, not a backlog.
- Unknown: no engine reports a queue, or requests wait while no phase is seen at its limit and the queues do
  not grow (an admission or router limit the GPUs do not explain).

Critical findings need supply-limited. Reasoning: docs/analyzer.md#analysis
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from analyzer.telemetry.grid import WorkerGrid


class PoolState(StrEnum):
    SUPPLY_LIMITED = "supply-limited"
    DEMAND_LIMITED = "demand-limited"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StateEvidence:
    state: PoolState
    evidence: str


# Queues growing slower than this (requests/s: about 4 an hour) are holding, not growing: a least-squares
# slope is never exactly 0.
GROWING = 1e-3
# A queue present in fewer than this share of the segment's windows is one the pool clears between bursts
# (a peak, long prompts arriving together): its median window has no request waiting, however large the
# mean queue of its median hour. A backlog never clears: its share is near 1.
SUSTAINED = 0.5
# A queue in at least this share of the windows, beyond the slack at the 90th percentile, is said beside a
# demand-limited state: the pool fell behind at its peaks, though not in its typical window.
PEAK_SHARE = 0.1
NOT_MODELLED = StateEvidence(PoolState.UNKNOWN, "no placement was modelled")


def pool_state(
    waiting: float,
    growth: float,
    measured: tuple[float | None, float | None],
    *,
    workers: int = 1,
    backlog_per_worker: float = 1.0,
    colocated_at_limit: bool = False,
    queued: float = math.nan,
    peak_waiting: float = math.nan,
) -> StateEvidence:
    """``waiting``: requests waiting in the median bucket (NaN: no queue reported); ``growth``: requests/s
    the queues grew by; ``measured``: what each phase delivered while seen saturated (None: never);
    ``workers``: the pool's serving workers, of which each may hold ``backlog_per_worker`` without a
    backlog; ``colocated_at_limit``: a colocated pool's workers, which serve both phases, seen saturated;
    ``queued``: the share of windows with a request waiting (:func:`queued_share`; NaN: unknown);
    ``peak_waiting``: requests waiting in the pool's 90th-percentile bucket (NaN: not asked), said beside a
    demand-limited state where the pool fell behind at its peaks."""
    if not math.isfinite(waiting):
        return StateEvidence(
            PoolState.UNKNOWN, "no engine reports a queue: whether it served its demand is unknown"
        )
    slack = max(1.0, workers * backlog_per_worker)
    peaks = _behind_at_peaks(queued, peak_waiting, slack)
    if waiting < slack:
        per = f" ({waiting / workers:,.2f} per serving worker)" if workers > 1 else ""
        return StateEvidence(
            PoolState.DEMAND_LIMITED,
            f"{waiting:,.1f} requests waiting in the median bucket{per}: it served what arrived{peaks}",
        )
    if math.isfinite(queued) and queued < SUSTAINED:
        return StateEvidence(
            PoolState.DEMAND_LIMITED,
            f"{waiting:,.1f} requests waiting in the median bucket, but in only {queued:.0%} of its windows: "
            f"bursts it clears between them, so it served what arrived{peaks}",
        )
    at_limit = [name for name, v in zip(("prefill", "decode"), measured, strict=True) if v is not None]
    growing = math.isfinite(growth) and growth >= GROWING
    if at_limit or colocated_at_limit or growing:
        why = []
        if at_limit:
            phases = "phases" if len(at_limit) > 1 else "phase"
            why.append(f"its {' and '.join(at_limit)} {phases} seen saturated")
        if colocated_at_limit:
            why.append("its colocated workers seen saturated")
        if growing:
            why.append(f"its queues growing by {growth:,.2f} requests/s")
        return StateEvidence(
            PoolState.SUPPLY_LIMITED,
            f"{waiting:,.1f} requests waiting in the median bucket, {' and '.join(why)}",
        )
    return StateEvidence(
        PoolState.UNKNOWN,
        f"{waiting:,.1f} requests waiting in the median bucket, but no phase seen at its limit and the "
        "queues not growing: a limit the GPUs do not explain (admission, router)",
    )


def _behind_at_peaks(queued: float, peak_waiting: float, slack: float) -> str:
    """What a demand-limited state leaves unsaid where the pool fell behind at its peaks: the share of its
    windows with a request waiting and the queue of its 90th-percentile bucket (`diurnal-prompt-shift`
    has a demand-limited segment whose queue held 32,000 requests in its 90th-percentile bucket)."""
    if not (math.isfinite(queued) and math.isfinite(peak_waiting)):
        return ""
    if queued < PEAK_SHARE or peak_waiting < slack:
        return ""
    return (
        f"; but at its peaks it fell behind: requests waited in {queued:.0%} of its windows, "
        f"{peak_waiting:,.0f} of them in its 90th-percentile bucket"
    )


def queued_requests(grid: WorkerGrid, rows: tuple[int, ...], first: int, last: int, quantile: float) -> float:
    """The pool's requests waiting (summed over its workers) at the ``quantile`` of buckets [first, last);
    NaN where no worker reports a queue."""
    queue = grid.waiting[np.array(rows, dtype=np.int64), first:last]
    reported = np.isfinite(queue).any(axis=0)
    if not reported.any():
        return math.nan
    return float(np.quantile(np.nansum(queue[:, reported], axis=0), quantile))


def queue_growth(grid: WorkerGrid, rows: tuple[int, ...], first: int, last: int) -> float:
    """Requests/s by which the pool's queues (summed over its workers) grew over buckets [first, last):
    the least-squares slope over time, 0 where they shrank or held; NaN where no worker reports a queue or
    fewer than 3 buckets do."""
    queue = grid.waiting[np.array(rows, dtype=np.int64), first:last]
    reported = np.isfinite(queue).any(axis=0)
    if reported.sum() < 3:
        return math.nan
    t = grid.bucket_start[first:last][reported].astype(np.float64)
    total = np.nansum(queue[:, reported], axis=0)
    slope = float(np.polyfit(t - t[0], total, 1)[0])
    return max(0.0, slope)


def queued_share(grid: WorkerGrid, rows: tuple[int, ...], first: int, last: int) -> float:
    """The share of the windows in buckets [first, last) in which a request waited somewhere in the pool:
    per bucket, its most-queued worker's share (a backlog on the decode workers alone is the pool's, whatever
    the idle prefill workers show; where workers queue at different moments, a lower bound), averaged over
    the buckets that say. NaN where none says (no queue reported, or rolled up before migration 0011)."""
    share = grid.queued_share[np.array(rows, dtype=np.int64), first:last]
    known = np.isfinite(share).any(axis=0)
    if not known.any():
        return math.nan
    return float(np.nanmax(share[:, known], axis=0).mean())
