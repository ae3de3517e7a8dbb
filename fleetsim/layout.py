"""The simulated fleet's layout: nodes, GPUs and workers with stable, readable identities.

Node names are ``<prefix><NN>`` in the order of the scenario's node groups; a worker is
``<node>/<role>-<k>`` (k counts from 1 per node and role) and holds ``tp`` consecutive GPUs of its node.
GPU UUIDs derive from the scenario name, node and index (UUID 5), so they are the same for every seed.
Each GPU has a fixed efficiency ("speed", about 1 +- the scenario's spread) drawn from the scenario name:
a property of the chip, not of the run.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fleetsim.physics import EngineConfig, WorkerHardware
from fleetsim.scenario import PoolSpec, Scenario, ScenarioError, WorkerRole
from fleet.catalog import Catalog
from fleet.contract import Role
from fleet.gpus import GpuSku
from fleet.models import ModelArch, kv_bytes_per_token, weight_bytes
from fleet.precision import Precision, parse_precision

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

    def worker_by_id(self) -> dict[str, SimWorker]:
        return {w.worker_id: w for w in self.workers}

    def hardware(self, worker: SimWorker) -> WorkerHardware:
        pool = self.pools[worker.pool]
        return WorkerHardware(
            sku=worker.sku,
            model=pool.model,
            precision=pool.precision,
            kv_precision=pool.kv_precision,
            tp=pool.spec.tp,
            speed=worker.speed,
        )


def _nvml_name(sku: GpuSku) -> str:
    return sku.nvml_names[0] if sku.nvml_names else f"NVIDIA {sku.name}"


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
    engine = EngineConfig(
        max_batch=spec.max_batch,
        token_budget=spec.token_budget,
        hbm_utilization=spec.hbm_utilization,
        runtime_reserve_bytes=spec.runtime_reserve_gb * 1e9,
    )
    return SimPool(index, spec, model, precision, kv_precision, engine, ())


def build_layout(
    scenario: Scenario, catalog: Catalog, roles: Mapping[str, Role] | None = None
) -> FleetLayout:
    """The fleet a scenario describes; ``roles`` overrides workers' roles by id (a re-simulated placement)."""
    pools = [_pool(i, spec, catalog) for i, spec in enumerate(scenario.pools)]
    pool_index = {p.spec.name: p.index for p in pools}
    total_nodes = sum(group.count for group in scenario.nodes)
    width = max(2, len(str(total_nodes - 1)))
    spread_rng = np.random.default_rng(zlib.crc32(scenario.name.encode()))
    nodes: list[str] = []
    gpus: list[SimGpu] = []
    workers: list[SimWorker] = []
    pool_workers: dict[int, list[int]] = {p.index: [] for p in pools}
    for g_index, group in enumerate(scenario.nodes):
        try:
            sku = catalog.gpus.get(group.sku)
        except KeyError as exc:
            raise ScenarioError(f"nodes[{g_index}].sku: {exc.args[0]}") from None
        pool = pools[pool_index[group.pool]]
        tp = pool.spec.tp
        for _ in range(group.count):
            node = len(nodes)
            node_name = f"{scenario.node_prefix}{node:0{width}d}"
            nodes.append(node_name)
            speeds = np.clip(
                1.0 + scenario.life.efficiency_spread * spread_rng.standard_normal(group.gpus), 0.85, 1.15
            )
            first_gpu = len(gpus)
            owner = [-1] * group.gpus
            slot = 0
            for role in _ROLE_ORDER:
                for k in range(group.workers.get(role, 0)):
                    worker_id = f"{node_name}/{role}-{k + 1}"
                    chosen = Role((roles or {}).get(worker_id, Role(role)))
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
                        )
                    )
                    pool_workers[pool.index].append(len(workers) - 1)
                    slot += tp
            for local in range(group.gpus):
                gpus.append(
                    SimGpu(
                        index=len(gpus),
                        node=node,
                        local_index=local,
                        uuid=f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{scenario.name}/{node_name}/{local}')}",
                        sku=sku,
                        nvml_name=_nvml_name(sku),
                        worker=owner[local],
                        speed=float(speeds[local]),
                    )
                )
    _check_fit(pools, workers)
    final_pools = tuple(
        SimPool(p.index, p.spec, p.model, p.precision, p.kv_precision, p.engine, tuple(pool_workers[p.index]))
        for p in pools
    )
    return FleetLayout(tuple(nodes), tuple(gpus), tuple(workers), final_pools)


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
