"""A fleet overview from the store: GPUs by SKU and role, and how busy each group was.

Used by ``phasefit demo`` (and anything else that wants a one-screen picture). Reads the gpus and workers
dimension tables and one aggregate over the raw samples; never loads samples row by row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Connection, func, select

from fleet.store.queries import list_gpus, list_workers
from fleet.store.schema import GpuSampleRow


@dataclass(frozen=True)
class GroupSummary:
    sku: str
    role: str
    gpus: int
    workers: int
    tensor_active: float | None  # mean over the group's samples
    dram_active: float | None
    lost_gpus: int


def fleet_summary(connection: Connection) -> list[GroupSummary]:
    """One row per (SKU, role), sorted; GPUs without a worker count under role 'unattributed'."""
    workers = {w.worker_id: w for w in list_workers(connection)}
    per_gpu = {
        uuid: (tensor, dram)
        for uuid, tensor, dram in connection.execute(
            select(
                GpuSampleRow.gpu_uuid,
                func.avg(GpuSampleRow.tensor_active),
                func.avg(GpuSampleRow.dram_active),
            ).group_by(GpuSampleRow.gpu_uuid)
        )
    }
    gpus: dict[tuple[str, str], int] = defaultdict(int)
    lost: dict[tuple[str, str], int] = defaultdict(int)
    group_workers: dict[tuple[str, str], set[str]] = defaultdict(set)
    tensor_sum: dict[tuple[str, str], list[float]] = defaultdict(list)
    dram_sum: dict[tuple[str, str], list[float]] = defaultdict(list)
    for gpu in list_gpus(connection):
        worker = workers.get(gpu.worker_id) if gpu.worker_id else None
        key = (gpu.sku or "unknown", worker.role if worker else "unattributed")
        gpus[key] += 1
        lost[key] += gpu.state == "lost"
        if worker:
            group_workers[key].add(worker.worker_id)
        tensor, dram = per_gpu.get(gpu.gpu_uuid, (None, None))
        if tensor is not None:
            tensor_sum[key].append(float(tensor))
        if dram is not None:
            dram_sum[key].append(float(dram))
    return [
        GroupSummary(
            sku=sku,
            role=role,
            gpus=gpus[(sku, role)],
            workers=len(group_workers[(sku, role)]),
            tensor_active=_mean(tensor_sum[(sku, role)]),
            dram_active=_mean(dram_sum[(sku, role)]),
            lost_gpus=lost[(sku, role)],
        )
        for sku, role in sorted(gpus)
    ]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
