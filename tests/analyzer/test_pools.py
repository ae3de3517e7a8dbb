from __future__ import annotations

import pytest

from analyzer.pools import GpuSpec, Inventory, WorkerSpec, build_pools, cluster_of, inventory_from_samples
from fleet.catalog import load_catalog
from fleet.contract import Role
from fleet.precision import Precision
from tests.analyzer.synthetic import H100, H200, Fleet, Worker, workers

CATALOG = load_catalog()


@pytest.mark.parametrize(
    ("node", "cluster"),
    [
        ("node06", "node"),
        ("gpu-a-017", "gpu-a"),
        ("east.gpu.3", "east.gpu"),
        ("lonely", "lonely"),
        ("42", "42"),
    ],
)
def test_the_cluster_is_the_node_name_without_its_number(node: str, cluster: str) -> None:
    assert cluster_of(node) == cluster


def test_an_explicit_mapping_wins() -> None:
    assert cluster_of("node06", {"node06": "east"}) == "east"


def test_inventory_keeps_the_latest_report() -> None:
    fleet = Fleet(workers([("node00", H100, 1, 1)]), hours=2)
    gpu, engine = fleet.columns()
    engine["role"][-1] = "mixed"  # the decode worker's last window says mixed
    inventory = inventory_from_samples(gpu, engine)
    by_id = {w.worker_id: w for w in inventory.workers}
    assert by_id["node00/decode-1"].role is Role.MIXED
    assert by_id["node00/prefill-1"].gpu_uuids == ("GPU-node00-prefill-1-0", "GPU-node00-prefill-1-1")
    assert len(inventory.gpus) == 4
    assert inventory.gpu_worker()["GPU-node00-decode-1-1"] == "node00/decode-1"
    assert inventory.unattributed_gpus() == ()


def test_pools_group_workers_by_sku_and_tp() -> None:
    fleet = Fleet(
        [
            *workers([("node00", H100, 2, 1), ("node01", H200, 1, 2)]),
            Worker("node02/prefill-1", H200, "prefill", tp=4),
        ],
        hours=1,
    )
    gpu, engine = fleet.columns()
    inventory = inventory_from_samples(gpu, engine)
    rows = {w: i for i, w in enumerate(inventory.worker_ids)}
    (pool,) = build_pools(inventory, rows, CATALOG)
    assert pool.key == "node/meta-llama/Llama-3.1-70B-Instruct"
    assert pool.arch is not None and pool.arch.key == "llama-3.1-70b"
    assert pool.precision is Precision.FP8
    assert [(g.key, len(g.members)) for g in pool.groups] == [
        ("H100-SXM/tp2", 3),
        ("H200-SXM/tp2", 3),
        ("H200-SXM/tp4", 1),
    ]
    assert all(g.deployment is not None for g in pool.groups)
    assert pool.group_of(rows["node02/prefill-1"]).tp == 4
    assert sum(g.gpus for g in pool.groups) == 16


def test_unknown_models_gpus_and_precisions_are_reported_not_guessed() -> None:
    inventory = Inventory(
        workers=(
            WorkerSpec("a1/w", "a1", "vllm", "acme/Mystery-9B", Role.DECODE, "engine", "fp7", 1, ("g1",)),
            WorkerSpec("a2/w", "a2", "vllm", "acme/Mystery-9B", Role.PREFILL, "engine", None, 1, ("g2",)),
        ),
        gpus=(
            GpuSpec("g1", "a1", "NVIDIA Quantum GPU 9000", None, "a1/w", "dcgm", "ok"),
            GpuSpec("g2", "a2", H100, "H100-SXM", "a2/w", "dcgm", "ok"),
        ),
    )
    (pool,) = build_pools(inventory, {"a1/w": 0, "a2/w": 1}, CATALOG)
    assert pool.key == "a/acme/Mystery-9B"
    assert pool.arch is None
    assert any("not in the catalog" in note for note in pool.notes)
    assert any("unknown GPU model" in note for note in pool.notes)
    assert all(g.deployment is None for g in pool.groups)
    assert {g.sku.key for g in pool.groups} == {"unknown", "H100-SXM"}


def test_clusters_keep_pools_of_the_same_model_apart() -> None:
    fleet = Fleet(workers([("east01", H100, 1, 1), ("west01", H200, 1, 1)]), hours=1)
    gpu, engine = fleet.columns()
    inventory = inventory_from_samples(gpu, engine)
    rows = {w: i for i, w in enumerate(inventory.worker_ids)}
    assert [p.cluster for p in build_pools(inventory, rows, CATALOG)] == ["east", "west"]
    merged = build_pools(inventory, rows, CATALOG, {"east01": "dc1", "west01": "dc1"})
    assert [p.key for p in merged] == ["dc1/meta-llama/Llama-3.1-70B-Instruct"]
