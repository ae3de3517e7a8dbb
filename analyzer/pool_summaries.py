"""One summary entry per pool, with its segments: its loss, capacity, state, placement and recommended ratio.

Apart from :mod:`analyzer.summarize` so that the fleet-wide summary reads as totals over these entries.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from analyzer.findings.loss import range_to_zero
from analyzer.findings.recommend import recommended_ratio
from analyzer.findings.registry import FindingParams, rules_of_thumb
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from analyzer.pools.attainment import targets_summary
from analyzer.pools.loss_basis import loss_basis
from analyzer.pools.outcomes import OutcomeParams, change_outcomes
from analyzer.pools.pool import DeviceCounts, Inventory, Pool, device_counts
from analyzer.pools.pool_state import NOT_MODELLED, PoolState
from analyzer.pools.split_search import PlacementResult
from analyzer.results.changes import ChangeOutcome
from analyzer.results.summary import (
    UNKNOWN_LOSS,
    LossBound,
    LossUnit,
    LostCapacity,
    PoolSummary,
    Routing,
    RuleCheck,
    SegmentSummary,
    Traffic,
    TrafficDrift,
    iso,
    lost_capacity,
)
from analyzer.results.totals import LOSS_DIGITS, PRICE_CATALOG, PRICE_NOT_ANALYSED, PRICE_NOT_SET, num
from analyzer.telemetry.frames import ROLES
from analyzer.telemetry.grid import WorkerGrid
from fleet.catalog import Catalog
from fleet.contract import Finding, FindingKind, FindingStatus, Role


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
    """Why the pool's loss is unknown (None where the segment has a placement that estimated it)."""
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
    """One segment of the pool's range: one traffic mix and one set of available workers."""
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
        best_tokens_per_s=num(pl.counted.tokens_per_s) if pl else capacity,
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


def pool_summary(
    analysis: PoolAnalysis,
    findings: Sequence[Finding],
    grid: WorkerGrid,
    inventory: Inventory,
    catalog: Catalog | None = None,
    finding_params: FindingParams | None = None,
    outcome_params: OutcomeParams | None = None,
    extra_changes: Sequence[ChangeOutcome] = (),
) -> PoolSummary:
    """The pool's entry: its latest segment's figures at the top level, every segment under ``segments``."""
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
        best_tokens_per_s=num(pl.counted.tokens_per_s) if pl else capacity,
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


__all__ = ["capacity_of", "devices_of", "grid_role", "pool_summary"]
