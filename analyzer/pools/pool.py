"""Model pools: the workers that serve one model behind one router, by SKU, TP and role.

A pool is (cluster, deployment, served model id), all from the data. A group is its workers on one SKU at
one TP degree. Reasoning: docs/analyzer.md#pool
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analyzer.model.deployment import Deployment, DeploymentError, default_kv_precision
from fleet.catalog import Catalog
from fleet.contract import Role
from fleet.gpus import GpuSku, unknown_sku
from fleet.inventory import GpuRecord, WorkerRecord
from fleet.models import ModelArch
from fleet.precision import Precision, parse_precision

DEFAULT_CLUSTER = "default"


@dataclass(frozen=True)
class Inventory:
    workers: tuple[WorkerRecord, ...]
    gpus: tuple[GpuRecord, ...]

    @property
    def worker_ids(self) -> tuple[str, ...]:
        return tuple(w.worker_id for w in self.workers)

    def gpu_worker(self) -> dict[str, str]:
        """GPU UUID -> worker, from the GPUs' own attribution, else the workers' ``gpu_uuids``."""
        mapping = {u: w.worker_id for w in self.workers for u in w.gpu_uuids}
        mapping.update({g.gpu_uuid: g.worker_id for g in self.gpus if g.worker_id is not None})
        return mapping

    def unattributed_gpus(self) -> tuple[GpuRecord, ...]:
        owned = self.gpu_worker()
        return tuple(g for g in self.gpus if g.gpu_uuid not in owned)


def _latest(columns: Mapping[str, Sequence[Any]], key: str) -> dict[str, int]:
    """Index of the latest row per ``key`` value (rows are in time order)."""
    latest: dict[str, int] = {}
    for i, value in enumerate(columns[key]):
        latest[value] = i
    return latest


def inventory_from_samples(
    gpu_columns: Mapping[str, Sequence[Any]], engine_columns: Mapping[str, Sequence[Any]]
) -> Inventory:
    """The inventory raw sample columns describe (latest window wins), for runs without a store."""
    workers = []
    for worker_id, i in sorted(_latest(engine_columns, "worker_id").items()):
        workers.append(
            WorkerRecord(
                worker_id=worker_id,
                node=str(engine_columns["node"][i]),
                engine=str(engine_columns["engine"][i]),
                model=str(engine_columns["model"][i]),
                role=Role(engine_columns["role"][i]),
                role_source=str(engine_columns["role_source"][i]),
                precision=engine_columns["precision"][i],
                tp=None if engine_columns["tp"][i] is None else int(engine_columns["tp"][i]),
                gpu_uuids=tuple(engine_columns["gpu_uuids"][i] or ()),
                cluster=_optional(engine_columns, "cluster", i),
                deployment=_optional(engine_columns, "deployment", i),
                kv_capacity_tokens=_optional_int(engine_columns, "kv_capacity_tokens", i),
                max_running_requests=_optional_int(engine_columns, "max_running_requests", i),
            )
        )
    gpus = [
        GpuRecord(
            gpu_uuid=uuid,
            node=str(gpu_columns["node"][i]),
            gpu_name=str(gpu_columns["gpu_name"][i]),
            sku=None,
            worker_id=gpu_columns["worker_id"][i],
            source=str(gpu_columns["source"][i]),
            state=str(gpu_columns["state"][i]),
            cluster=_optional(gpu_columns, "cluster", i),
            parent_gpu_uuid=_optional(gpu_columns, "parent_gpu_uuid", i),
            mig_profile=_optional(gpu_columns, "mig_profile", i),
        )
        for uuid, i in sorted(_latest(gpu_columns, "gpu_uuid").items())
    ]
    return Inventory(tuple(workers), tuple(gpus))


def _optional_int(columns: Mapping[str, Sequence[Any]], key: str, i: int) -> int | None:
    values = columns.get(key)
    return None if values is None or values[i] is None else int(values[i])


def _optional(columns: Mapping[str, Sequence[Any]], key: str, i: int) -> str | None:
    values = columns.get(key)
    return None if values is None or values[i] is None else str(values[i])


def cluster_of(node: str, reported: str | None = None, overrides: Mapping[str, str] | None = None) -> str:
    """The cluster of a node: the operator's mapping, else what its collector reported, else the one
    default cluster. Never guessed from the node's name."""
    if overrides and node in overrides:
        return overrides[node]
    return reported or DEFAULT_CLUSTER


def pool_key(cluster: str, deployment: str | None, model_id: str) -> str:
    """``<cluster>/<model>``, or ``<cluster>/<deployment>/<model>`` where the deployment is known."""
    return f"{cluster}/{deployment}/{model_id}" if deployment else f"{cluster}/{model_id}"


@dataclass(frozen=True)
class SkuGroup:
    """The pool's workers on one SKU at one TP degree (``members`` are grid rows)."""

    sku: GpuSku
    tp: int
    members: tuple[int, ...]
    deployment: Deployment | None  # None where the model or SKU lacks catalog figures

    @property
    def key(self) -> str:
        return f"{self.sku.key}/tp{self.tp}"

    @property
    def gpus(self) -> int:
        """Devices the group's workers hold: GPUs, or MIG instances on a MIG SKU."""
        return self.tp * len(self.members)

    @property
    def is_mig(self) -> bool:
        return self.sku.is_mig


@dataclass(frozen=True)
class Pool:
    key: str  # pool_key(cluster, deployment, model_id)
    cluster: str
    model_id: str
    arch: ModelArch | None
    precision: Precision | None
    members: tuple[int, ...]  # grid rows of every worker in the pool
    groups: tuple[SkuGroup, ...]
    notes: tuple[str, ...]
    deployment: str | None = None
    # Members that report neither a TP degree nor their GPUs: in no SKU group, kept in place, not judged.
    unsized: tuple[int, ...] = ()
    unsized_sku: GpuSku | None = None  # the catalog's explicit unknown for them

    def group_of(self, row: int) -> SkuGroup:
        for group in self.groups:
            if row in group.members:
                return group
        raise KeyError(f"row {row} is not in any SKU group of pool {self.key}")

    def sku_of(self, row: int) -> GpuSku:
        """The SKU of a member's group, or the explicit unknown for an unsized member."""
        if row in self.unsized and self.unsized_sku is not None:
            return self.unsized_sku
        return self.group_of(row).sku


def gpu_sku(gpu: GpuRecord, catalog: Catalog) -> GpuSku:
    """The SKU of one reported device: the stored key where the catalog knows it, else its name resolved.

    A MIG instance (it names a profile, or its name carries one) resolves to its MIG SKU, never to its
    parent's: a key stored for it as the whole GPU's (before MIG SKUs existed) is derived again with the
    profile."""
    stored = catalog.gpus.lookup(gpu.sku) if gpu.sku else None
    if stored is not None and (stored.is_mig or not gpu.mig_profile):
        return stored
    if stored is not None and stored.known and gpu.mig_profile:
        return catalog.gpus.mig_sku(stored, gpu.mig_profile)
    return catalog.gpus.resolve(gpu.gpu_name, gpu.mig_profile)


def is_mig_instance(gpu: GpuRecord, catalog: Catalog) -> bool:
    """Whether a device is a MIG instance: it says so (parent or profile) or its name resolves to one."""
    return gpu.parent_gpu_uuid is not None or gpu.mig_profile is not None or gpu_sku(gpu, catalog).is_mig


# A worker none of whose GPUs is known: the catalog's explicit unknown, said without resolving a made-up name
# (which would warn the operator to catalogue a GPU that does not exist).
NO_GPU_REPORTED = unknown_sku("no GPU reported", "no GPU of the worker is known to phasefit")


def worker_sku(worker: WorkerRecord, gpus: Mapping[str, GpuRecord], catalog: Catalog) -> GpuSku:
    """The SKU most of a worker's GPUs resolve to (the catalog's explicit unknown where none does)."""
    keys: Counter[str] = Counter()
    resolved: dict[str, GpuSku] = {}
    for uuid in worker.gpu_uuids:
        gpu = gpus.get(uuid)
        if gpu is None:
            continue
        sku = gpu_sku(gpu, catalog)
        # Unknown SKUs keep their reason apart (an unknown MIG profile is not an unknown GPU model).
        key = sku.key if sku.known else f"{sku.key}:{sku.name}"
        keys[key] += 1
        resolved.setdefault(key, sku)
    if not keys:
        return NO_GPU_REPORTED
    return resolved[keys.most_common(1)[0][0]]


@dataclass(frozen=True)
class DeviceCounts:
    """Physical GPUs and MIG instances, counted apart: a GPU carved into seven MIG instances is one
    physical GPU and seven instances, never seven GPUs."""

    devices: int  # every GPU device reported or named by a worker: whole GPUs plus MIG instances
    whole_gpus: int  # devices that are whole GPUs (a device only a worker names counts here: its kind is
    # not reported)
    mig_instances: int
    mig_parent_gpus: int  # distinct physical GPUs the MIG instances are carved from (where they say)
    mig_without_parent: int  # MIG instances that do not name their physical GPU

    @property
    def physical_gpus(self) -> int | None:
        """Whole GPUs plus the GPUs carved into MIG instances; None where an instance's GPU is unknown."""
        return None if self.mig_without_parent else self.whole_gpus + self.mig_parent_gpus

    @property
    def physical_reason(self) -> str | None:
        if not self.mig_without_parent:
            return None
        return (
            f"{self.mig_without_parent} MIG instance(s) do not name their physical GPU: how many GPUs they "
            "are carved from is unknown"
        )

    def as_dict(self) -> dict[str, int | str | None]:
        return {
            "gpus": self.devices,
            "whole_gpus": self.whole_gpus,
            "mig_instances": self.mig_instances,
            "mig_parent_gpus": self.mig_parent_gpus,
            "physical_gpus": self.physical_gpus,
            "physical_gpus_reason": self.physical_reason,
        }


def device_counts(inventory: Inventory, catalog: Catalog, uuids: Iterable[str] | None = None) -> DeviceCounts:
    """Devices, whole GPUs, MIG instances and the physical GPUs under them, for the devices ``uuids`` (the
    inventory's GPUs and every GPU its workers name, where None)."""
    by_uuid = {g.gpu_uuid: g for g in inventory.gpus}
    wanted = (
        set(uuids)
        if uuids is not None
        else set(by_uuid) | {u for w in inventory.workers for u in w.gpu_uuids}
    )
    whole = mig = orphans = 0
    parents: set[str] = set()
    for uuid in wanted:
        gpu = by_uuid.get(uuid)
        if gpu is None or not is_mig_instance(gpu, catalog):
            whole += 1
            continue
        mig += 1
        if gpu.parent_gpu_uuid is not None:
            parents.add(gpu.parent_gpu_uuid)
        else:
            orphans += 1
    return DeviceCounts(len(wanted), whole, mig, len(parents), orphans)


def build_pools(
    inventory: Inventory, rows: Mapping[str, int], catalog: Catalog, clusters: Mapping[str, str] | None = None
) -> list[Pool]:
    """Group the inventory's workers (those with a grid row) into pools and SKU/TP groups."""
    gpus = {g.gpu_uuid: g for g in inventory.gpus}
    by_pool: dict[tuple[str, str, str], list[WorkerRecord]] = {}
    for worker in inventory.workers:
        if worker.worker_id in rows:
            cluster = cluster_of(worker.node, worker.cluster, clusters)
            by_pool.setdefault((cluster, worker.deployment or "", worker.model), []).append(worker)
    pools = []
    for (cluster, serving, model_id), workers in sorted(by_pool.items()):
        notes: list[str] = []
        arch = catalog.models.resolve(model_id)
        if arch is None:
            notes.append(f"model {model_id!r} is not in the catalog: capacities come from telemetry only")
        precision = _pool_precision(workers, notes)
        grouped: dict[tuple[str, int], list[int]] = {}
        skus: dict[str, GpuSku] = {}
        unsized: list[int] = []
        for worker in sorted(workers, key=lambda w: w.worker_id):
            tp = worker.tp or len(worker.gpu_uuids)
            if not tp:
                unsized.append(rows[worker.worker_id])
                continue
            sku = worker_sku(worker, gpus, catalog)
            skus[sku.key] = sku
            grouped.setdefault((sku.key, tp), []).append(rows[worker.worker_id])
        if unsized:
            notes.append(
                f"{len(unsized)} worker(s) report neither a TP degree nor their GPUs: kept in place, "
                "not judged"
            )
        groups = []
        for (sku_key, tp), members in sorted(grouped.items()):
            deployment = None
            if arch is not None and precision is not None and skus[sku_key].known:
                try:
                    deployment = Deployment(
                        model=arch,
                        gpu=skus[sku_key],
                        precision=precision,
                        kv_precision=default_kv_precision(precision),
                        tp=tp,
                    )
                except DeploymentError as exc:
                    notes.append(str(exc))
            elif not skus[sku_key].known:
                sku = skus[sku_key]
                what = (
                    f"a MIG instance the catalog cannot size ({sku.notes})"
                    if sku.is_mig
                    else "an unknown GPU model"
                )
                notes.append(f"{len(members)} worker(s) on {what}: kept where they are")
            if skus[sku_key].is_mig and tp > 1:
                notes.append(
                    f"{len(members)} worker(s) span {tp} MIG instances ({sku_key}): MIG instances have no "
                    "peer-to-peer links, so their all-reduces are modelled over PCIe"
                )
            groups.append(SkuGroup(skus[sku_key], tp, tuple(members), deployment))
        pools.append(
            Pool(
                key=pool_key(cluster, serving or None, model_id),
                cluster=cluster,
                model_id=model_id,
                arch=arch,
                precision=precision,
                members=tuple(sorted(rows[w.worker_id] for w in workers)),
                groups=tuple(groups),
                notes=tuple(notes),
                deployment=serving or None,
                unsized=tuple(sorted(unsized)),
                unsized_sku=NO_GPU_REPORTED if unsized else None,
            )
        )
    return pools


def _pool_precision(workers: Sequence[WorkerRecord], notes: list[str]) -> Precision | None:
    spelled = Counter(w.precision for w in workers if w.precision)
    if not spelled:
        notes.append("no worker reports its precision: assumed bf16")
        return Precision.BF16
    text = spelled.most_common(1)[0][0]
    try:
        return parse_precision(text)
    except ValueError:
        notes.append(f"precision {text!r} is not understood: capacities come from telemetry only")
        return None
