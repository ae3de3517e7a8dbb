"""KV budgets: each engine's memory rule by hand, the named assumptions and their range, what the fleet's
engines report (and their peers'), and the catalog's engine settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from analyzer.model.deployment import Deployment, make_deployment
from analyzer.model.efficiency import CALIBRATED
from analyzer.model.kv_budget import (
    BudgetSource,
    KvBudget,
    measured_budget,
    modelled_budget,
    trtllm_bench_settings,
)
from analyzer.model.moe import kv_bytes_per_token_slot
from analyzer.pools.pool import Inventory, SkuGroup, build_pools
from analyzer.pools.reported_budgets import PeerKey, ReportedBudgets
from fleet.catalog import CatalogError, load_catalog
from fleet.contract import Role
from fleet.inventory import WorkerRecord
from fleet.models import weight_bytes

CATALOG = load_catalog()
GB = 1e9


def _d(
    gpu: str = "H100-SXM", tp: int = 1, model: str = "llama-3.1-70b", precision: str = "fp8"
) -> Deployment:
    return make_deployment(CATALOG, model=model, gpu=gpu, precision=precision, tp=tp)


@pytest.mark.parametrize(
    ("engine", "tp", "expected_per_gpu"),
    [
        # TensorRT-LLM: 0.9 of what is free after weights and the calibrated reserve.
        ("trtllm", 2, lambda w, r: 0.9 * (80 * GB - w - r)),
        # vLLM: 0.9 of the device, weights and reserve inside it.
        ("vllm", 2, lambda w, r: 0.9 * 80 * GB - w - r),
        # SGLang at TP2: 0.87 of the device for weights and KV, 1 GB held before the pool is sized.
        ("sglang", 2, lambda w, r: 0.87 * 80 * GB - w - 1 * GB),
    ],
)
def test_each_engine_rule_by_hand(
    engine: str, tp: int, expected_per_gpu: Callable[[float, float], float]
) -> None:
    d = _d(tp=tp)
    settings = CATALOG.engines.resolve(engine)
    assert settings is not None
    budget = modelled_budget(d, settings, CALIBRATED)
    w = weight_bytes(d.model, d.precision) / tp
    assert budget.bytes == pytest.approx(expected_per_gpu(w, CALIBRATED.runtime_reserve_bytes) * tp)
    assert budget.source is BudgetSource.MODELLED
    assert budget.low_bytes < budget.bytes < budget.high_bytes
    assert budget.assumptions["engine"] == settings.key
    assert budget.assumptions["basis"] == settings.kv_memory_basis
    assert budget.assumptions["weight_bytes_per_gpu"] == pytest.approx(w)


def test_a_stated_fraction_has_no_range_of_its_own_but_the_reserve_keeps_one() -> None:
    d = _d(tp=2)
    vllm = CATALOG.engines.resolve("vllm")
    assert vllm is not None
    stated = modelled_budget(d, vllm, CALIBRATED, fraction=0.95)
    assert stated.assumptions["fraction"] == 0.95
    assert stated.assumptions["fraction_low"] == stated.assumptions["fraction_high"] == 0.95
    assert stated.low_bytes < stated.bytes < stated.high_bytes  # the reserve still spans x0.5-2.5
    reserve = modelled_budget(d, vllm, CALIBRATED, fraction=0.95, reserve_bytes=5 * GB)
    assert stated.bytes - reserve.bytes == pytest.approx((5 * GB - CALIBRATED.runtime_reserve_bytes) * 2)
    with pytest.raises(ValueError, match="fraction"):
        modelled_budget(d, vllm, CALIBRATED, fraction=1.5)


def test_near_the_edge_the_range_reaches_an_empty_cache() -> None:
    """70B FP8 on one H100: 72.7 GB of weights in 80 GB. The budget's low end holds almost nothing; on an
    H200 the same assumptions move the budget by a few percent only."""
    starved = modelled_budget(_d("H100-SXM"), trtllm_bench_settings(0.95), CALIBRATED)
    roomy = modelled_budget(_d("H200-SXM"), trtllm_bench_settings(0.95), CALIBRATED)
    assert starved.spread > 0.8
    assert 0.0 < roomy.spread < 0.2
    assert roomy.bytes > 10 * starved.bytes
    # A reserve four times the calibrated one leaves no cache at all on the H100.
    none = modelled_budget(
        _d("H100-SXM"),
        trtllm_bench_settings(0.95),
        CALIBRATED,
        reserve_bytes=4 * CALIBRATED.runtime_reserve_bytes,
    )
    assert none.bytes == 0.0 and none.spread == 1.0


def test_sglang_fraction_follows_the_tp_degree() -> None:
    sglang = CATALOG.engines.resolve("SGLang")
    assert sglang is not None
    assert [sglang.fraction_for(tp) for tp in (1, 2, 4, 8, 16, 32)] == [0.88, 0.87, 0.85, 0.81, 0.79, 0.79]
    assert CATALOG.engines.resolve("tensorrt-llm") is CATALOG.engines.resolve("trtllm")
    assert CATALOG.engines.resolve("no-such-engine") is None
    assert CATALOG.engines.default is not None and CATALOG.engines.default.key == "vllm"


def test_an_operator_overrides_an_engine_and_bad_settings_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("engines:\n  vllm:\n    kv_memory_fraction: 0.95\n", encoding="utf-8")
    vllm = load_catalog(path).engines.resolve("vllm")
    assert vllm is not None and vllm.kv_memory_fraction == 0.95 and vllm.kv_memory_basis == "total"
    path.write_text("engines:\n  vllm:\n    kv_memory_fraction: 0.5\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="range"):
        load_catalog(path)
    path.write_text("engines:\n  vllm:\n    kv_memory_basis: most\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="kv_memory_basis"):
        load_catalog(path)
    path.write_text("engines:\n  mine:\n    kv_memory_fraction: 0.9\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="missing required"):
        load_catalog(path)


def test_a_reported_budget_in_tokens() -> None:
    d = _d("H200-SXM", tp=2)
    budget = measured_budget(d, 500_000)
    assert budget.tokens(d) == pytest.approx(500_000)
    assert budget.bytes == pytest.approx(500_000 * kv_bytes_per_token_slot(d))
    assert budget.source is BudgetSource.MEASURED
    evidence = budget.as_evidence(d)
    assert evidence["kv_budget"] == "measured" and evidence["kv_budget_tokens"] == 500_000
    with pytest.raises(ValueError, match="finite"):
        measured_budget(d, float("nan"))
    with pytest.raises(ValueError, match="low <= bytes <= high"):
        KvBudget(10.0, 11.0, 12.0, BudgetSource.MODELLED, "")


def _worker(worker_id: str, uuids: tuple[str, ...], tokens: int | None, engine: str = "vllm") -> WorkerRecord:
    return WorkerRecord(
        worker_id=worker_id,
        node=worker_id.split("/", maxsplit=1)[0],
        engine=engine,
        model="meta-llama/Llama-3.1-70B-Instruct",
        role=Role.DECODE,
        role_source="engine",
        precision="fp8",
        tp=2,
        gpu_uuids=uuids,
        deployment=worker_id.split("/")[1],
        kv_capacity_tokens=tokens,
    )


def test_budgets_the_fleet_reports_are_kept_per_row_and_pooled_by_peer() -> None:
    from fleet.inventory import GpuRecord

    specs = [
        _worker("n1/a", ("g1", "g2"), 410_000),
        _worker("n1/b", ("g3", "g4"), None, engine="sglang"),  # another deployment, reports nothing
        _worker("n2/a", ("g5", "g6"), 390_000),
    ]
    gpus = tuple(
        GpuRecord(f"g{i}", "n1" if i <= 4 else "n2", "NVIDIA H100 80GB HBM3", None, None, "dcgm", "ok")
        for i in range(1, 7)
    )
    inventory = Inventory(tuple(specs), gpus)
    rows = {w.worker_id: i for i, w in enumerate(specs)}
    pools = build_pools(inventory, rows, CATALOG)
    assert len(pools) == 2  # deployments a and b
    budgets = ReportedBudgets.from_workers(pools, dict(enumerate(specs)), CATALOG)
    assert dict(budgets.tokens) == {0: 410_000, 2: 390_000}
    key = PeerKey("llama-3.1-70b", "fp8", "H100-SXM", 2)
    assert sorted(budgets.peers[key]) == [390_000, 410_000]
    assert budgets.settings_of([1]) is CATALOG.engines.resolve("sglang")
    assert budgets.engine_of([0, 2]) == "vllm"
    group: SkuGroup = next(p for p in pools if p.deployment == "b").groups[0]
    assert group.members == (1,)
