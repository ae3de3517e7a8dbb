"""What the week's bucketed telemetry says besides the analysis: data quality, GPU-hours per SKU, and each
worker's mean counters for the roofline. Pure functions over :class:`analyzer.pipeline.AnalysisInput`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from analyzer.pipeline import AnalysisInput
from analyzer.pool_summaries import devices_of
from analyzer.pools.pool import Inventory, cluster_of, gpu_sku, pool_key
from analyzer.report.fleet_roofline import WorkerPoint, precision_of, worker_point
from analyzer.report.model import DataQuality, NodeGap, SkuHours
from fleet.catalog import Catalog


def _hours(value: Any) -> float:
    return float(value or 0.0) / 3600.0


def gpu_skus(inventory: Inventory, catalog: Catalog) -> dict[str, str]:
    """GPU UUID -> catalog SKU key ("unknown" where the name does not resolve; a MIG instance's own SKU)."""
    return {g.gpu_uuid: gpu_sku(g, catalog).key for g in inventory.gpus}


def data_quality(data: AnalysisInput, catalog: Catalog | None = None) -> DataQuality:
    """Coverage of the analysed range: GPU-hours with telemetry by source, nodes that went silent, lost and
    degraded GPUs, attribution and how roles were learned."""
    inventory = data.inventory
    buckets = data.gpu_buckets
    hours = max(1, math.ceil((data.end - data.start) / data.bucket_s))
    source_of = {g.gpu_uuid: g.source for g in inventory.gpus}
    by_source: dict[str, float] = defaultdict(float)
    node_hours: dict[str, set[int]] = defaultdict(set)
    node_of = {g.gpu_uuid: g.node for g in inventory.gpus}
    lost: set[str] = set()
    degraded = 0.0
    for i, uuid in enumerate(buckets["gpu_uuid"]):
        covered = _hours(buckets["window_s_sum"][i])
        by_source[source_of.get(uuid, "unknown")] += covered
        node_hours[node_of.get(uuid, "?")].add(int((float(buckets["ts"][i]) - data.start) // data.bucket_s))
        if int(buckets["lost_samples"][i] or 0) > 0:
            lost.add(uuid)
        samples = int(buckets["samples"][i] or 0)
        if samples and int(buckets["degraded_samples"][i] or 0) > 0:
            degraded += covered * int(buckets["degraded_samples"][i]) / samples
    lost |= {g.gpu_uuid for g in inventory.gpus if g.state == "lost"}
    active_hours = {int(h) for seen in node_hours.values() for h in seen}
    span = (max(active_hours) - min(active_hours) + 1) if active_hours else 0
    gaps = [
        NodeGap(node, span - len(seen), span)
        for node, seen in sorted(node_hours.items())
        if node != "?" and span - len(seen) > 0
    ]
    roles = Counter(w.role_source for w in inventory.workers)
    devices = devices_of(inventory, catalog)
    return DataQuality(
        gpus=len(inventory.gpus),
        gpu_hours_expected=float(len(inventory.gpus) * min(hours, span or hours)),
        gpu_hours_with_telemetry=sum(by_source.values()),
        gpu_hours_by_source=dict(sorted(by_source.items())),
        nodes_with_gaps=gaps,
        lost_gpus=sorted(lost),
        degraded_gpu_hours=degraded,
        unattributed_gpus=len(inventory.unattributed_gpus()),
        workers=len(inventory.workers),
        workers_role_unknown=sum(1 for w in inventory.workers if w.role.value == "unknown"),
        role_sources=dict(sorted(roles.items())),
        mig_instances=devices.mig_instances,
        physical_gpus=devices.physical_gpus,
        mig_parent_gpus=devices.mig_parent_gpus,
    )


def sku_hours(
    data: AnalysisInput,
    catalog: Catalog,
    misplaced: Mapping[str, tuple[datetime, datetime]],
) -> list[SkuHours]:
    """GPU-hours per SKU: on well-placed workers, on misplaced workers while their finding held
    (``misplaced``:
    worker -> (first seen, last seen)), and on GPUs without a worker."""
    skus = gpu_skus(data.inventory, catalog)
    owner = data.inventory.gpu_worker()
    split: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    buckets = data.gpu_buckets
    for i, uuid in enumerate(buckets["gpu_uuid"]):
        covered = _hours(buckets["window_s_sum"][i])
        worker = buckets["worker_id"][i] or owner.get(uuid)
        slot = split[skus.get(uuid, "unknown")]
        if worker is None:
            slot[2] += covered
            continue
        episode = misplaced.get(worker)
        ts = datetime.fromtimestamp(float(buckets["ts"][i]), tz=UTC)
        slot[1 if episode is not None and episode[0] <= ts <= episode[1] else 0] += covered
    out = []
    for key, (well, wrong, free) in sorted(split.items()):
        sku = catalog.gpus.lookup(key)
        out.append(SkuHours(key, sku.hourly_price_usd if sku else None, well, wrong, free))
    return out


def worker_means(data: AnalysisInput) -> dict[str, tuple[float | None, float | None, float]]:
    """Worker -> (tensor activity, DRAM activity, GPU-hours) over the range, weighted by telemetry seconds."""
    owner = data.inventory.gpu_worker()
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    buckets = data.gpu_buckets
    for i, uuid in enumerate(buckets["gpu_uuid"]):
        worker = buckets["worker_id"][i] or owner.get(uuid)
        if worker is None:
            continue
        seconds = float(buckets["window_s_sum"][i] or 0.0)
        slot = acc[worker]
        slot[4] += seconds
        for j, name in ((0, "tensor_active_avg"), (2, "dram_active_avg")):
            value = buckets[name][i]
            if value is not None and math.isfinite(float(value)):
                slot[j] += float(value) * seconds
                slot[j + 1] += seconds
    return {
        worker: (t / tw if tw else None, d / dw if dw else None, seconds / 3600.0)
        for worker, (t, tw, d, dw, seconds) in acc.items()
    }


def roofline_points(
    data: AnalysisInput,
    catalog: Catalog,
    pools: Mapping[str, str],
    worker_skus: Mapping[str, str],
    misplaced: Sequence[str],
    clusters: Mapping[str, str] | None = None,
) -> list[WorkerPoint]:
    """Every worker with counters as a point on its SKU's roof (``pools``/``worker_skus``: worker -> pool /
    SKU key from the analysis)."""
    means = worker_means(data)
    points = []
    for w in data.inventory.workers:
        tensor, dram, gpu_hours = means.get(w.worker_id, (None, None, 0.0))
        key = worker_skus.get(w.worker_id)
        point = worker_point(
            worker_id=w.worker_id,
            pool=pools.get(
                w.worker_id, pool_key(cluster_of(w.node, w.cluster, clusters), w.deployment, w.model)
            ),
            sku=catalog.gpus.lookup(key) if key else None,
            role=w.role.value,
            precision=precision_of(w.precision),
            tensor_active=tensor,
            dram_active=dram,
            misplaced=w.worker_id in misplaced,
            weight=gpu_hours,
        )
        if point is not None:
            points.append(point)
    return sorted(points, key=lambda p: p.worker_id)
