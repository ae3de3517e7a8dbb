"""The analyzer's summary: fleet totals, one entry per pool (with its segments) and one per worker, as JSON.

:func:`build_summary` returns a typed :class:`~analyzer.results.summary.Summary`. Unknown is ``None``, never
0, and workers nobody could judge are counted by reason. Reasoning: docs/analyzer.md#summarize
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from analyzer.findings.evidence import activity_evidence, dominant_bottleneck, evidence_label
from analyzer.findings.misplaced_worker import KINDS as MISPLACEMENT_KINDS
from analyzer.findings.registry import FindingParams
from analyzer.model.efficiency import CALIBRATION_ACCURACY, CALIBRATION_PROVENANCE
from analyzer.pool_summaries import devices_of, grid_role, pool_summary
from analyzer.pools.analysis import PoolAnalysis
from analyzer.pools.outcomes import OutcomeParams
from analyzer.pools.pool import Inventory, Pool
from analyzer.pools.saturation import SaturationParams, worker_saturation
from analyzer.pools.split_search import PlacementResult
from analyzer.results.changes import ChangeOutcome
from analyzer.results.summary import (
    SUMMARY_VERSION,
    ModelInfo,
    PoolSummary,
    Summary,
    WorkerSummary,
    iso,
)
from analyzer.results.totals import DeviceTotals, changes_record, fleet_totals, num
from analyzer.telemetry.bottleneck import BottleneckGrid, Reason
from analyzer.telemetry.grid import WorkerGrid
from fleet.catalog import Catalog
from fleet.contract import Bottleneck, Finding, FindingStatus, Role

# Why a worker could not be judged (the keys of the fleet's ``unjudged_reasons``).
NO_GPUS = "no GPUs attributed to the worker"
NOT_SERVING = "not serving (no engine samples at the end of the range)"
GPU_LOST = "its GPUs are reported lost"
NO_PROFILING = (
    "no profiling fields (utilization only: nvml-basic or dcgm-exporter without DCGM_FI_PROF_*), and no "
    "memory-copy utilisation to weigh"
)
UTILISATION_UNDECIDED = (
    "no profiling fields, and the utilisation counters cannot decide: busy, with the memory controller busy "
    "only part of the time (busy-time says how often a unit ran, not which limited throughput)"
)
# How a judged worker's verdict was reached (the keys of the fleet's ``judged_by_evidence``): "profiling",
# "utilisation" (busy-time counters only: weaker) or "engine" (the engine's KV and queue counters).
NO_TELEMETRY = "GPU telemetry missing"
NO_PLACEMENT = (
    "its placement could not be weighed (the pool's capacity is unknown, or its GPU model lacks catalog "
    "figures: see the pool's notes)"
)
UNKNOWN_ROLE = "unknown role"
UNCLASSIFIED = "bottleneck not classified yet (too few windows)"


def unjudged_reason(
    worker: str,
    row: int,
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    bottleneck: Bottleneck,
    attributed: set[str],
    first: int,
    last: int,
) -> str | None:
    """Why a worker cannot be judged (None when its bottleneck was measured and its role is known)."""
    if bottleneck is Bottleneck.UNKNOWN and not (grid.engine_s[row, first:last] > 0).any():
        return NOT_SERVING  # a pod replaced or removed: its GPUs are another worker's now
    if worker not in attributed:
        return NO_GPUS
    if bottleneck is Bottleneck.UNKNOWN:
        reasons: Counter[int] = Counter()
        if worker in bottlenecks.workers:
            b = bottlenecks.workers.index(worker)
            unknown = bottlenecks.stable[b, first:last] == 0
            reasons.update(int(r) for r in bottlenecks.reason[b, first:last][unknown])
        if not reasons:
            return NO_TELEMETRY
        code = Reason(reasons.most_common(1)[0][0])
        if code is Reason.GPU_LOST:
            return GPU_LOST
        if code is Reason.UTILIZATION_ONLY:
            return NO_PROFILING
        if code is Reason.UTILISATION_UNDECIDED:
            return UTILISATION_UNDECIDED
        if code is Reason.NO_TELEMETRY:
            return NO_TELEMETRY
        return UNCLASSIFIED
    if grid_role(grid, row) is Role.UNKNOWN:
        return UNKNOWN_ROLE
    return None


def _weighed(pool: Pool, row: int, placements: Mapping[str, PlacementResult]) -> bool:
    """Whether the best-placement search weighed this worker: its pool has a placement analysis and the
    worker sits on a catalogued GPU model (an unknown one, or an unsized worker, is kept where it is)."""
    return pool.key in placements and row not in pool.unsized and pool.sku_of(row).known


# worker -> its loss per figure: "lost_tokens_per_s", "lost_output_tokens_per_s", "lost_requests_per_s"
_WorkerLosses = dict[str, dict[str, float]]


def _finding_losses(
    open_findings: Sequence[Finding], placements: Mapping[str, PlacementResult]
) -> tuple[dict[str, list[str]], _WorkerLosses]:
    """The misplaced workers (worker -> the kinds of its open misplacement findings) and the loss those
    findings estimate, summed per worker."""
    misplaced: dict[str, list[str]] = {}
    lost: _WorkerLosses = {}

    def add(worker: str, values: dict[str, float | None]) -> None:
        mine = lost.setdefault(worker, {})
        for key, value in values.items():
            if value is not None and math.isfinite(value):
                mine[key] = mine.get(key, 0.0) + value

    for f in open_findings:
        if f.worker_id is not None and f.kind in MISPLACEMENT_KINDS:
            misplaced.setdefault(f.worker_id, []).append(f.kind.value)
            pl = placements.get(f.pool or "")
            share = pl.osl / (pl.isl + pl.osl) if pl and pl.isl + pl.osl > 0 else math.nan
            requests = 1.0 / (pl.isl + pl.osl) if pl and pl.isl + pl.osl > 0 else math.nan
            total = f.lost_tokens_per_s  # None: the finding estimates no loss (add skips it)
            add(
                f.worker_id,
                {
                    "lost_tokens_per_s": total,
                    # The finding's own figures where the analyzer filled them, else its tokens at the mix.
                    "lost_output_tokens_per_s": f.lost_output_tokens_per_s
                    if f.lost_output_tokens_per_s is not None
                    else (None if total is None else total * share),
                    "lost_requests_per_s": f.lost_requests_per_s
                    if f.lost_requests_per_s is not None
                    else (None if total is None else total * requests),
                },
            )
    return misplaced, lost


def _add_ratio_change_losses(
    analyses: Sequence[PoolAnalysis],
    grid: WorkerGrid,
    misplaced: Mapping[str, list[str]],
    lost: _WorkerLosses,
) -> None:
    """Lost capacity of ratio changes is attributed to the workers the rebalance flips, too (in ``lost``,
    for the workers no misplacement finding names)."""
    for a in analyses:
        latest = a.latest
        if latest is None or latest.placement is None:
            continue
        pl = latest.placement
        for change in pl.changes:
            worker = grid.workers[change.row]
            if worker not in misplaced:
                lost[worker] = {
                    "lost_tokens_per_s": pl.lost_tokens_per_s * change.share,
                    "lost_output_tokens_per_s": pl.lost_output_tokens() * change.share,
                    "lost_requests_per_s": pl.lost_requests() * change.share,
                }


def _worker_summary(
    pool: Pool,
    row: int,
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    *,
    span: tuple[int, int],
    first: int,
    last: int,
    attributed: set[str],
    caps: Mapping[int, int],
    misplaced: Mapping[str, list[str]],
    lost: _WorkerLosses,
    placements: Mapping[str, PlacementResult],
    saturation_params: SaturationParams | None,
) -> WorkerSummary:
    """One worker's entry: its verdict over the last buckets ``first:last``, its saturation over the pool's
    latest segment (``span``), and the loss attributed to it."""
    saturation = worker_saturation(
        grid, row, grid_role(grid, row), *span, params=saturation_params, caps=caps
    )
    worker = grid.workers[row]
    bottleneck = dominant_bottleneck(bottlenecks, worker, first, last)
    # A misplacement finding is only made on a measured bottleneck (analyzer.findings.misplacement):
    # its worker was judged. Otherwise a worker nobody could judge is neither misplaced nor well
    # placed.
    reason = (
        None
        if worker in misplaced
        else unjudged_reason(worker, row, grid, bottlenecks, bottleneck, attributed, first, last)
    )
    if reason is None and worker not in misplaced and not _weighed(pool, row, placements):
        reason = NO_PLACEMENT  # a measured bottleneck alone does not make a worker well placed
    level = activity_evidence(bottlenecks, worker, first, last)
    is_misplaced: bool | None = True if worker in misplaced else (None if reason is not None else False)
    mine = lost.get(worker, {})
    # A figure attributed to the worker where one was; else 0 for a judged, well placed worker (it
    # loses nothing) and None for one nobody could judge or a misplaced one whose finding estimated
    # no figure (unknown, never 0).
    nothing: float | None = 0.0 if reason is None and worker not in misplaced else None
    return WorkerSummary(
        worker_id=worker,
        pool=pool.key,
        cluster=pool.cluster,
        sku=pool.sku_of(row).key,
        role=grid_role(grid, row),
        model=pool.model_id,
        bottleneck=bottleneck,
        activity_evidence=evidence_label(level) if reason is None else None,
        misplaced=is_misplaced,
        unjudged_reason=reason,
        kinds=misplaced.get(worker, []),
        lost_output_tokens_per_s=num(mine.get("lost_output_tokens_per_s", nothing)),
        lost_requests_per_s=num(mine.get("lost_requests_per_s", nothing), 4),
        lost_tokens_per_s=num(mine.get("lost_tokens_per_s", nothing)),
        saturation=saturation.state,
        saturated_share=num(saturation.share, 3),
        saturation_evidence=saturation.reason,
    )


def _worker_summaries(
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    pools: Sequence[Pool],
    analyses: Sequence[PoolAnalysis],
    inventory: Inventory,
    open_findings: Sequence[Finding],
    saturation_params: SaturationParams | None,
) -> list[WorkerSummary]:
    """One entry per pool member, pool by pool; verdicts are taken over the last three buckets."""
    placements = {a.pool.key: a.latest.placement for a in analyses if a.latest and a.latest.placement}
    misplaced, lost = _finding_losses(open_findings, placements)
    _add_ratio_change_losses(analyses, grid, misplaced, lost)
    n = grid.shape[1]
    first = max(0, n - 3)
    attributed = set(inventory.gpu_worker().values())
    latest_range = {a.pool.key: (a.latest.first, a.latest.last) for a in analyses if a.latest is not None}
    caps = {row: cap for a in analyses for row, cap in a.calibration.caps_reported.items()}
    return [
        _worker_summary(
            pool,
            row,
            grid,
            bottlenecks,
            span=latest_range.get(pool.key, (0, n)),
            first=first,
            last=n,
            attributed=attributed,
            caps=caps,
            misplaced=misplaced,
            lost=lost,
            placements=placements,
            saturation_params=saturation_params,
        )
        for pool in pools
        for row in pool.members
    ]


def _device_totals(inventory: Inventory, catalog: Catalog | None) -> DeviceTotals:
    devices = devices_of(inventory, catalog)
    return DeviceTotals(
        gpus=devices.devices,
        whole_gpus=devices.whole_gpus,
        mig_instances=devices.mig_instances,
        mig_parent_gpus=devices.mig_parent_gpus,
        physical_gpus=devices.physical_gpus,
        physical_gpus_reason=devices.physical_reason,
        unattributed_gpus=len(inventory.unattributed_gpus()),
    )


def _model_info(pool_rows: Sequence[PoolSummary]) -> ModelInfo:
    """The performance model's provenance and held-out error, and how its past recommendations fared."""
    scored, realized_error = changes_record(pool_rows)
    return ModelInfo(
        calibration=CALIBRATION_PROVENANCE.get("fitted_at", ""),
        heldout_ratio_error_p90=CALIBRATION_ACCURACY.heldout_ratio_p90,
        heldout_absolute_error_p90=CALIBRATION_ACCURACY.heldout_absolute_p90,
        changes_scored=scored,
        realized_error_median=realized_error,
    )


def build_summary(
    *,
    start: float,
    end: float,
    bucket_s: float,
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    pools: Sequence[Pool],
    analyses: Sequence[PoolAnalysis],
    findings: Sequence[Finding],
    inventory: Inventory,
    extra_warnings: Sequence[str] = (),
    catalog: Catalog | None = None,
    finding_params: FindingParams | None = None,
    outcome_params: OutcomeParams | None = None,
    extra_changes: Mapping[str, Sequence[ChangeOutcome]] | None = None,
    saturation_params: SaturationParams | None = None,
) -> Summary:
    pool_rows = [
        pool_summary(
            a,
            findings,
            grid,
            inventory,
            catalog,
            finding_params,
            outcome_params,
            (extra_changes or {}).get(a.pool.key, ()),
        )
        for a in analyses
    ]
    open_findings = [f for f in findings if f.status is FindingStatus.OPEN]
    workers = _worker_summaries(
        grid, bottlenecks, pools, analyses, inventory, open_findings, saturation_params
    )
    kinds = Counter(f.kind.value for f in open_findings)
    warnings = [f"{row.pool}: {note}" for row in pool_rows for note in row.notes]
    warnings += [str(w) for w in extra_warnings]
    return Summary(
        version=SUMMARY_VERSION,
        from_=iso(start),
        to=iso(end),
        bucket_s=bucket_s,
        fleet=fleet_totals(pool_rows, workers, _device_totals(inventory, catalog), kinds),
        model=_model_info(pool_rows),
        warnings=warnings,
        pools=pool_rows,
        workers=workers,
    )


def add_warnings(summary: dict[str, Any], warnings: Sequence[str]) -> dict[str, Any]:
    """The summary's JSON with ``warnings`` appended to its list (for notes a caller learns after the run;
    a typed summary has :meth:`Summary.with_warnings <analyzer.results.summary.Summary.with_warnings>`)."""
    summary["warnings"] = [*summary.get("warnings", []), *(str(w) for w in warnings)]
    return summary


__all__ = [
    "SUMMARY_VERSION",
    "Summary",
    "add_warnings",
    "build_summary",
    "iso",
    "num",
    "unjudged_reason",
]
