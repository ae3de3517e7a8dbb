"""Measured attainment of a pool's latency targets: how much of its serving time met them.

Each engine reports its window's 90th-percentile TTFT, TPOT and end-to-end latency (from its histograms,
``collector.engines``); the grid holds their mean per worker and bucket. A target is met in a worker-bucket
when that p90 is within it. Attainment is the share of the measured worker-buckets, weighted by the seconds
of engine windows in each, that met it:

- TTFT on the workers that compute first tokens: prefill and colocated (``mixed``) workers;
- TPOT on the workers that generate: decode and colocated workers;
- end to end on decode and colocated workers: a prefill engine's requests end with their first token, so
  its end-to-end latency is its TTFT and would pass for the whole request's.

TTFT as a prefill engine measures it leaves out the KV transfer to the decode worker and that worker's first
step (Dynamo's frontend measures what the client sees); the figure errs on the short side.

Where no such worker reports the quantile (an engine without the histogram, a collector or simulator that
predates the field) attainment is unknown, with the reason, never 0 or 1. A p90 averaged over a bucket's
windows is not the bucket's own p90: attainment says how often the windows' tails met the target, which is
what an SLO on p90 latency per window asks. Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from analyzer.results.summary import LatencyTargets, TargetAttainment
from analyzer.telemetry.frames import ROLES, FloatArray, IntArray
from analyzer.telemetry.grid import WorkerGrid
from analyzer.telemetry.latency_cells import Mask
from fleet import histograms
from fleet.contract import Role
from fleet.targets import PoolTargets

Metric = Literal["ttft", "tpot", "e2e"]
_ROLE = {role: ROLES.index(role) for role in (Role.PREFILL, Role.DECODE, Role.MIXED)}
_WHO = {
    "ttft": (Role.PREFILL, Role.MIXED),
    "tpot": (Role.DECODE, Role.MIXED),
    "e2e": (Role.DECODE, Role.MIXED),
}
_WHO_TEXT = {"ttft": "prefill or colocated", "tpot": "decode or colocated", "e2e": "decode or colocated"}
_NAME = {"ttft": "time to first token", "tpot": "time per output token", "e2e": "end-to-end latency"}
TAIL = 0.9  # the targets are p90s


@dataclass(frozen=True)
class PooledP90:
    """From the histograms merged over the pool's eligible workers (``sum by (le)``): the span's p90, the
    share of its observations in buckets whose merged p90 met the target, how many there were; None, with
    ``pool_reason``, where no worker sent histograms."""

    pool_p90_s: float | None = None
    pool_met_share: float | None = None
    observations: float | None = None
    pool_reason: str | None = None


@dataclass(frozen=True)
class Attainment:
    """One target of a pool against what its engines measured."""

    metric: Metric
    target_s: float
    share: float | None  # of measured serving time whose p90 met the target; None: unknown (``reason``)
    p90_s: float | None  # the measured p90, time-weighted mean over the worker-buckets
    worker_buckets: int  # worker-buckets measured
    reason: str | None = None
    pooled: PooledP90 = PooledP90()

    def as_summary(self) -> TargetAttainment:
        fields = asdict(self)
        pooled = fields.pop("pooled")
        return TargetAttainment(**fields, **pooled)


def _p90(grid: WorkerGrid, metric: Metric) -> FloatArray:
    values: FloatArray = {"ttft": grid.ttft_p90_s, "tpot": grid.tpot_p90_s, "e2e": grid.e2e_p90_s}[metric]
    return values


def attainment_of(
    grid: WorkerGrid, rows: Sequence[int], first: int, last: int, metric: Metric, target_s: float
) -> Attainment:
    """``metric``'s attainment of ``target_s`` on the grid ``rows`` over buckets [first, last)."""
    picked = np.asarray(rows, dtype=np.int64)
    roles = grid.role[picked, first:last]
    eligible = np.isin(roles, [_ROLE[r] for r in _WHO[metric]])
    values = _p90(grid, metric)[picked, first:last]
    weights = grid.engine_s[picked, first:last]
    measured = eligible & ~np.isnan(values) & (weights > 0)
    pooled = _merged_buckets(grid, picked, first, last, metric, target_s, eligible)
    if not measured.any():
        why = (
            f"no {_WHO_TEXT[metric]} worker reported a p90 {_NAME[metric]} in the span (an engine without "
            "the histogram, or a collector or simulator that does not send the quantile)"
        )
        return Attainment(metric, target_s, None, None, 0, why, pooled)
    w, v = weights[measured], values[measured]
    met = float(w[v <= target_s].sum() / w.sum())
    return Attainment(
        metric, target_s, met, float(np.average(v, weights=w)), int(measured.sum()), pooled=pooled
    )


def _merged_buckets(
    grid: WorkerGrid, rows: IntArray, first: int, last: int, metric: Metric, target_s: float, eligible: Mask
) -> PooledP90:
    """The pool's p90 over the span from its eligible workers' merged histograms, and the share of the
    observations in buckets whose merged p90 met ``target_s``; a reason instead where nothing was merged."""
    cells = grid.latency_histograms.get(f"{metric}_histogram")
    hourly = (
        [] if cells is None else [c for c in cells.per_column(rows, first, last, eligible) if c is not None]
    )
    if not hourly:
        return PooledP90(
            pool_reason=f"no {_WHO_TEXT[metric]} worker sent its {_NAME[metric]} histogram in the span"
        )
    span = np.sum(hourly, axis=0)
    total = float(span.sum())
    if total <= 0.0:
        return PooledP90(observations=0.0, pool_reason="the histograms hold no observation in the span")
    met = 0.0
    for counts in hourly:
        p90 = histograms.quantile(TAIL, counts)
        if p90 is not None and p90 <= target_s:
            met += float(counts.sum())
    return PooledP90(histograms.quantile(TAIL, span), met / total, total)


def pool_attainment(
    grid: WorkerGrid, rows: Sequence[int], first: int, last: int, targets: PoolTargets
) -> tuple[Attainment, ...]:
    """Every target the pool has, measured over buckets [first, last) (none: no target)."""
    wanted: tuple[tuple[Metric, float | None], ...] = (
        ("ttft", targets.ttft_p90_s),
        ("tpot", targets.tpot_p90_s),
        ("e2e", targets.e2e_p90_s),
    )
    return tuple(attainment_of(grid, rows, first, last, m, t) for m, t in wanted if t is not None)


def targets_summary(targets: PoolTargets, grid: WorkerGrid, members: Sequence[int]) -> LatencyTargets:
    """The pool's targets and their attainment over the whole span analysed."""
    measured = pool_attainment(grid, members, 0, grid.shape[1], targets)
    return LatencyTargets(
        ttft_p90_s=targets.ttft_p90_s,
        tpot_p90_s=targets.tpot_p90_s,
        e2e_p90_s=targets.e2e_p90_s,
        source=targets.source,
        rule=targets.rule,
        attainment=[a.as_summary() for a in measured],
    )


def worker_target_evidence(
    grid: WorkerGrid, row: int, first: int, last: int, role: Role, targets: PoolTargets
) -> tuple[dict[str, float | str | None], str | None]:
    """A worker's own latency against its pool's target for the phase it serves now (TPOT for decode, TTFT
    for prefill), over buckets [first, last): finding evidence, and a sentence where it missed the target
    in more than a tenth of its serving time (None otherwise: met, unknown, or no target)."""
    metric: Metric = "tpot" if role is Role.DECODE else "ttft"
    target = targets.tpot_p90_s if metric == "tpot" else targets.ttft_p90_s
    if target is None or role not in (Role.DECODE, Role.PREFILL):
        return {}, None
    a = attainment_of(grid, [row], first, last, metric, target)
    evidence: dict[str, float | str | None] = {
        f"{metric}_target_s": target,
        f"{metric}_p90_s": None if a.p90_s is None else round(a.p90_s, 6),
        f"{metric}_target_met_share": None if a.share is None else round(a.share, 4),
    }
    if a.share is None:
        evidence[f"{metric}_target_met_reason"] = a.reason
        return evidence, None
    if a.share >= 0.9 or a.p90_s is None:
        return evidence, None
    name = {"tpot": "TPOT", "ttft": "TTFT"}[metric]
    return evidence, (
        f"Its {name} p90 ({a.p90_s * 1e3:,.0f} ms) met the pool's target ({target * 1e3:,.0f} ms) in "
        f"{a.share:.0%} of its serving time: this placement costs latency as well as throughput."
    )
