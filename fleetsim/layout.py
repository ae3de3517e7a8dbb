"""The simulated fleet's layout: nodes, GPUs and workers with stable, readable identities.

Node keys are ``<prefix><NN>`` in the order of the scenario's node groups; a worker's key is
``<node key>/<role>-<k>`` (k counts from 1 per node and role) and it holds ``tp`` consecutive GPUs (or
MIG slices) of its node. The names records carry follow the scenario's naming style (fleetsim.naming);
in the default style they are the keys. GPU UUIDs derive from the scenario name, node key and index
(UUID 5), so they are the same for every seed. A MIG slice is a device of its own ("MIG-" UUID, the
parent's NVML name plus " MIG <profile>") with the parent's compute and bandwidth in proportion.
Each GPU has a fixed efficiency ("speed", about 1 +- the scenario's spread) drawn from the scenario name:
a property of the chip, not of the run. ``change_ids`` holds, per scenario role change, the id of the
pod that replaces the worker (``replace_pods``; None for a change in place), named after every worker
so that adding changes never renames the fleet.
"""

from __future__ import annotations

import dataclasses
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fleet.catalog import Catalog
from fleet.contract import Role
from fleet.gpus import GpuSku
from fleet.models import ModelArch, kv_bytes_per_token, weight_bytes
from fleet.precision import Precision, parse_precision
from fleetsim.naming import Namer
from fleetsim.physics import EngineConfig, WorkerHardware
from fleetsim.scenario import PoolSpec, Scenario, ScenarioError, WorkerRole

_UUID_NAMESPACE = uuid.UUID("6f1c2b9e-6a53-4c52-9f0e-3f4f1f5b7a21")
_ROLE_ORDER: tuple[WorkerRole, ...] = ("prefill", "decode", "mixed")


@dataclass(frozen=True)
class SimGpu:
    index: int  # position in the fleet
    node: int
    local_index: int
    uuid: str
    sku: GpuSku
    nvml_name: str
    worker: int  # worker index, -1 when the GPU serves nothing
    speed: float
    cluster: str | None = None  # the node's cluster (its group's pool's)
    basic: bool = False  # dcgm-exporter without profiling fields
    parent_uuid: str | None = None  # a MIG slice's GPU
    mig_profile: str | None = None


@dataclass(frozen=True)
class SimWorker:
    index: int
    worker_id: str
    node: int
    pool: int
    role: Role
    sku: GpuSku
    gpus: tuple[int, ...]
    speed: float  # the group's pace: its slowest GPU
    key: str = ""  # the scenario's name for it: <node key>/<role>-<k>


@dataclass(frozen=True)
class SimPool:
    index: int
    spec: PoolSpec
    model: ModelArch
    precision: Precision
    kv_precision: Precision
    engine: EngineConfig
    workers: tuple[int, ...]


@dataclass(frozen=True)
class FleetLayout:
    nodes: tuple[str, ...]
    gpus: tuple[SimGpu, ...]
    workers: tuple[SimWorker, ...]
    pools: tuple[SimPool, ...]
    node_keys: tuple[str, ...] = ()  # nodeNN keys, as scenario events name the nodes
    node_pools: tuple[int, ...] = ()  # the pool each node's group serves
    change_ids: tuple[str | None, ...] = ()  # per scenario change: the replacing pod's id (None: in place)

    def worker_by_id(self) -> dict[str, SimWorker]:
        return {w.worker_id: w for w in self.workers}

    def worker_by_key(self) -> dict[str, SimWorker]:
        return {w.key: w for w in self.workers}

    def node_index(self, key: str) -> int | None:
        """A node by its nodeNN key (or by its reported name)."""
        for names in (self.node_keys, self.nodes):
            if key in names:
                return names.index(key)
        return None

    def hardware(self, worker: SimWorker) -> WorkerHardware:
        pool = self.pools[worker.pool]
        return WorkerHardware(
            sku=worker.sku,
            model=pool.model,
            precision=pool.precision,
            kv_precision=pool.kv_precision,
            tp=pool.spec.tp,
            speed=worker.speed,
            ep=pool.spec.ep or 1,
        )


def _nvml_name(sku: GpuSku) -> str:
    return sku.nvml_names[0] if sku.nvml_names else f"NVIDIA {sku.name}"


def _mig_sku(sku: GpuSku, profile: str) -> GpuSku:
    """A MIG slice as a SKU: its memory, and the parent's compute and bandwidth in proportion."""
    compute = int(profile.split("g.", maxsplit=1)[0]) / 7.0
    memory = float(profile.split("g.")[1].removesuffix("gb")) * 1e9
    share = min(1.0, memory / float(sku.hbm_bytes or memory))

    def scaled(value: float | None, by: float) -> float | None:
        return None if value is None else value * by

    return dataclasses.replace(
        sku,
        key=f"{sku.key}-MIG-{profile}",
        hbm_bytes=int(memory),
        hbm_bandwidth_bytes_per_s=scaled(sku.hbm_bandwidth_bytes_per_s, share),
        bf16_dense_flops=scaled(sku.bf16_dense_flops, compute),
        fp8_dense_flops=scaled(sku.fp8_dense_flops, compute),
        fp4_dense_flops=scaled(sku.fp4_dense_flops, compute),
        tdp_w=scaled(sku.tdp_w, compute),
        interconnect=None,
        interconnect_bytes_per_s=None,
    )


def _pool(index: int, spec: PoolSpec, catalog: Catalog) -> SimPool:
    model = catalog.models.resolve(spec.model)
    if model is None:
        known = ", ".join(sorted(catalog.models.models))
        raise ScenarioError(f"pool {spec.name!r}: model {spec.model!r} is not in the model catalog ({known})")
    try:
        precision = parse_precision(spec.precision)
        if spec.kv_precision is not None:
            kv_precision = parse_precision(spec.kv_precision)
        else:
            kv_precision = Precision.BF16 if precision in (Precision.INT4, Precision.FP4) else precision
    except ValueError as exc:
        raise ScenarioError(f"pool {spec.name!r}: {exc}") from exc
    _check_ep(index, spec, model)
    engine = EngineConfig(
        max_batch=spec.max_batch,
        token_budget=spec.token_budget,
        hbm_utilization=spec.hbm_utilization,
        runtime_reserve_bytes=spec.runtime_reserve_gb * 1e9,
    )
    return SimPool(index, spec, model, precision, kv_precision, engine, ())


def _check_ep(index: int, spec: PoolSpec, model: ModelArch) -> None:
    """Expert parallelism needs experts, split evenly across the expert-parallel ranks."""
    ep = spec.ep or 1
    if ep == 1:
        return
    where = f"pools[{index}].ep (pool {spec.name!r})"
    experts = model.experts_total
    if not experts:
        raise ScenarioError(f"{where}: ep {ep} needs a mixture-of-experts model; {model.name} has no experts")
    if experts % ep:
        raise ScenarioError(f"{where}: ep {ep} does not divide {model.name}'s {experts} routed experts")


def build_layout(
    scenario: Scenario, catalog: Catalog, roles: Mapping[str, Role] | None = None
) -> FleetLayout:
    """The fleet a scenario describes; ``roles`` overrides workers' roles by id or key (a re-simulation)."""
    pools = [_pool(i, spec, catalog) for i, spec in enumerate(scenario.pools)]
    pool_index = {p.spec.name: p.index for p in pools}
    total_nodes = sum(group.count for group in scenario.nodes)
    width = max(2, len(str(total_nodes - 1)))
    spread_rng = np.random.default_rng(zlib.crc32(scenario.name.encode()))
    namer = Namer(scenario)
    overrides = roles or {}
    nodes: list[str] = []
    keys: list[str] = []
    node_pools: list[int] = []
    gpus: list[SimGpu] = []
    workers: list[SimWorker] = []
    pool_workers: dict[int, list[int]] = {p.index: [] for p in pools}
    for g_index, group in enumerate(scenario.nodes):
        try:
            parent = catalog.gpus.get(group.sku)
        except KeyError as exc:
            raise ScenarioError(f"nodes[{g_index}].sku: {exc.args[0]}") from None
        sku = _mig_sku(parent, group.mig) if group.mig else parent
        pool = pools[pool_index[group.pool]]
        tp = pool.spec.tp
        basic = (group.telemetry or scenario.telemetry) == "basic"
        devices = group.devices
        for _ in range(group.count):
            node = len(nodes)
            key = f"{scenario.node_prefix}{node:0{width}d}"
            node_name = namer.node(key, g_index, group, pool.spec.cluster)
            nodes.append(node_name)
            keys.append(key)
            node_pools.append(pool.index)
            speeds = np.clip(
                1.0 + scenario.life.efficiency_spread * spread_rng.standard_normal(group.gpus), 0.85, 1.15
            )
            speeds = np.repeat(speeds, group.mig_slices)
            first_gpu = len(gpus)
            owner = [-1] * devices
            slot = 0
            for role in _ROLE_ORDER:
                for k in range(group.workers.get(role, 0)):
                    worker_key = f"{key}/{role}-{k + 1}"
                    worker_id = namer.worker(worker_key, node_name, pool.spec.deployment_name, role)
                    chosen = Role(overrides.get(worker_id, overrides.get(worker_key, Role(role))))
                    members = tuple(range(first_gpu + slot, first_gpu + slot + tp))
                    for m in members:
                        owner[m - first_gpu] = len(workers)
                    workers.append(
                        SimWorker(
                            index=len(workers),
                            worker_id=worker_id,
                            node=node,
                            pool=pool.index,
                            role=chosen,
                            sku=sku,
                            gpus=members,
                            speed=float(speeds[slot : slot + tp].min()),
                            key=worker_key,
                        )
                    )
                    pool_workers[pool.index].append(len(workers) - 1)
                    slot += tp
            for local in range(devices):
                physical = local // group.mig_slices
                gpu_uuid = f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{scenario.name}/{key}/{physical}')}"
                device_uuid, parent_uuid, name = gpu_uuid, None, _nvml_name(parent)
                if group.mig:
                    parent_uuid = gpu_uuid
                    device_uuid = (
                        f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{gpu_uuid}/{local % group.mig_slices}')}"
                    )
                    name = f"{name} MIG {group.mig}"
                gpus.append(
                    SimGpu(
                        index=len(gpus),
                        node=node,
                        local_index=physical,
                        uuid=device_uuid,
                        sku=sku,
                        nvml_name=name,
                        worker=owner[local],
                        speed=float(speeds[local]),
                        cluster=pool.spec.cluster,
                        basic=basic,
                        parent_uuid=parent_uuid,
                        mig_profile=group.mig,
                    )
                )
    _check_fit(pools, workers)
    change_ids = _change_ids(scenario, namer, workers, nodes, pools)
    final_pools = tuple(
        SimPool(p.index, p.spec, p.model, p.precision, p.kv_precision, p.engine, tuple(pool_workers[p.index]))
        for p in pools
    )
    layout = FleetLayout(
        tuple(nodes), tuple(gpus), tuple(workers), final_pools, tuple(keys), tuple(node_pools), change_ids
    )
    _check_references(scenario, layout)
    return layout


def _change_ids(
    scenario: Scenario,
    namer: Namer,
    workers: Sequence[SimWorker],
    nodes: Sequence[str],
    pools: Sequence[SimPool],
) -> tuple[str | None, ...]:
    """Per scenario change, the id of the pod that replaces the worker (None: in place), named in time
    order after every worker of the layout."""
    by_key = {w.key: w for w in workers}
    out: list[str | None] = [None] * len(scenario.changes)
    order = sorted(range(len(scenario.changes)), key=lambda i: (scenario.changes[i].at_hour, i))
    for i in order:
        change = scenario.changes[i]
        worker = by_key.get(change.worker)
        if not change.replace_pods or worker is None:
            continue
        deployment = pools[worker.pool].spec.deployment_name
        out[i] = namer.replacement(worker.key, nodes[worker.node], deployment, change.to_role)
    return tuple(out)


def _check_references(scenario: Scenario, layout: FleetLayout) -> None:
    """Every node and worker a scenario's events name exists."""
    by_key = layout.worker_by_key()
    named = [(f"labels[{i}]", s.worker, s.node) for i, s in enumerate(scenario.labels)]
    named += [(f"life.drained[{i}]", s.worker, None) for i, s in enumerate(scenario.life.drained)]
    named += [(f"life.degraded[{i}]", None, s.node) for i, s in enumerate(scenario.life.degraded)]
    for where, worker, node in named:
        if worker is not None and worker not in by_key:
            raise ScenarioError(f"{where}: no worker {worker!r} (workers are named <node key>/<role>-<k>)")
        if node is not None and layout.node_index(node) is None:
            raise ScenarioError(f"{where}: no node {node!r}")


def _check_fit(pools: Sequence[SimPool], workers: Sequence[SimWorker]) -> None:
    """Every worker's weights must fit its GPUs with room for some KV cache."""
    for w in workers:
        pool = pools[w.pool]
        tp = pool.spec.tp
        per_gpu = weight_bytes(pool.model, pool.precision) / tp
        room = (
            (w.sku.hbm_bytes or 0) * pool.engine.hbm_utilization - per_gpu - pool.engine.runtime_reserve_bytes
        )
        kv_token = kv_bytes_per_token(pool.model, pool.kv_precision) / min(tp, pool.model.kv_heads)
        if room < 1024 * kv_token:
            raise ScenarioError(
                f"worker {w.worker_id}: {pool.model.name} at {pool.precision} TP {tp} does not fit a "
                f"{w.sku.name} with room for a KV cache (weights {per_gpu / 1e9:.1f} GB per GPU)"
            )
