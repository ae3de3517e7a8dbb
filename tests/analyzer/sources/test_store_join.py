"""Store mode's join by pod (analyzer/sources/store.py ``join_by_pod``): an engine known by its pod holds
the GPUs dcgm-exporter reported under that pod; a join that fails is reported as one, with what was tried."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analyzer.pipeline import AnalysisInput
from analyzer.pools.pool import Inventory
from analyzer.sources.store import join_by_pod, rename_gpu_owners
from fleet.contract import Role
from fleet.inventory import GpuRecord, WorkerRecord


def _worker(worker_id: str, gpus: tuple[str, ...] = (), node: str = "node-a") -> WorkerRecord:
    return WorkerRecord(worker_id, node, "vllm", "m", Role.DECODE, "engine", None, None, gpus)


def _gpu(uuid: str, owner: str | None, node: str = "node-a") -> GpuRecord:
    return GpuRecord(uuid, node, "NVIDIA H100 80GB HBM3", "H100-SXM", owner, "dcgm", "ok")


def test_an_engine_named_by_its_pod_alone_joins_the_gpus_of_namespace_slash_pod() -> None:
    inventory = Inventory((_worker("decode-0"),), (_gpu("GPU-1", "llm/decode-0"), _gpu("GPU-2", None)))
    joined, notes = join_by_pod(inventory)
    assert joined.gpu_worker() == {"GPU-1": "decode-0"}
    (worker,) = joined.workers
    assert worker.gpu_uuids == ("GPU-1",) and worker.gpu_join == "pod-resources"
    assert notes == [
        "1 engine(s) joined to their GPUs by pod name on dcgm-exporter's series: decode-0 <- llm/decode-0"
    ]


def test_an_engine_already_holding_gpus_is_left_alone() -> None:
    inventory = Inventory((_worker("llm/decode-0"),), (_gpu("GPU-1", "llm/decode-0"),))
    joined, notes = join_by_pod(inventory)
    assert joined == inventory and notes == []


def test_two_pods_of_one_name_are_ambiguous_and_reported() -> None:
    inventory = Inventory((_worker("decode-0"),), (_gpu("GPU-1", "a/decode-0"), _gpu("GPU-2", "b/decode-0")))
    joined, notes = join_by_pod(inventory)
    assert joined.gpu_worker() == {"GPU-1": "a/decode-0", "GPU-2": "b/decode-0"}
    (note,) = notes
    assert "engine 'decode-0' (vllm, node 'node-a') could not be joined to a GPU" in note
    assert "2 pods of that name: ambiguous" in note


def test_an_engine_known_by_its_url_names_what_was_tried() -> None:
    inventory = Inventory((_worker("10.0.0.5:8000"),), (_gpu("GPU-1", "llm/decode-0"), _gpu("GPU-2", None)))
    joined, notes = join_by_pod(inventory)
    assert joined == inventory
    (note,) = notes
    assert "'10.0.0.5:8000'" in note and "collector join: none" in note
    assert (
        "pods on dcgm-exporter's series on node 'node-a': llm/decode-0; 1 GPU(s) there without a pod" in note
    )
    assert "mapping file" in note and "the join failed" in note


def test_a_pod_replaced_on_its_gpus_still_holds_them_and_is_no_failed_join() -> None:
    """A Deployment rollout: the old pod reported its GPUs, which the new pod's series name now."""
    gpus = (_gpu("GPU-1", "llm/prefill-new"), _gpu("GPU-2", "llm/prefill-new"))
    old, new = _worker("llm/decode-old", ("GPU-1", "GPU-2")), _worker("llm/prefill-new", ("GPU-1", "GPU-2"))
    joined, notes = join_by_pod(Inventory((old, new), gpus))
    assert notes == [] and joined.workers == (old, new)


def test_gpu_buckets_keep_the_owner_their_samples_named_renamed_as_the_join_renamed_it() -> None:
    """Before a pod replacement the GPU's buckets are the old pod's, after it the new pod's (read all as
    the new pod's, the old one's telemetry looked missing); a pod named without its namespace becomes its
    engine; a bucket naming no pod takes its GPU's owner."""
    inventory = Inventory(
        (_worker("llm/decode-old", ("GPU-1",)), _worker("prefill-new"), _worker("llm/decode-2", ("GPU-3",))),
        (_gpu("GPU-1", "llm/prefill-new"), _gpu("GPU-3", "llm/decode-2")),
    )
    owners: list[str | None] = ["llm/decode-old", "llm/prefill-new", None]
    buckets: dict[str, Sequence[Any]] = {"gpu_uuid": ["GPU-1", "GPU-1", "GPU-3"], "worker_id": owners}
    data = AnalysisInput(inventory, buckets, {}, 0.0, 180.0)
    joined, _ = join_by_pod(inventory)
    renamed = rename_gpu_owners(data, joined)
    assert renamed.gpu_buckets["worker_id"] == ["llm/decode-old", "prefill-new", "llm/decode-2"]
    assert renamed.inventory.gpu_worker() == {"GPU-1": "prefill-new", "GPU-3": "llm/decode-2"}
