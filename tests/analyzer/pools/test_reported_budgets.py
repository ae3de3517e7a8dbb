"""Measured KV budgets through the pool analysis: a worker's reported budget comes before any inference
or model, a group without one borrows a peer's, each capacity says which it rests on, and the lost-token
range widens where the budget is only modelled."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analyzer.findings.evidence import capacity_evidence
from analyzer.model.deployment import make_deployment
from analyzer.model.kv_budget import BudgetSource
from analyzer.pipeline import input_from_samples
from analyzer.pools.analysis import PoolAnalysis, analyze_pool
from analyzer.pools.calibration import CapacityParams, PoolCalibration
from analyzer.pools.capacity import GroupCapacity, group_capacity
from analyzer.pools.pool import Inventory, Pool, SkuGroup, build_pools
from analyzer.pools.reported_budgets import ReportedBudgets
from analyzer.pools.split_search import place
from analyzer.telemetry.grid import build_grid
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


def _analyse(reported: dict[str, int]) -> tuple[Pool, dict[str, int], PoolAnalysis]:
    """A disaggregated pool (H100 decodes and prefills, H200 prefills only) with the budgets the named
    workers' engines report."""
    fleet = Fleet(workers([("node00", H100, 2, 2), ("node01", H200, 2, 0)]), hours=6, rate_rps=lambda h: 10.0)
    data = input_from_samples(*fleet.columns())
    specs = tuple(replace(w, kv_capacity_tokens=reported.get(w.worker_id)) for w in data.inventory.workers)
    inventory = Inventory(specs, data.inventory.gpus)
    grid = build_grid(
        inventory.worker_ids,
        inventory.gpu_worker(),
        data.gpu_buckets,
        data.engine_buckets,
        start=data.start,
        end=data.end,
        bucket_s=data.bucket_s,
    )
    rows = {w: i for i, w in enumerate(grid.workers)}
    (pool,) = build_pools(inventory, rows, CATALOG)
    budgets = ReportedBudgets.from_workers([pool], dict(enumerate(inventory.workers)), CATALOG)
    return pool, rows, analyze_pool(pool, grid, budgets=budgets)


def _capacity(analysis: PoolAnalysis, sku: str) -> GroupCapacity:
    latest = analysis.latest
    assert latest is not None
    return next(c for c in latest.capacities if c.group.sku.key == sku)


def test_reported_budgets_come_first_and_each_worker_says_which_it_rests_on() -> None:
    _, rows, analysis = _analyse({"node00/decode-1": 300_000})
    h100 = _capacity(analysis, "H100-SXM")
    assert h100.kv_budget is not None and h100.kv_budget.source is BudgetSource.MEASURED
    d = h100.group.deployment
    assert d is not None and h100.kv_budget.tokens(d) == pytest.approx(300_000)
    # The decode batch is what the reported tokens hold, not the synthetic KV occupancy's 400k.
    assert analysis.latest is not None
    mix = analysis.latest.mix
    assert h100.decode.batch == pytest.approx(300_000 / (mix.isl + mix.osl), rel=0.02)
    assert capacity_evidence(h100, rows["node00/decode-1"])["kv_budget"] == "measured"
    assert capacity_evidence(h100, rows["node00/decode-2"])["kv_budget"] == "measured-on-peer"
    # The H200s report nothing, decode nowhere and hold memory: inferred from what they hold.
    h200 = _capacity(analysis, "H200-SXM")
    assert h200.kv_budget is not None and h200.kv_budget.source is BudgetSource.INFERRED
    assert "memory" in h200.kv_budget.detail


def test_a_group_without_a_report_borrows_a_peer_of_the_same_sku_model_and_tp() -> None:
    group = SkuGroup(
        CATALOG.gpus.get("H200-SXM"),
        2,
        (0,),
        make_deployment(CATALOG, model="llama-3.1-70b", gpu="H200-SXM", precision="fp8", tp=2),
    )
    cal = PoolCalibration(kv_peer={group.key: (1_000_000.0, 0.01, 4)}, mem_used={group.key: 120e9})
    capacity = group_capacity(group, cal, 1300.0, 180.0)
    assert capacity.kv_budget is not None and capacity.kv_budget.source is BudgetSource.PEER
    assert "4 other worker(s)" in capacity.kv_budget.detail
    assert capacity_evidence(capacity, 0)["kv_budget"] == "measured-on-peer"


def test_without_reports_the_analysis_is_what_it_was() -> None:
    _, _, analysis = _analyse({})
    h100 = _capacity(analysis, "H100-SXM")
    assert h100.kv_budget is not None and h100.kv_budget.source is BudgetSource.INFERRED
    assert "KV in use" in h100.kv_budget.detail


def test_the_lost_token_range_inherits_a_modelled_budget() -> None:
    """Decode on KV-starved H100s (70B FP8 on one GPU each) and prefill on H200s: the best plan moves
    decode to the H200s. With the H100s' budget only modelled, the range of the loss is wider than with
    the same budget reported by their engines."""
    p = CapacityParams()
    h100_d = make_deployment(CATALOG, model="llama-3.1-70b", gpu="H100-SXM", precision="fp8", tp=1)
    h200_d = make_deployment(CATALOG, model="llama-3.1-70b", gpu="H200-SXM", precision="fp8", tp=1)
    h100 = SkuGroup(h100_d.gpu, 1, (0, 1, 2, 3), h100_d)
    h200 = SkuGroup(h200_d.gpu, 1, (4, 5, 6, 7), h200_d)
    skus = {h100.key: h100.sku, h200.key: h200.sku}
    h200_tokens = (h200_d.hbm_bytes * 0.8 - 72.7e9) / (2 * 80 * 8 * 128)
    modelled = PoolCalibration(skus=skus, kv_reported={h200.key: (h200_tokens, 0.0)})
    tokens = group_capacity(h100, modelled, 1000.0, 300.0, p).kv_budget
    assert tokens is not None and tokens.source is BudgetSource.MODELLED
    reported = PoolCalibration(
        skus=skus,
        kv_reported={h200.key: (h200_tokens, 0.0), h100.key: (tokens.tokens(h100_d), 0.0)},
    )
    ranges = []
    for cal in (modelled, reported):
        groups = [group_capacity(g, cal, 1000.0, 300.0, p) for g in (h100, h200)]
        assert groups[0].decode.tokens_per_s == pytest.approx(
            group_capacity(h100, reported, 1000.0, 300.0, p).decode.tokens_per_s, rel=1e-6
        )
        result = place(
            groups,
            [[(r, "decode") for r in h100.members], [(r, "prefill") for r in h200.members]],
            isl=1000.0,
            osl=300.0,
            demand_tokens_per_s=1e9,
            peak_demand_tokens_per_s=1e9,
        )
        assert result.lost_tokens_per_s > 0
        ranges.append(result.lost_high - result.lost_low)
    assert ranges[0] > ranges[1]
    assert np.isfinite(ranges).all()
