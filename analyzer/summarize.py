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
from analyzer.findings.loss import range_to_zero
from analyzer.findings.misplaced_worker import KINDS as MISPLACEMENT_KINDS
from analyzer.findings.recommend import recommended_ratio
from analyzer.findings.registry import FindingParams, rules_of_thumb
from analyzer.model.efficiency import CALIBRATION_ACCURACY, CALIBRATION_PROVENANCE
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from analyzer.pools.attainment import targets_summary
from analyzer.pools.loss_basis import loss_basis
from analyzer.pools.outcomes import OutcomeParams, change_outcomes
from analyzer.pools.pool import DeviceCounts, Inventory, Pool, device_counts
from analyzer.pools.pool_state import NOT_MODELLED, PoolState
from analyzer.pools.saturation import SaturationParams, worker_saturation
from analyzer.pools.split_search import PlacementResult
from analyzer.results.changes import ChangeOutcome
from analyzer.results.summary import (
    SUMMARY_VERSION,
    UNKNOWN_LOSS,
    LossBound,
    LossUnit,
    LostCapacity,
    ModelInfo,
    PoolSummary,
    Routing,
    RuleCheck,
    SegmentSummary,
    Summary,
    Traffic,
    TrafficDrift,
    WorkerSummary,
    iso,
    lost_capacity,
)
from analyzer.results.totals import (
    LOSS_DIGITS,
    PRICE_CATALOG,
    PRICE_NOT_ANALYSED,
    PRICE_NOT_SET,
    DeviceTotals,
    changes_record,
    fleet_totals,
    num,
)
from analyzer.telemetry.bottleneck import BottleneckGrid, Reason
from analyzer.telemetry.frames import ROLES
from analyzer.telemetry.grid import WorkerGrid
from fleet.catalog import Catalog
from fleet.contract import Bottleneck, Finding, FindingKind, FindingStatus, Role

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


def grid_role(grid: WorkerGrid, row: int) -> Role:
    """The role a worker reported last in the range."""
    seen = grid.role[row][grid.role[row] >= 0]
    return ROLES[int(seen[-1])] if seen.size else Role.UNKNOWN


def _figure(pl: PlacementResult, unit: LossUnit, bound: LossBound) -> float:
    """One figure of the placement's loss (NaN where its mix is unknown)."""
    b = "" if bound == "value" else bound
    if unit == "output_tokens_per_s":
        return pl.lost_output_tokens(b)
    if unit == "requests_per_s":
        return pl.lost_requests(b)
    return {"": pl.lost_tokens_per_s, "low": pl.lost_low, "high": pl.lost_high}[b]


def _lost(pl: PlacementResult | None) -> LostCapacity:
    """The placement's loss in every unit (unknown without a placement: the loss was not estimated)."""
    if pl is None:
        return UNKNOWN_LOSS
    return lost_capacity(lambda unit, bound: num(_figure(pl, unit, bound), LOSS_DIGITS[unit]))


def _basis(pl: PlacementResult | None) -> dict[str, str | None]:
    """The summary's ``loss_basis`` and ``loss_basis_detail`` of a placement (null: no loss estimated)."""
    basis = loss_basis(pl)
    return {
        "loss_basis": basis.source if basis else None,
        "loss_basis_detail": basis.detail if basis else None,
    }


def _lost_mean(analysis: PoolAnalysis) -> LostCapacity:
    """Time-weighted means over the segments (0 for a segment without a placement; unknown when none has
    one)."""
    total = sum(s.hours for s in analysis.segments)
    placed = [(s.hours, s.placement) for s in analysis.segments if s.placement is not None]
    if total <= 0 or not placed:
        return UNKNOWN_LOSS

    def mean(unit: LossUnit, bound: LossBound) -> float | None:
        return num(sum(hours * _figure(pl, unit, bound) for hours, pl in placed) / total, LOSS_DIGITS[unit])

    return lost_capacity(mean)


def capacity_of(segment: SegmentAnalysis | None) -> tuple[float | None, str | None]:
    """The segment's current capacity (tokens/s) and, where it is unknown, why."""
    if segment is None:
        return None, "no telemetry in the range"
    if segment.placement is not None:
        return num(segment.capacity_tokens_per_s), None
    if segment.capacity_tokens_per_s > 0 and math.isfinite(segment.capacity_tokens_per_s):
        return num(segment.capacity_tokens_per_s), None
    if not segment.capacities:
        return None, "mean prompt and output lengths unknown"
    if not segment.roles:
        return None, "no worker serving"
    if segment.notes:
        return None, "; ".join(segment.notes)
    return None, "the GPU or model lacks catalog figures and telemetry did not measure it"


def _lost_reason(analysis: PoolAnalysis, segment: SegmentAnalysis | None) -> str | None:
    if segment is not None and segment.placement is not None:
        return None
    if analysis.serving == "colocated":
        return "colocated pool: no placement to search"
    if analysis.serving == "unknown":
        return "roles do not show a disaggregated pool: no placement analysis"
    if segment is None:
        return "no telemetry in the range"
    return "; ".join(segment.notes) or "no placement analysis"


def _placement_counts(
    pool: Pool, segment: SegmentAnalysis, plan: Sequence[int] | None
) -> dict[str, dict[str, int]]:
    """{sku: {role: workers}} now (``plan`` None) or under a plan (prefill count per group)."""
    out: dict[str, dict[str, int]] = {}
    for g, group in enumerate(pool.groups):
        serving = [row for row in group.members if row in segment.roles]
        sku = out.setdefault(group.sku.key, {})
        if plan is None:
            for row in serving:
                sku[segment.roles[row]] = sku.get(segment.roles[row], 0) + 1
        else:
            prefill = plan[g]
            others = len([r for r in serving if segment.roles[r] in ("prefill", "decode")])
            sku["prefill"] = sku.get("prefill", 0) + prefill
            sku["decode"] = sku.get("decode", 0) + others - prefill
    return out


def _segment_summary(pool: Pool, s: SegmentAnalysis) -> SegmentSummary:
    pl = s.placement
    capacity, capacity_reason = capacity_of(s)
    return SegmentSummary(
        start=iso(s.start),
        end=iso(s.end),
        mean_prompt_tokens=num(s.mix.isl),
        mean_output_tokens=num(s.mix.osl),
        requests_per_s=num(s.mix.request_rate, 3),
        demand_output_tokens_per_s=num(s.mix.output_rate),
        demand_tokens_per_s=num(s.mix.tokens_rate),
        undelivered_requests_per_s=num(s.backlog_growth, 3),
        lost=_lost(pl),
        loss_range_to_zero=range_to_zero(pl),
        **_basis(pl),
        capacity_tokens_per_s=capacity,
        capacity_reason=capacity_reason,
        best_tokens_per_s=num(pl.best.tokens_per_s) if pl else capacity,
        utilisation=num(pl.utilisation, 4) if pl else None,
        **_state(s),
        bound=pl.current.bound if pl else None,
        routing=(
            Routing(
                prefill="round-robin" if pl.routing.prefill_equal else "load-aware",
                decode="round-robin" if pl.routing.decode_equal else "load-aware",
            )
            if pl
            else None
        ),
        current_placement=_placement_counts(pool, s, None),
        best_placement=_placement_counts(pool, s, pl.best.prefill) if pl else None,
        notes=list(s.notes),
    )


def _state(segment: SegmentAnalysis | None) -> dict[str, Any]:
    """The segment's pool state, and ``demand_limited`` from it (null where the state is unknown). A
    colocated pool has no placement but its state from its queues."""
    found = NOT_MODELLED if segment is None else segment.state
    state = found.state
    return {
        "demand_limited": None if state is PoolState.UNKNOWN else state is PoolState.DEMAND_LIMITED,
        "pool_state": state.value,
        "pool_state_evidence": found.evidence,
    }


def _price(pl: PlacementResult | None) -> str:
    if pl is None:
        return PRICE_NOT_ANALYSED
    return PRICE_CATALOG if pl.weekly_cost_usd is not None else PRICE_NOT_SET


def devices_of(inventory: Inventory, catalog: Catalog | None, uuids: set[str] | None = None) -> DeviceCounts:
    """Device counts (:func:`analyzer.pools.pool.device_counts`); without a catalog a device is a MIG instance
    only where it names its parent or profile."""
    if catalog is not None:
        return device_counts(inventory, catalog, uuids)
    by_uuid = {g.gpu_uuid: g for g in inventory.gpus}
    wanted = (
        uuids if uuids is not None else set(by_uuid) | {u for w in inventory.workers for u in w.gpu_uuids}
    )
    mig = [
        by_uuid[u] for u in wanted if u in by_uuid and (by_uuid[u].parent_gpu_uuid or by_uuid[u].mig_profile)
    ]
    parents = {g.parent_gpu_uuid for g in mig if g.parent_gpu_uuid}
    orphans = sum(1 for g in mig if not g.parent_gpu_uuid)
    return DeviceCounts(len(wanted), len(wanted) - len(mig), len(mig), len(parents), orphans)


def _pool_summary(
    analysis: PoolAnalysis,
    findings: Sequence[Finding],
    grid: WorkerGrid,
    inventory: Inventory,
    catalog: Catalog | None = None,
    finding_params: FindingParams | None = None,
    outcome_params: OutcomeParams | None = None,
    extra_changes: Sequence[ChangeOutcome] = (),
) -> PoolSummary:
    pool = analysis.pool
    latest = analysis.latest
    pl = latest.placement if latest else None
    ratio = recommended_ratio(analysis, latest) if latest else None
    mine = [f for f in findings if f.pool == pool.key and f.status is FindingStatus.OPEN]
    counts: Counter[tuple[str, str]] = Counter()
    for row in pool.members:
        counts[(pool.sku_of(row).key, str(grid_role(grid, row)))] += 1
    by_sku: dict[str, dict[str, int]] = {}
    for (sku, role), n in sorted(counts.items()):
        by_sku.setdefault(sku, {})[role] = n
    capacity, capacity_reason = capacity_of(latest)
    members = {grid.workers[row] for row in pool.members}
    devices = devices_of(
        inventory, catalog, {u for u, worker in inventory.gpu_worker().items() if worker in members}
    )
    return PoolSummary(
        pool=pool.key,
        cluster=pool.cluster,
        deployment=pool.deployment,
        model=pool.model_id,
        model_key=pool.arch.key if pool.arch else None,
        precision=str(pool.precision) if pool.precision else None,
        serving=analysis.serving,
        gpus=sum(g.gpus for g in pool.groups),
        whole_gpus=devices.whole_gpus,
        mig_instances=devices.mig_instances,
        physical_gpus=devices.physical_gpus,
        physical_gpus_reason=devices.physical_reason,
        workers=len(pool.members),
        workers_by_sku_role=by_sku,
        lost=_lost(pl),
        lost_reason=_lost_reason(analysis, latest),
        loss_range_to_zero=range_to_zero(pl),
        **_basis(pl),
        lost_mean=_lost_mean(analysis),
        capacity_tokens_per_s=capacity,
        capacity_reason=capacity_reason,
        best_tokens_per_s=num(pl.best.tokens_per_s) if pl else capacity,
        demand_output_tokens_per_s=num(latest.mix.output_rate) if latest else None,
        demand_tokens_per_s=num(latest.mix.tokens_rate) if latest else None,
        utilisation=num(pl.utilisation, 4) if pl else None,
        **_state(latest),
        bound=pl.current.bound if pl else None,
        weekly_cost_usd=num(pl.weekly_cost_usd, 2) if pl else None,
        idle_cost_per_week_usd=num(pl.idle_cost_per_week_usd, 2) if pl else None,
        misplacement_cost_per_week_usd=num(pl.misplacement_cost_per_week_usd, 2) if pl else None,
        price=_price(pl),
        prefill_decode_ratio=num(ratio.ratio_now, 4) if ratio else None,
        recommended_prefill_decode_ratio=num(ratio.ratio_recommended, 4) if ratio else None,
        prefill_decode_now=ratio.now if ratio else None,
        prefill_decode_recommended=ratio.recommended if ratio else None,
        peak_requests_per_s=num(ratio.peak_requests_per_s, 3) if ratio else None,
        recommended=(dict(ratio.per_sku) if ratio else None),
        ratio_drift=any(f.kind is FindingKind.POOL_RATIO_DRIFT for f in mine),
        traffic=Traffic(
            prompt_tokens_per_s=num(latest.mix.prompt_rate) if latest else None,
            output_tokens_per_s=num(latest.mix.output_rate) if latest else None,
            requests_per_s=num(latest.mix.request_rate, 3) if latest else None,
            mean_prompt_tokens=num(latest.mix.isl) if latest else None,
            mean_output_tokens=num(latest.mix.osl) if latest else None,
            requests_counted=analysis.traffic.requests_counted,
        ),
        checks=[
            RuleCheck(check=c.name, value=c.value, threshold=c.threshold, passed=c.passed, detail=c.detail)
            for c in (rules_of_thumb(analysis, latest, finding_params) if latest else [])
        ],
        calibration=analysis.calibration.as_dict(),
        drift_events=[
            TrafficDrift(
                start=iso(float(grid.bucket_start[cp.index])),
                description=cp.describe(),
                magnitude=num(cp.magnitude, 4),
            )
            for cp in analysis.change_points
        ],
        segments=[_segment_summary(pool, s) for s in analysis.segments],
        notes=list(analysis.notes),
        changes=sorted(
            [
                *change_outcomes(
                    analysis.segments,
                    grid.workers,
                    outcome_params,
                    {w.worker_id: frozenset(w.gpu_uuids) for w in inventory.workers},
                ),
                *extra_changes,
            ],
            key=lambda c: c.at,
        ),
        targets=targets_summary(analysis.targets, grid, pool.members),
    )


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
        _pool_summary(
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
    scored, realized_error = changes_record(pool_rows)
    open_findings = [f for f in findings if f.status is FindingStatus.OPEN]
    placements = {a.pool.key: a.latest.placement for a in analyses if a.latest and a.latest.placement}
    misplaced: dict[str, list[str]] = {}
    lost: dict[str, dict[str, float]] = {}

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
    # Lost capacity of ratio changes is attributed to the workers the rebalance flips, too.
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
    n = grid.shape[1]
    first = max(0, n - 3)
    attributed = set(inventory.gpu_worker().values())
    latest_range = {a.pool.key: (a.latest.first, a.latest.last) for a in analyses if a.latest is not None}
    caps = {row: cap for a in analyses for row, cap in a.calibration.caps_reported.items()}
    workers = []
    for pool in pools:
        span = latest_range.get(pool.key, (0, n))
        for row in pool.members:
            saturation = worker_saturation(
                grid, row, grid_role(grid, row), *span, params=saturation_params, caps=caps
            )
            worker = grid.workers[row]
            bottleneck = dominant_bottleneck(bottlenecks, worker, first, n)
            # A misplacement finding is only made on a measured bottleneck (analyzer.findings.misplacement):
            # its worker was judged. Otherwise a worker nobody could judge is neither misplaced nor well
            # placed.
            reason = (
                None
                if worker in misplaced
                else unjudged_reason(worker, row, grid, bottlenecks, bottleneck, attributed, first, n)
            )
            if reason is None and worker not in misplaced and not _weighed(pool, row, placements):
                reason = NO_PLACEMENT  # a measured bottleneck alone does not make a worker well placed
            level = activity_evidence(bottlenecks, worker, first, n)
            is_misplaced: bool | None = (
                True if worker in misplaced else (None if reason is not None else False)
            )
            mine = lost.get(worker, {})
            # A figure attributed to the worker where one was; else 0 for a judged, well placed worker (it
            # loses nothing) and None for one nobody could judge or a misplaced one whose finding estimated
            # no figure (unknown, never 0).
            nothing: float | None = 0.0 if reason is None and worker not in misplaced else None
            workers.append(
                WorkerSummary(
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
            )

    kinds = Counter(f.kind.value for f in open_findings)
    devices = devices_of(inventory, catalog)
    warnings = [f"{row.pool}: {note}" for row in pool_rows for note in row.notes]
    warnings += [str(w) for w in extra_warnings]
    totals = DeviceTotals(
        gpus=devices.devices,
        whole_gpus=devices.whole_gpus,
        mig_instances=devices.mig_instances,
        mig_parent_gpus=devices.mig_parent_gpus,
        physical_gpus=devices.physical_gpus,
        physical_gpus_reason=devices.physical_reason,
        unattributed_gpus=len(inventory.unattributed_gpus()),
    )
    return Summary(
        version=SUMMARY_VERSION,
        from_=iso(start),
        to=iso(end),
        bucket_s=bucket_s,
        fleet=fleet_totals(pool_rows, workers, totals, kinds),
        model=ModelInfo(
            calibration=CALIBRATION_PROVENANCE.get("fitted_at", ""),
            heldout_ratio_error_p90=CALIBRATION_ACCURACY.heldout_ratio_p90,
            heldout_absolute_error_p90=CALIBRATION_ACCURACY.heldout_absolute_p90,
            changes_scored=scored,
            realized_error_median=realized_error,
        ),
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
    "capacity_of",
    "grid_role",
    "iso",
    "num",
    "unjudged_reason",
]
