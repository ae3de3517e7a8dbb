"""The dashboard counts physical GPUs and MIG instances apart, and shows what a judged worker rests on."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine

from dashboard.compute import device_line, headline, scoped_groups
from dashboard.store_source import StoreSource, device_sku
from dashboard.views import AnalysisView, GpuGroup, Inventory, Scope, WorkerView
from fleet.contract import Role
from fleet.ingest import catalog_sku_resolver
from fleet.inventory import WorkerRecord
from fleet.store.engine import writing
from fleet.store.stored_summary import StoredSummary
from fleet.store.writer import write_samples
from tests.fleet.store_factories import engine_sample, gpu_sample

MIG_NAME = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


def _seed(engine: Engine) -> None:
    """worker-0 on two whole H200s; worker-1 on three 1g.10gb instances of one H100, one of them stored the
    way the store did before MIG SKUs (its parent's key)."""
    whole = [gpu_sample(g, gpu_name="NVIDIA H200", worker_id="worker-0") for g in (0, 1)]
    instances = [
        gpu_sample(
            g,
            gpu_uuid=f"MIG-{g}",
            gpu_name=MIG_NAME,
            worker_id="worker-1",
            parent_gpu_uuid="GPU-H100-PARENT",
            mig_profile="1g.10gb",
            sm_active=None,
            tensor_active=None,
            dram_active=None,
            gpu_util=None,
            gr_engine_active=0.9,
            mem_copy_util=0.7,
        )
        for g in (2, 3)
    ]
    engines = [
        engine_sample(0, gpu_uuids=["GPU-0000", "GPU-0001"]),
        engine_sample(1, tp=3, gpu_uuids=["MIG-2", "MIG-3", "MIG-4"]),
    ]
    with writing(engine) as connection:
        write_samples(connection, [*whole, *instances, *engines], sku_resolver=catalog_sku_resolver())
        old = gpu_sample(
            4,
            gpu_uuid="MIG-4",
            gpu_name=MIG_NAME,
            worker_id="worker-1",
            parent_gpu_uuid="GPU-H100-PARENT",
            mig_profile="1g.10gb",
        )
        write_samples(connection, [old], sku_resolver=lambda name, _mig: "H100-SXM")


def test_the_store_inventory_counts_physical_gpus_and_instances_apart(store_engine: Engine) -> None:
    _seed(store_engine)
    inventory = StoreSource(store_engine).inventory()
    groups = {(g.sku, g.mig): g.gpus for g in inventory.groups}
    assert groups == {("H200-SXM", False): 2, ("H100-SXM/1g.10gb", True): 3}
    assert (inventory.whole_gpus, inventory.mig_instances) == (2, 3)
    assert inventory.physical_gpus == 3 and inventory.mig_parent_gpus == 1  # two H200s, one carved H100
    skus = {w.record.worker_id: w.sku for w in inventory.workers}
    assert skus == {"worker-0": "H200-SXM", "worker-1": "H100-SXM/1g.10gb"}
    assert device_line(inventory, inventory.groups, whole_fleet=True) == (
        "3 physical GPUs: 2 whole GPUs and 3 MIG instances carved from 1 GPU(s)"
    )


def test_an_instance_without_its_gpu_makes_the_physical_count_unknown(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        write_samples(
            connection,
            [gpu_sample(0, gpu_name=MIG_NAME, mig_profile="1g.10gb"), gpu_sample(1, gpu_name="NVIDIA H200")],
            sku_resolver=catalog_sku_resolver(),
        )
    inventory = StoreSource(store_engine).inventory()
    assert inventory.physical_gpus is None and inventory.mig_instances == 1
    assert "physical GPUs unknown" in device_line(inventory, inventory.groups, whole_fleet=True)


def test_device_keys_and_scoped_groups() -> None:
    assert device_sku("H100-SXM", "1g.10gb+me") == "H100-SXM/1g.10gb"  # stored under the parent: re-keyed
    assert device_sku("H100-SXM/1g.10gb", "1g.10gb") == "H100-SXM/1g.10gb"
    assert device_sku("H100-SXM", None) == "H100-SXM" and device_sku(None, "1g.10gb") is None
    assert device_sku("unknown", "5g.50gb") == "unknown"

    def worker(worker_id: str, sku: str, tp: int) -> WorkerView:
        record = WorkerRecord(worker_id, "n", "vllm", "m", Role.DECODE, "engine", "fp8", tp, ())
        return WorkerView(record, "c", sku)

    inventory = Inventory(
        (worker("a", "H200-SXM", 2), worker("b", "H100-SXM/3g.40gb", 1), worker("c", "H100-SXM/3g.40gb", 1)),
        (),
        None,
    )
    groups = scoped_groups(
        inventory, Scope(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), "c")
    )
    assert groups == [
        GpuGroup("H100-SXM/3g.40gb", "decode", "ok", 2, mig=True),
        GpuGroup("H200-SXM", "decode", "ok", 2, mig=False),
    ]
    assert device_line(inventory, groups, whole_fleet=False) == (
        "2 whole GPUs and 2 MIG instances in the selection"
    )
    assert device_line(inventory, groups[1:], whole_fleet=True) == "2 GPUs, no MIG instances"


def test_the_headline_carries_what_judged_workers_rest_on() -> None:
    analysis = AnalysisView(
        created_at=datetime(2026, 1, 2, tzinfo=UTC),
        since=datetime(2026, 1, 1, tzinfo=UTC),
        until=datetime(2026, 1, 2, tzinfo=UTC),
        summary=StoredSummary.read(
            {
                "fleet": {
                    "judged_workers": 3,
                    "unjudged_workers": 1,
                    "judged_by_evidence": {"profiling": 1, "utilisation": 2},
                    "misplaced_workers": 2,
                }
            }
        ),
    )
    head = headline(analysis, [], [])
    assert head.judged_by_evidence == {"profiling": 1, "utilisation": 2}
    assert headline(None, [], []).judged_by_evidence == {}
