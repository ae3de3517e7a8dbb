"""The analyzer end to end, pure: bucketed telemetry + inventory + catalog + params -> summary and findings.

No I/O here: :mod:`analyzer.store_io` reads the store into :class:`AnalysisInput` and writes the result back;
tests and benchmarks build the input from simulated records with :func:`input_from_samples`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from analyzer.bottleneck import BottleneckGrid, BottleneckThresholds, classify
from analyzer.efficiency import CALIBRATION_ACCURACY, CALIBRATION_PROVENANCE
from analyzer.evidence import dominant_bottleneck
from analyzer.frames import ROLES
from analyzer.health import HealthParams, WorkerContext, health_findings
from analyzer.misplacement import MISPLACEMENT_KINDS, FindingParams, placement_findings
from analyzer.pool_analysis import PoolAnalysis, PoolParams, SegmentAnalysis, analyze_pool
from analyzer.pools import Inventory, Pool, build_pools, inventory_from_samples
from analyzer.recommend import recommended_ratio, rules_of_thumb
from analyzer.telemetry import (
    BUCKET_S,
    Columns,
    WorkerGrid,
    aggregate_engine_samples,
    aggregate_gpu_samples,
    bottleneck_frames,
    build_grid,
)
from fleet.catalog import Catalog
from fleet.contract import Finding, FindingKind, FindingStatus, Role, TelemetrySource

SUMMARY_VERSION = 1


@dataclass(frozen=True)
class AnalysisInput:
    """What the analyzer reads: the inventory and per-(GPU or worker, bucket) rows over [start, end)."""

    inventory: Inventory
    gpu_buckets: Columns
    engine_buckets: Columns
    start: float  # epoch seconds
    end: float
    bucket_s: float = BUCKET_S


@dataclass(frozen=True)
class AnalyzerParams:
    pool: PoolParams = field(default_factory=PoolParams)
    findings: FindingParams = field(default_factory=FindingParams)
    health: HealthParams = field(default_factory=HealthParams)
    clusters: Mapping[str, str] | None = None  # node -> cluster, over what the collectors reported
    pool_params: Mapping[str, PoolParams] = field(default_factory=dict)  # per pool key


@dataclass(frozen=True)
class AnalysisResult:
    summary: dict[str, Any]
    findings: list[Finding]
    pools: list[PoolAnalysis]
    grid: WorkerGrid
    bottlenecks: BottleneckGrid


def input_from_samples(
    gpu_columns: Columns,
    engine_columns: Columns,
    *,
    start: float | None = None,
    end: float | None = None,
    bucket_s: float = BUCKET_S,
) -> AnalysisInput:
    """Raw sample columns (``ts`` in epoch seconds, as :mod:`fleet.store.queries` returns them) -> input."""
    inventory = inventory_from_samples(gpu_columns, engine_columns)  # type: ignore[arg-type]
    parts = [c for c in (gpu_columns, engine_columns) if len(c["ts"])]
    # A sample's ts is its window's end: the range starts where the first window starts.
    stamps = [
        float(np.min(np.asarray(c["ts"], dtype=np.float64) - np.asarray(c["window_s"], dtype=np.float64)))
        for c in parts
    ]
    ends = [float(np.max(c["ts"])) for c in parts]
    lo = start if start is not None else (min(stamps) if stamps else 0.0)
    hi = end if end is not None else (max(ends) if ends else lo + bucket_s)
    return AnalysisInput(
        inventory,
        aggregate_gpu_samples(gpu_columns, bucket_s),
        aggregate_engine_samples(engine_columns, bucket_s),
        lo,
        hi,
        bucket_s,
    )


def _sources(inventory: Inventory) -> dict[str, TelemetrySource]:
    out = {}
    for gpu in inventory.gpus:
        try:
            out[gpu.gpu_uuid] = TelemetrySource(gpu.source)
        except ValueError:
            out[gpu.gpu_uuid] = TelemetrySource.NVML_BASIC
    return out


def analyze(data: AnalysisInput, catalog: Catalog, params: AnalyzerParams | None = None) -> AnalysisResult:
    """Analyse every pool over [start, end) and return the fleet summary and the findings."""
    p = params or AnalyzerParams()
    inventory = data.inventory
    gpu_worker = inventory.gpu_worker()
    grid = build_grid(
        inventory.worker_ids,
        gpu_worker,
        data.gpu_buckets,
        data.engine_buckets,
        start=data.start,
        end=data.end,
        bucket_s=data.bucket_s,
    )
    gpu_frame, engine_frame = bottleneck_frames(grid, data.gpu_buckets, gpu_worker, _sources(inventory))
    thresholds = BottleneckThresholds(window_s=data.bucket_s, smoothing_windows=1, min_dwell_windows=2)
    bottlenecks = classify(
        gpu_frame,
        engine_frame,
        start=float(grid.bucket_start[0]),
        end=float(grid.bucket_start[-1] + grid.bucket_s),
        thresholds=thresholds,
    )
    rows = {w: i for i, w in enumerate(grid.workers)}
    pools = build_pools(inventory, rows, catalog, p.clusters)
    analyses = [analyze_pool(pool, grid, p.pool_params.get(pool.key, p.pool)) for pool in pools]
    findings: list[Finding] = []
    for analysis in analyses:
        findings += placement_findings(analysis, grid, bottlenecks, p.findings)
    context = {
        row: WorkerContext(pool.key, pool.group_of(row).sku.key, inventory.workers[row].role)
        for pool in pools
        for row in pool.members
    }
    findings += health_findings(grid, bottlenecks, context, p.health)
    findings.sort(key=lambda f: (-f.lost_tokens_per_s, f.kind.value, f.pool or "", f.worker_id or ""))
    summary = build_summary(data, grid, bottlenecks, pools, analyses, findings, inventory)
    return AnalysisResult(summary, findings, analyses, grid, bottlenecks)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")


def _num(value: float | None, digits: int = 1) -> float | None:
    return round(float(value), digits) if value is not None and math.isfinite(value) else None


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


def _segment_summary(pool: Pool, s: SegmentAnalysis) -> dict[str, Any]:
    pl = s.placement
    return {
        "start": _iso(s.start),
        "end": _iso(s.end),
        "mean_prompt_tokens": _num(s.mix.isl),
        "mean_output_tokens": _num(s.mix.osl),
        "requests_per_s": _num(s.mix.request_rate, 3),
        "demand_tokens_per_s": _num(s.mix.tokens_rate),
        "capacity_tokens_per_s": _num(s.capacity_tokens_per_s),
        "best_tokens_per_s": _num(pl.best.tokens_per_s) if pl else _num(s.capacity_tokens_per_s),
        "lost_tokens_per_s": _num(pl.lost_tokens_per_s) if pl else 0.0,
        "lost_tokens_per_s_low": _num(pl.lost_low) if pl else 0.0,
        "lost_tokens_per_s_high": _num(pl.lost_high) if pl else 0.0,
        "utilisation": _num(pl.utilisation, 4) if pl else None,
        "demand_limited": pl.demand_limited if pl else None,
        "bound": pl.current.bound if pl else None,
        "routing": (
            {
                "prefill": "round-robin" if pl.routing.prefill_equal else "load-aware",
                "decode": "round-robin" if pl.routing.decode_equal else "load-aware",
            }
            if pl
            else None
        ),
        "current_placement": _placement_counts(pool, s, None),
        "best_placement": _placement_counts(pool, s, pl.best.prefill) if pl else None,
        "notes": list(s.notes),
    }


def _pool_summary(analysis: PoolAnalysis, findings: Sequence[Finding], grid: WorkerGrid) -> dict[str, Any]:
    pool = analysis.pool
    latest = analysis.latest
    pl = latest.placement if latest else None
    ratio = recommended_ratio(analysis, latest) if latest else None
    mine = [f for f in findings if f.pool == pool.key and f.status is FindingStatus.OPEN]
    counts: Counter[tuple[str, str]] = Counter()
    for row in pool.members:
        counts[(pool.group_of(row).sku.key, str(grid_role(grid, row)))] += 1
    by_sku: dict[str, dict[str, int]] = {}
    for (sku, role), n in sorted(counts.items()):
        by_sku.setdefault(sku, {})[role] = n
    return {
        "pool": pool.key,
        "model": pool.model_id,
        "model_key": pool.arch.key if pool.arch else None,
        "precision": str(pool.precision) if pool.precision else None,
        "serving": analysis.serving,
        "gpus": sum(g.gpus for g in pool.groups),
        "workers": len(pool.members),
        "workers_by_sku_role": by_sku,
        "lost_tokens_per_s": _num(pl.lost_tokens_per_s) if pl else 0.0,
        "lost_tokens_per_s_low": _num(pl.lost_low) if pl else 0.0,
        "lost_tokens_per_s_high": _num(pl.lost_high) if pl else 0.0,
        "lost_tokens_per_s_mean": _num(analysis.time_weighted("lost_tokens_per_s")),
        "lost_tokens_per_s_mean_low": _num(analysis.time_weighted("lost_low")),
        "lost_tokens_per_s_mean_high": _num(analysis.time_weighted("lost_high")),
        "capacity_tokens_per_s": _num(latest.capacity_tokens_per_s) if latest else None,
        "best_tokens_per_s": _num(pl.best.tokens_per_s)
        if pl
        else (_num(latest.capacity_tokens_per_s) if latest else None),
        "demand_tokens_per_s": _num(latest.mix.tokens_rate) if latest else None,
        "utilisation": _num(pl.utilisation, 4) if pl else None,
        "demand_limited": pl.demand_limited if pl else None,
        "bound": pl.current.bound if pl else None,
        "weekly_cost_usd": _num(pl.weekly_cost_usd, 2) if pl else None,
        "idle_cost_per_week_usd": _num(pl.idle_cost_per_week_usd, 2) if pl else None,
        "misplacement_cost_per_week_usd": _num(pl.misplacement_cost_per_week_usd, 2) if pl else None,
        "price": "catalog" if pl and pl.weekly_cost_usd is not None else "price unknown",
        "prefill_decode_ratio": _num(ratio.ratio_now, 4) if ratio else None,
        "recommended_prefill_decode_ratio": _num(ratio.ratio_recommended, 4) if ratio else None,
        "prefill_decode_now": ratio.now if ratio else None,
        "prefill_decode_recommended": ratio.recommended if ratio else None,
        "peak_requests_per_s": _num(ratio.peak_requests_per_s, 3) if ratio else None,
        "recommended": {k: asdict(v) for k, v in ratio.per_sku.items()} if ratio else None,
        "ratio_drift": any(f.kind is FindingKind.POOL_RATIO_DRIFT for f in mine),
        "traffic": {
            "prompt_tokens_per_s": _num(latest.mix.prompt_rate) if latest else None,
            "output_tokens_per_s": _num(latest.mix.output_rate) if latest else None,
            "requests_per_s": _num(latest.mix.request_rate, 3) if latest else None,
            "mean_prompt_tokens": _num(latest.mix.isl) if latest else None,
            "mean_output_tokens": _num(latest.mix.osl) if latest else None,
            "requests_counted": analysis.traffic.requests_counted,
        },
        "checks": [c.as_dict() for c in rules_of_thumb(analysis, latest)] if latest else [],
        "calibration": analysis.calibration.as_dict(),
        "drift_events": [
            {
                "start": _iso(float(grid.bucket_start[cp.index])),
                "description": cp.describe(),
                "magnitude": _num(cp.magnitude, 4),
            }
            for cp in analysis.change_points
        ],
        "segments": [_segment_summary(pool, s) for s in analysis.segments],
        "notes": list(analysis.notes),
    }


def grid_role(grid: WorkerGrid, row: int) -> Role:
    """The role a worker reported last in the range."""
    seen = grid.role[row][grid.role[row] >= 0]
    return ROLES[int(seen[-1])] if seen.size else Role.UNKNOWN


def build_summary(
    data: AnalysisInput,
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    pools: Sequence[Pool],
    analyses: Sequence[PoolAnalysis],
    findings: Sequence[Finding],
    inventory: Inventory,
) -> dict[str, Any]:
    pool_rows = [_pool_summary(a, findings, grid) for a in analyses]
    open_findings = [f for f in findings if f.status is FindingStatus.OPEN]
    misplaced: dict[str, list[str]] = {}
    lost_by_worker: dict[str, float] = {}
    for f in open_findings:
        if f.worker_id is not None and f.kind in MISPLACEMENT_KINDS:
            misplaced.setdefault(f.worker_id, []).append(f.kind.value)
            lost_by_worker[f.worker_id] = lost_by_worker.get(f.worker_id, 0.0) + f.lost_tokens_per_s
    # Lost tokens of ratio changes are attributed to the workers the rebalance flips, too.
    for a in analyses:
        latest = a.latest
        if latest is None or latest.placement is None:
            continue
        for change in latest.placement.changes:
            worker = grid.workers[change.row]
            if worker not in misplaced:
                lost_by_worker[worker] = latest.placement.lost_tokens_per_s * change.share
    workers = []
    n = grid.shape[1]
    for pool in pools:
        for row in pool.members:
            worker = grid.workers[row]
            workers.append(
                {
                    "worker_id": worker,
                    "pool": pool.key,
                    "sku": pool.group_of(row).sku.key,
                    "role": str(grid_role(grid, row)),
                    "model": pool.model_id,
                    "bottleneck": str(dominant_bottleneck(bottlenecks, worker, max(0, n - 3), n)),
                    "misplaced": worker in misplaced,
                    "kinds": misplaced.get(worker, []),
                    "lost_tokens_per_s": _num(lost_by_worker.get(worker, 0.0)),
                }
            )

    def total(key: str) -> float:
        return float(sum(float(row[key] or 0.0) for row in pool_rows))

    prices_known = all(row["price"] == "catalog" for row in pool_rows if row["serving"] == "disaggregated")
    kinds = Counter(f.kind.value for f in open_findings)
    return {
        "version": SUMMARY_VERSION,
        "from": _iso(data.start),
        "to": _iso(data.end),
        "bucket_s": data.bucket_s,
        "fleet": {
            "lost_tokens_per_s": _num(total("lost_tokens_per_s")),
            "lost_tokens_per_s_low": _num(total("lost_tokens_per_s_low")),
            "lost_tokens_per_s_high": _num(total("lost_tokens_per_s_high")),
            "lost_tokens_per_s_mean": _num(total("lost_tokens_per_s_mean")),
            "lost_tokens_per_s_mean_low": _num(total("lost_tokens_per_s_mean_low")),
            "lost_tokens_per_s_mean_high": _num(total("lost_tokens_per_s_mean_high")),
            "capacity_tokens_per_s": _num(total("capacity_tokens_per_s")),
            "best_tokens_per_s": _num(total("best_tokens_per_s")),
            "demand_tokens_per_s": _num(total("demand_tokens_per_s")),
            "demand_limited": all(row["demand_limited"] is not False for row in pool_rows),
            "weekly_cost_usd": _num(total("weekly_cost_usd"), 2) if prices_known else None,
            "idle_cost_per_week_usd": _num(total("idle_cost_per_week_usd"), 2) if prices_known else None,
            "misplacement_cost_per_week_usd": _num(total("misplacement_cost_per_week_usd"), 2)
            if prices_known
            else None,
            "price": "catalog" if prices_known else "price unknown",
            "pools": len(pool_rows),
            "workers": len(workers),
            "gpus": len(inventory.gpus),
            "unattributed_gpus": len(inventory.unattributed_gpus()),
            "misplaced_workers": len(misplaced),
            "open_findings": len(open_findings),
            "open_findings_by_kind": dict(sorted(kinds.items())),
        },
        "model": {
            "calibration": CALIBRATION_PROVENANCE.get("fitted_at", ""),
            "heldout_ratio_error_p90": CALIBRATION_ACCURACY.heldout_ratio_p90,
            "heldout_absolute_error_p90": CALIBRATION_ACCURACY.heldout_absolute_p90,
        },
        "pools": pool_rows,
        "workers": workers,
    }
