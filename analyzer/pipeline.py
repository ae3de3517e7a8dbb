"""The analyzer end to end, pure: bucketed telemetry + inventory + catalog + params -> summary and findings.

No I/O here: :mod:`analyzer.sources.store` reads the store into :class:`AnalysisInput` and writes the result
back; tests and benchmarks build the input from simulated records with :func:`input_from_samples`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analyzer.findings.base import FindingInputs, WorkerContext
from analyzer.findings.registry import FindingParams, detect_all
from analyzer.pools.analysis import PoolAnalysis, PoolParams
from analyzer.pools.move_stage import MoveStageInput, MoveStageParams, gpu_move_outcomes
from analyzer.pools.outcomes import OutcomeParams
from analyzer.pools.parallel import analyze_fleet_pools, analyze_pools
from analyzer.pools.pool import Inventory, build_pools, inventory_from_samples
from analyzer.pools.reported_budgets import ReportedBudgets
from analyzer.pools.saturation import SaturationParams
from analyzer.pools.selection import PoolSelection, select
from analyzer.pools.targets import all_rules, fleet_notes, pool_targets, with_link, with_targets
from analyzer.results.summary import Scope, Summary
from analyzer.summarize import build_summary
from analyzer.telemetry.bottleneck import BottleneckGrid, BottleneckThresholds, classify
from analyzer.telemetry.grid import (
    BUCKET_S,
    Columns,
    WorkerGrid,
    aggregate_engine_samples,
    aggregate_gpu_samples,
    bottleneck_frames,
    build_grid,
)
from fleet.catalog import Catalog
from fleet.contract import Finding, TelemetrySource
from fleet.targets import PlacedRule, PoolTargets


@dataclass(frozen=True)
class AnalysisInput:
    """What the analyzer reads: the inventory and per-(GPU or worker, bucket) rows over [start, end)."""

    inventory: Inventory
    gpu_buckets: Columns
    engine_buckets: Columns
    start: float  # epoch seconds
    end: float
    bucket_s: float = BUCKET_S

    @property
    def gpu_bucket_count(self) -> int:
        """Rows of per-(GPU, bucket) samples read."""
        return len(self.gpu_buckets["ts"])


def _bucket_thresholds() -> BottleneckThresholds:
    # Hourly buckets are already medians of many windows: no further smoothing, two buckets of dwell.
    return BottleneckThresholds(smoothing_windows=1, min_dwell_windows=2)


@dataclass(frozen=True)
class AnalyzerParams:
    """Every threshold of the analysis, in one tree (``docs/configuration.md`` lists its leaves by path;
    ``PHASEFIT_ANALYZER_THRESHOLDS`` sets any of them)."""

    bottleneck: BottleneckThresholds = field(default_factory=_bucket_thresholds)
    pool: PoolParams = field(default_factory=PoolParams)
    findings: FindingParams = field(default_factory=FindingParams)
    outcomes: OutcomeParams = field(default_factory=OutcomeParams)
    saturation: SaturationParams = field(default_factory=SaturationParams)
    clusters: Mapping[str, str] | None = None  # node -> cluster, over what the collectors reported
    pool_params: Mapping[str, PoolParams] = field(default_factory=dict)  # per pool key
    # Latency-target rules of the settings (PHASEFIT_ANALYZER_TARGETS); the catalog's join them in analyze.
    targets: tuple[PlacedRule, ...] = ()
    # Where ``pool.capacity.tpot_slo_s`` was set, named by the global rule it makes (settings name it).
    tpot_slo_where: str = "pool.capacity.tpot_slo_s"


@dataclass(frozen=True)
class AnalysisResult:
    """``typed_summary`` is the summary (:mod:`analyzer.results.summary`); ``summary`` is its JSON, as stored
    and printed (``typed_summary.to_json_dict()``), for readers of the untyped form."""

    summary: dict[str, Any]
    findings: list[Finding]
    pools: list[PoolAnalysis]
    grid: WorkerGrid
    bottlenecks: BottleneckGrid
    typed_summary: Summary


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


def params_of_pool(p: AnalyzerParams, key: str, targets: PoolTargets) -> PoolParams:
    """One pool's parameters as its analysis, its moves and its what-ifs use them: its own (or the
    fleet's), its latency targets, and the operator's KV-link figure (one figure for the KV-fabric check
    and for the prefill capacity)."""
    return with_link(
        with_targets(p.pool_params.get(key, p.pool), targets), p.findings.kv_fabric.link_bytes_per_s
    )


def analyze(
    data: AnalysisInput,
    catalog: Catalog,
    params: AnalyzerParams | None = None,
    *,
    extra_warnings: Sequence[str] = (),
    selection: PoolSelection | None = None,
    processes: int = 1,
) -> AnalysisResult:
    """Analyse the pools over [start, end) and return the summary and the findings.

    ``extra_warnings`` (e.g. what a Prometheus reader noted while reading) join the pools' notes in the
    summary's ``warnings``, so every warning a caller prints also reaches ``--json`` and the store.
    ``selection``: only some pools (the summary then covers them alone, and says so); ``processes``: the
    per-pool analyses over that many forked processes, with the same result."""
    p = params or AnalyzerParams()
    chosen = selection or PoolSelection()
    inventory = select(data.inventory, catalog, p.clusters, chosen)
    if not chosen.everything:
        extra_warnings = [*extra_warnings, f"this analysis covers {chosen.describe()}, not the whole fleet"]
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
    thresholds = replace(p.bottleneck, window_s=data.bucket_s)
    bottlenecks = classify(
        gpu_frame,
        engine_frame,
        start=float(grid.bucket_start[0]),
        end=float(grid.bucket_start[-1] + grid.bucket_s),
        thresholds=thresholds,
    )
    rows = {w: i for i, w in enumerate(grid.workers)}
    pools = build_pools(inventory, rows, catalog, p.clusters)
    nodes = {row: inventory.workers[row].node for row in range(len(inventory.workers))}
    # KV budgets the engines report come before any modelled one (a peer's for a counterfactual SKU).
    budgets = ReportedBudgets.from_workers(pools, dict(enumerate(inventory.workers)), catalog)
    rules = all_rules(p.targets, catalog, p.pool.capacity.tpot_slo_s, p.tpot_slo_where)
    targets = pool_targets(pools, rules)
    pool_params = {pool.key: params_of_pool(p, pool.key, targets[pool.key]) for pool in pools}
    analyses = [
        replace(a, targets=targets[a.pool.key], notes=(*a.notes, *targets[a.pool.key].notes))
        for a in analyze_fleet_pools(
            pools,
            lambda some, peers: analyze_pools(
                some, grid, lambda pool: pool_params[pool.key], nodes, budgets, processes, peers
            ),
            budgets.engines,
        )
    ]
    extra_warnings = [*fleet_notes(targets, rules), *extra_warnings]
    moved = gpu_move_outcomes(
        MoveStageInput(data.gpu_buckets, data.engine_buckets, data.start, data.end, data.bucket_s),
        inventory,
        grid,
        pools,
        catalog,
        MoveStageParams(p.pool, pool_params, p.outcomes, p.clusters),
        nodes,
        budgets,
    )
    context = {
        row: WorkerContext(pool.key, pool.sku_of(row).key, inventory.workers[row].role)
        for pool in pools
        for row in pool.members
    }
    findings: list[Finding] = detect_all(FindingInputs(analyses, grid, bottlenecks, context), p.findings)
    # Largest known loss first; a finding whose loss is unknown (None) after every known one, never as 0.
    findings.sort(
        key=lambda f: (
            f.lost_tokens_per_s is None,
            -(f.lost_tokens_per_s or 0.0),
            f.kind.value,
            f.pool or "",
            f.worker_id or "",
        )
    )
    typed = build_summary(
        start=data.start,
        end=data.end,
        bucket_s=data.bucket_s,
        grid=grid,
        bottlenecks=bottlenecks,
        pools=pools,
        analyses=analyses,
        findings=findings,
        inventory=inventory,
        extra_warnings=extra_warnings,
        catalog=catalog,
        finding_params=p.findings,
        outcome_params=p.outcomes,
        saturation_params=p.saturation,
        extra_changes=moved,
    )
    if not chosen.everything:
        scope = Scope(
            pools=sorted(chosen.pools),
            shard=list(chosen.shard) if chosen.shard else None,
            description=chosen.describe(),
        )
        typed = typed.model_copy(update={"scope": scope})
    return AnalysisResult(typed.to_json_dict(), findings, analyses, grid, bottlenecks, typed)
