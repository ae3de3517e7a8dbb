from __future__ import annotations

import pytest

from analyzer.pools.pool import (
    DEFAULT_CLUSTER,
    Inventory,
    build_pools,
    cluster_of,
    inventory_from_samples,
    pool_key,
)
from fleet.catalog import load_catalog
from fleet.contract import Role
from fleet.inventory import GpuRecord, WorkerRecord
from fleet.precision import Precision
from tests.analyzer.synthetic import H100, H200, Fleet, Worker, workers

CATALOG = load_catalog()


@pytest.mark.parametrize(
    "node", ["node06", "gpu-a-017", "ip-10-0-37-142.ec2.internal", "gke-prod-a3-pool-1-8f2c3d1e-x7k2", "42"]
)
def test_a_node_name_never_makes_a_cluster(node: str) -> None:
    assert cluster_of(node) == DEFAULT_CLUSTER
    assert cluster_of(node, "eu-west") == "eu-west"


def test_an_operator_mapping_overrides_the_reported_cluster() -> None:
    assert cluster_of("node06", "eu-west", {"node06": "east"}) == "east"
    assert cluster_of("node07", "eu-west", {"node06": "east"}) == "eu-west"


def test_pool_keys_name_the_deployment_only_where_known() -> None:
    assert pool_key("east", None, "org/m") == "east/org/m"
    assert pool_key("east", "ns/llama", "org/m") == "east/ns/llama/org/m"


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
    assert pool.key == "default/meta-llama/Llama-3.1-70B-Instruct"
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
            WorkerRecord("a1/w", "a1", "vllm", "acme/Mystery-9B", Role.DECODE, "engine", "fp7", 1, ("g1",)),
            WorkerRecord("a2/w", "a2", "vllm", "acme/Mystery-9B", Role.PREFILL, "engine", None, 1, ("g2",)),
        ),
        gpus=(
            GpuRecord("g1", "a1", "NVIDIA Quantum GPU 9000", None, "a1/w", "dcgm", "ok"),
            GpuRecord("g2", "a2", H100, "H100-SXM", "a2/w", "dcgm", "ok"),
        ),
    )
    (pool,) = build_pools(inventory, {"a1/w": 0, "a2/w": 1}, CATALOG)
    assert pool.key == "default/acme/Mystery-9B"
    assert pool.arch is None
    assert any("not in the catalog" in note for note in pool.notes)
    assert any("unknown GPU model" in note for note in pool.notes)
    assert all(g.deployment is None for g in pool.groups)
    assert {g.sku.key for g in pool.groups} == {"unknown", "H100-SXM"}


def _inventory(*entries: tuple[str, str, str | None, str | None]) -> Inventory:
    """(worker id, node, cluster, deployment) of 70B decode workers, one H100 each."""
    model = "meta-llama/Llama-3.1-70B-Instruct"
    return Inventory(
        workers=tuple(
            WorkerRecord(w, node, "vllm", model, Role.DECODE, "engine", "fp8", 1, (f"g-{w}",), cluster, dep)
            for w, node, cluster, dep in entries
        ),
        gpus=tuple(GpuRecord(f"g-{w}", node, H100, "H100-SXM", w, "dcgm", "ok") for w, node, _, _ in entries),
    )


def test_workers_with_unrelated_node_names_share_a_pool_absent_a_cluster() -> None:
    inventory = _inventory(
        ("a", "ip-10-0-37-142.ec2.internal", None, None),
        ("b", "gke-prod-a3-pool-1-8f2c3d1e-x7k2", None, None),
        ("c", "gpu-r3u17.dc2.example.net", None, None),
    )
    (pool,) = build_pools(inventory, {"a": 0, "b": 1, "c": 2}, CATALOG)
    assert pool.key == "default/meta-llama/Llama-3.1-70B-Instruct" and len(pool.members) == 3


def test_clusters_and_deployments_from_the_records_keep_pools_apart() -> None:
    inventory = _inventory(
        ("a", "n1", "east", "serving/llama"),
        ("b", "n2", "east", "serving/llama"),
        ("c", "n3", "east", "canary/llama"),
        ("d", "n4", "west", "serving/llama"),
    )
    rows = {"a": 0, "b": 1, "c": 2, "d": 3}
    pools = build_pools(inventory, rows, CATALOG)
    assert [(p.cluster, p.deployment, len(p.members)) for p in pools] == [
        ("east", "canary/llama", 1),
        ("east", "serving/llama", 2),
        ("west", "serving/llama", 1),
    ]
    merged = build_pools(inventory, rows, CATALOG, {"n4": "east"})
    assert [len(p.members) for p in merged] == [1, 3]


def test_the_samples_carry_cluster_and_deployment_into_the_inventory() -> None:
    fleet = Fleet(workers([("east01", H100, 1, 1)]), hours=1)
    gpu, engine = fleet.columns()
    engine["cluster"] = ["east"] * len(engine["ts"])
    engine["deployment"] = ["ns/llama"] * len(engine["ts"])
    inventory = inventory_from_samples(gpu, engine)
    assert {(w.cluster, w.deployment) for w in inventory.workers} == {("east", "ns/llama")}
    rows = {w: i for i, w in enumerate(inventory.worker_ids)}
    (pool,) = build_pools(inventory, rows, CATALOG)
    assert pool.key == "east/ns/llama/meta-llama/Llama-3.1-70B-Instruct"
