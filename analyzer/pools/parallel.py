"""Per-pool analyses over several processes: pools are independent once the grid is built.

Worker processes are forked, so they inherit the grid instead of receiving a copy; each returns its pools'
analyses, which come back in pool order, identical to the serial path's.
"""

from __future__ import annotations

import copyreg
import multiprocessing
import types
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from analyzer.pools.analysis import PoolAnalysis, PoolParams, analyze_pool
from analyzer.pools.peer_evidence import PeerEvidence
from analyzer.pools.pool import Pool
from analyzer.pools.reported_budgets import ReportedBudgets
from analyzer.telemetry.grid import WorkerGrid

_Job = Callable[[int], PoolAnalysis]
_job: _Job | None = None  # set in each forked worker by _start; never in the parent


def _proxy(items: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(items)


def _reduce_proxy(
    proxy: types.MappingProxyType[Any, Any],
) -> tuple[Callable[..., types.MappingProxyType[Any, Any]], tuple[dict[Any, Any]]]:
    return _proxy, (dict(proxy),)


def _start(job: _Job) -> None:
    global _job
    _job = job
    copyreg.pickle(types.MappingProxyType, _reduce_proxy)  # analyses hold read-only mappings


def _run(index: int) -> PoolAnalysis:
    assert _job is not None, "a pool worker runs only in a process started by analyze_pools"
    return _job(index)


def analyze_pools(
    pools: Sequence[Pool],
    grid: WorkerGrid,
    params_of: Callable[[Pool], PoolParams],
    nodes: Mapping[int, str],
    budgets: ReportedBudgets,
    processes: int = 1,
    peers: PeerEvidence | None = None,
) -> list[PoolAnalysis]:
    """Each pool's analysis, in ``processes`` forked processes when more than one pool and process."""

    def job(index: int) -> PoolAnalysis:
        pool = pools[index]
        return analyze_pool(pool, grid, params_of(pool), nodes=nodes, budgets=budgets, peers=peers)

    if processes <= 1 or len(pools) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [job(i) for i in range(len(pools))]
    # Largest pools first, so no process is left with a big one at the end; results return in pool order.
    order = sorted(range(len(pools)), key=lambda i: -len(pools[i].members))
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        min(processes, len(pools)), mp_context=context, initializer=_start, initargs=(job,)
    ) as ex:
        done = dict(zip(order, ex.map(_run, order), strict=True))
    return [done[i] for i in range(len(pools))]


def analyze_fleet_pools(
    pools: Sequence[Pool],
    run: Callable[[Sequence[Pool], PeerEvidence | None], list[PoolAnalysis]],
    engines: Mapping[int, str | None],
) -> list[PoolAnalysis]:
    """Every pool's analysis (``run``: :func:`analyze_pools` over some pools, with or without peers); then
    again, on what other pools measured on the same deployments (decode steps, saturated prefill), for the
    pools with a group that measured none where a peer did (:mod:`analyzer.pools.peer_evidence`).
    ``engines``: each grid row's engine."""
    first = run(pools, None)
    own = [a.calibration.own_evidence() for a in first]
    peers = PeerEvidence.gather(((a.pool, mine) for a, mine in zip(first, own, strict=True)), engines)
    again = [i for i, a in enumerate(first) if peers.wanted(a.pool, own[i])]
    if not again:
        return first
    out = list(first)
    for i, analysis in zip(again, run([pools[i] for i in again], peers), strict=True):
        out[i] = analysis
    return out
