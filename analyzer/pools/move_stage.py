"""The pipeline stage that judges moves of workers across GPU models (:mod:`analyzer.pools.moves`): finds
them in the bucket rows, analyses each pool before and after its latest move with the GPUs its workers
held then, and returns the outcomes per pool. Within one analysis a worker keeps one GPU model, so a move
is analysed apart. Reasoning: docs/analyzer.md#moves
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analyzer.pools.analysis import PoolAnalysis, PoolParams, analyze_pool
from analyzer.pools.moves import GpuMove, PartAnalysis, gpu_moves, move_outcomes
from analyzer.pools.outcomes import OutcomeParams
from analyzer.pools.pool import Inventory, Pool, build_pools, gpu_sku
from analyzer.pools.reported_budgets import ReportedBudgets
from analyzer.results.changes import ChangeOutcome
from analyzer.telemetry.grid import Columns, WorkerGrid, build_grid
from fleet.catalog import Catalog


@dataclass(frozen=True)
class MoveStageInput:
    """The bucket rows and the range the stage re-reads for each part of a pool's history."""

    gpu_buckets: Columns
    engine_buckets: Columns
    start: float
    end: float
    bucket_s: float


@dataclass(frozen=True)
class MoveStageParams:
    """What the stage needs of the analyzer's parameters."""

    pool: PoolParams
    pool_params: Mapping[str, PoolParams]
    outcomes: OutcomeParams
    clusters: Mapping[str, str] | None


def _skus(inventory: Inventory, catalog: Catalog) -> dict[str, str]:
    return {g.gpu_uuid: gpu_sku(g, catalog).key for g in inventory.gpus}


def _part(
    data: MoveStageInput,
    key: str,
    rows: Mapping[str, int],
    catalog: Catalog,
    p: MoveStageParams,
    nodes: Mapping[int, str],
    budgets: ReportedBudgets,
) -> PartAnalysis:
    """How to analyse pool ``key`` over [start, end) with the GPUs ``held`` names."""

    def run(held: Inventory, start: float, end: float) -> PoolAnalysis | None:
        part_grid = build_grid(
            held.worker_ids,
            held.gpu_worker(),
            data.gpu_buckets,
            data.engine_buckets,
            start=start,
            end=end,
            bucket_s=data.bucket_s,
        )
        pool = next((x for x in build_pools(held, rows, catalog, p.clusters) if x.key == key), None)
        if pool is None:
            return None
        return analyze_pool(pool, part_grid, p.pool_params.get(key, p.pool), nodes=nodes, budgets=budgets)

    return run


def gpu_move_outcomes(
    data: MoveStageInput,
    inventory: Inventory,
    grid: WorkerGrid,
    pools: Sequence[Pool],
    catalog: Catalog,
    p: MoveStageParams,
    nodes: Mapping[int, str],
    budgets: ReportedBudgets,
) -> dict[str, list[ChangeOutcome]]:
    """Per pool, the outcome of its latest move of workers across GPU models."""
    moves = gpu_moves(data.gpu_buckets, grid.workers)
    if not moves:
        return {}
    skus = _skus(inventory, catalog)
    rows = {w: i for i, w in enumerate(grid.workers)}

    def sku(uuids: Sequence[str]) -> str:
        keys = {skus[u] for u in uuids if u in skus}
        return keys.pop() if len(keys) == 1 else "unknown"

    def moved(m: GpuMove) -> tuple[str, str]:
        return sku(m.before), sku(m.after)

    out: dict[str, list[ChangeOutcome]] = {}
    for pool in pools:
        analyse = _part(data, pool.key, rows, catalog, p, nodes, budgets)
        found = move_outcomes(
            pool, moves, grid.workers, analyse, inventory, data.start, data.end, moved, p.outcomes
        )
        if found:
            out[pool.key] = found
    return out
