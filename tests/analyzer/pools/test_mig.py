"""MIG instances as SKUs of their own: pools group and size workers by their slice, a model that does not fit
a slice is never recommended onto it, and summaries count physical GPUs and MIG instances apart."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.model.deployment import make_deployment
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.pools.calibration import PoolCalibration
from analyzer.pools.capacity import group_capacity
from analyzer.pools.plan_rates import candidates
from analyzer.pools.pool import Inventory, SkuGroup, build_pools, device_counts, gpu_sku
from analyzer.pools.split_search import place
from fleet.catalog import load_catalog
from fleet.contract import FindingKind, Role
from fleet.inventory import GpuRecord, WorkerRecord
from tests.analyzer.synthetic import H100, H100_1G, H200, Fleet, Worker, workers

CATALOG = load_catalog()
ISL, OSL = 1300.0, 900.0
PARENT = "GPU-7f3c-parent"


def _worker(worker_id: str, uuids: tuple[str, ...], tp: int | None = None) -> WorkerRecord:
    return WorkerRecord(
        worker_id, "n0", "vllm", "meta-llama/Llama-3.1-8B-Instruct", Role.DECODE, "engine", "bf16", tp, uuids
    )


def _mig(
    uuid: str, name: str, profile: str | None, *, sku: str | None = None, parent: str | None = PARENT
) -> GpuRecord:
    return GpuRecord(
        uuid, "n0", name, sku, None, "nvml-gpm", "ok", parent_gpu_uuid=parent, mig_profile=profile
    )


def test_workers_on_mig_instances_form_groups_sized_on_their_slice() -> None:
    inventory = Inventory(
        (
            _worker("a", ("MIG-a",)),
            _worker("b", ("MIG-b",)),
            _worker("c", ("MIG-c",)),  # dcgm-exporter: the parent's name, the profile apart
            _worker("d", ("MIG-d",)),  # stored before MIG SKUs existed: the whole GPU's key
            _worker("e", ("GPU-e",), tp=1),
        ),
        (
            _mig("MIG-a", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
            _mig("MIG-b", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb", sku="H100-SXM/3g.40gb"),
            _mig("MIG-c", "NVIDIA H100 80GB HBM3", "3g.40gb"),
            _mig("MIG-d", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb", sku="H100-SXM"),
            GpuRecord("GPU-e", "n0", "NVIDIA H200", "H200-SXM", None, "nvml-gpm", "ok"),
        ),
    )
    (pool,) = build_pools(inventory, {w: i for i, w in enumerate("abcde")}, CATALOG)
    by_key = {g.key: g for g in pool.groups}
    assert set(by_key) == {"H100-SXM/3g.40gb/tp1", "H200-SXM/tp1"}
    mig = by_key["H100-SXM/3g.40gb/tp1"]
    assert mig.members == (0, 1, 2, 3) and mig.is_mig and not by_key["H200-SXM/tp1"].is_mig
    assert mig.deployment is not None
    assert mig.deployment.hbm_bytes == 40e9  # the slice's memory, never the parent's 80 GB
    assert mig.deployment.hbm_bandwidth == pytest.approx(3.35e12 * 4 / 8)
    assert mig.deployment.matmul_peak_flops == pytest.approx(989e12 * 3 / 7)


def test_an_instance_of_an_unknown_profile_is_kept_in_place_with_the_reason() -> None:
    inventory = Inventory(
        (_worker("a", ("MIG-a",)),), (_mig("MIG-a", "NVIDIA H100 80GB HBM3 MIG 5g.50gb", "5g.50gb"),)
    )
    (pool,) = build_pools(inventory, {"a": 0}, CATALOG)
    (group,) = pool.groups
    assert not group.sku.known and group.sku.is_mig and group.deployment is None
    assert any("MIG instance the catalog cannot size" in n and "5g.50gb" in n for n in pool.notes)
    gpu = inventory.gpus[0]
    assert gpu_sku(gpu, CATALOG).key == "unknown"  # never the parent's H100-SXM


def _mig_group(model: str, sku: str, rows: range, tp: int = 1) -> SkuGroup:
    d = make_deployment(CATALOG, model=model, gpu=sku, precision="fp8", tp=tp)
    return SkuGroup(d.gpu, tp, tuple(rows), d)


def test_a_70b_model_fits_no_role_on_a_1g_10gb_slice() -> None:
    one = _mig_group("llama-3.1-70b", "H100-SXM/1g.10gb", range(4, 6))
    capacity = group_capacity(one, PoolCalibration(skus={one.key: one.sku}), ISL, OSL)
    assert not capacity.prefill.fits and not capacity.decode.fits
    small = _mig_group("llama-3.1-8b", "H100-SXM/3g.40gb", range(0, 2))
    fits = group_capacity(small, PoolCalibration(skus={small.key: small.sku}), ISL, OSL)
    assert fits.prefill.fits and fits.decode.fits and fits.decode.tokens_per_s > 0
    whole = _mig_group("llama-3.1-8b", "H100-SXM", range(0, 2))
    on_whole = group_capacity(whole, PoolCalibration(skus={whole.key: whole.sku}), ISL, OSL)
    assert on_whole.decode.tokens_per_s > fits.decode.tokens_per_s  # a slice is not the whole GPU


def test_the_placement_never_moves_a_role_onto_a_slice_the_model_does_not_fit() -> None:
    groups = [
        _mig_group("llama-3.1-70b", "H100-SXM", range(0, 2), tp=2),
        _mig_group("llama-3.1-70b", "H200-SXM", range(2, 4), tp=2),
        _mig_group("llama-3.1-70b", "H100-SXM/1g.10gb", range(4, 7)),
    ]
    cal = PoolCalibration(skus={g.key: g.sku for g in groups})
    capacities = [group_capacity(g, cal, ISL, OSL) for g in groups]
    roles = [
        [(0, "decode"), (1, "decode")],  # decode on the lower-bandwidth H100s, prefill on the H200s
        [(2, "prefill"), (3, "prefill")],
        [(4, "prefill"), (5, "decode"), (6, "decode")],  # whatever the slices run, they keep it
    ]
    # The model's uncalibrated figures: the move is recommended at the bar that chooses plans (``act``
    # lowered to it), which is what this test is about; whether to act is tested in test_plan_choice.
    result = place(
        capacities, roles, isl=ISL, osl=OSL, demand_tokens_per_s=1.0, peak_demand_tokens_per_s=1.0, act=0.75
    )
    assert result.best.prefill != result.current.prefill  # the placement does move the whole GPUs
    assert result.best.prefill[2] == result.current.prefill[2] == 1
    assert all(change.group != 2 for change in result.changes)
    assert {row for change in result.changes for row in (change.row,)} <= {0, 1, 2, 3}


def test_a_group_that_fits_neither_role_keeps_its_split_in_every_candidate() -> None:
    sizes = np.array([2, 3])
    plans = candidates(sizes, np.array([10.0, 0.0]), np.array([5.0, 0.0]), np.array([0, 1]))
    assert set(plans[:, 1].tolist()) == {1}
    assert set(plans[:, 0].tolist()) == {0, 1, 2}


def _fleet_with_slices(parent: str | None = "GPU-node02-0") -> Fleet:
    slices = [
        Worker(f"node02/prefill-mig-{k}", H100_1G, "prefill", tp=1, parent_gpu=parent, mig_profile="1g.10gb")
        for k in (1, 2)
    ]
    return Fleet(
        [*workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]), *slices],
        hours=8,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
    )


@pytest.fixture(scope="module")
def with_slices() -> AnalysisResult:
    return analyze(input_from_samples(*_fleet_with_slices().columns()), CATALOG)


def test_a_pool_with_slices_too_small_for_its_model_is_placed_around_them(
    with_slices: AnalysisResult,
) -> None:
    slices = {"node02/prefill-mig-1", "node02/prefill-mig-2"}
    misplaced = {
        f.worker_id
        for f in with_slices.findings
        if f.kind in (FindingKind.DECODE_ON_LOW_BANDWIDTH, FindingKind.PREFILL_ON_HIGH_BANDWIDTH)
    }
    assert misplaced == {"node00/decode-1", "node00/decode-2", "node01/prefill-1", "node01/prefill-2"}
    placement = with_slices.pools[0].segments[-1].placement
    assert placement is not None
    assert not slices & {with_slices.grid.workers[c.row] for c in placement.changes}
    pool = with_slices.summary["pools"][0]
    assert pool["workers_by_sku_role"]["H100-SXM/1g.10gb"] == {"prefill": 2}
    assert pool["segments"][-1]["best_placement"]["H100-SXM/1g.10gb"] == {"prefill": 2, "decode": 0}
    assert any("cannot hold" in note and "1g.10gb" in note for note in pool["segments"][-1]["notes"])
    for worker in with_slices.summary["workers"]:
        if worker["worker_id"] in slices:
            assert worker["sku"] == "H100-SXM/1g.10gb" and worker["misplaced"] is not True


def test_summaries_count_physical_gpus_and_mig_instances_apart(with_slices: AnalysisResult) -> None:
    fleet = with_slices.summary["fleet"]
    # Four workers on two whole GPUs each, and two 1g.10gb instances carved from one H100.
    assert fleet["gpus"] == 10
    assert (fleet["whole_gpus"], fleet["mig_instances"], fleet["mig_parent_gpus"]) == (8, 2, 1)
    assert fleet["physical_gpus"] == 9 and fleet["physical_gpus_reason"] is None
    pool = with_slices.summary["pools"][0]
    assert (pool["whole_gpus"], pool["mig_instances"], pool["physical_gpus"]) == (8, 2, 9)


def test_an_instance_that_names_no_gpu_leaves_the_physical_count_unknown() -> None:
    result = analyze(input_from_samples(*_fleet_with_slices(parent=None).columns()), CATALOG)
    fleet = result.summary["fleet"]
    assert fleet["mig_instances"] == 2 and fleet["whole_gpus"] == 8
    assert fleet["physical_gpus"] is None  # unknown, never a guess
    assert "do not name their physical GPU" in fleet["physical_gpus_reason"]


def test_device_counts_tell_instances_by_name_when_the_source_says_nothing_else() -> None:
    inventory = Inventory(
        (),
        (
            GpuRecord("MIG-1", "n", "NVIDIA H200 MIG 1g.18gb", None, None, "prometheus", "ok"),
            GpuRecord("GPU-2", "n", "NVIDIA H200", None, None, "prometheus", "ok"),
        ),
    )
    counts = device_counts(inventory, CATALOG)
    assert (counts.devices, counts.whole_gpus, counts.mig_instances) == (2, 1, 1)
    assert counts.physical_gpus is None  # the instance's GPU is not named


def test_the_weekly_reports_data_quality_counts_physical_gpus_and_instances() -> None:
    from analyzer.report.coverage import data_quality, gpu_skus

    data = input_from_samples(*_fleet_with_slices().columns())
    quality = data_quality(data, CATALOG)
    assert (quality.gpus, quality.mig_instances, quality.mig_parent_gpus, quality.physical_gpus) == (
        10,
        2,
        1,
        9,
    )
    assert set(gpu_skus(data.inventory, CATALOG).values()) == {"H100-SXM", "H200-SXM", "H100-SXM/1g.10gb"}
    orphans = data_quality(input_from_samples(*_fleet_with_slices(parent=None).columns()), CATALOG)
    assert orphans.physical_gpus is None and orphans.mig_instances == 2
