"""The analyzer's thin adapter to the store: read [from, to) as bucketed columns, write findings and summary.

Reads use the hourly rollups where they exist and one SQL ``GROUP BY`` over raw samples after them.
Writes upsert findings and store the summary as an analysis run. Reasoning: docs/analyzer.md#store
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Connection, Float, case, func, literal, select, type_coerce

from analyzer.pipeline import AnalysisInput, AnalysisResult
from analyzer.pools.pool import Inventory
from analyzer.results.summary import SUMMARY_VERSION, Summary, iso
from analyzer.telemetry.grid import BUCKET_S, ENGINE_BUCKET_COLUMNS, GPU_BUCKET_COLUMNS
from fleet.contract import FindingStatus, GpuJoin
from fleet.inventory import GpuRecord, WorkerRecord
from fleet.store.analysis import put_analysis
from fleet.store.engine import is_sqlite
from fleet.store.findings import finding_subject, resolve_findings, upsert_findings
from fleet.store.histogram_rollups import Summed, held_histograms, histogram_sums
from fleet.store.queries import engine_rollups, gpu_rollups, list_gpus, list_workers, rolled_up_until
from fleet.store.retention import queued_share
from fleet.store.rows import HISTOGRAM_COLUMNS
from fleet.store.schema import (
    AnalysisRunRow,
    EngineSampleRow,
    GpuSampleRow,
    table_of,
)

_HOUR = timedelta(hours=1)
# What the reader hands the analyzer per engine bucket: the grid's columns, then the bucket's latency
# histograms (fleet.histograms: stored bytes or per-bucket counts on the shared grid, or None: unknown).
ENGINE_READ_COLUMNS = (*ENGINE_BUCKET_COLUMNS, *HISTOGRAM_COLUMNS)


@dataclass(frozen=True)
class WriteSummary:
    inserted: int
    updated: int
    resolved: int
    analysis_run_id: int


def _floor(moment: datetime, bucket_s: float) -> datetime:
    epoch = moment.timestamp()
    return datetime.fromtimestamp(epoch - epoch % bucket_s, tz=UTC)


def read_inventory(connection: Connection, since: datetime, until: datetime) -> Inventory:
    """Workers and GPUs seen in [since, until) (as last reported)."""

    def seen(record: GpuRecord | WorkerRecord) -> bool:
        first, last = record.first_seen, record.last_seen
        return first is not None and last is not None and last >= since and first < until

    workers = tuple(w for w in list_workers(connection) if seen(w))
    return Inventory(workers, tuple(g for g in list_gpus(connection) if seen(g)))


def _bucket_epoch(connection: Connection, column: Any, bucket_s: float) -> Any:
    """SQL for the start of ``column``'s bucket, in epoch seconds (float)."""
    if is_sqlite(connection):
        width_us = round(bucket_s * 1_000_000)
        return (
            type_coerce(
                (type_coerce(column, BigInteger) // literal(width_us, BigInteger))
                * literal(width_us, BigInteger),
                Float,
            )
            / 1_000_000.0
        )
    return func.floor(func.date_part("epoch", column) / bucket_s) * bucket_s


def _rows(connection: Connection, statement: Any, names: Sequence[str]) -> dict[str, list[Any]]:
    rows = connection.execute(statement).all()
    if not rows:
        return {name: [] for name in names}
    return {name: list(values) for name, values in zip(names, zip(*rows, strict=True), strict=True)}


def aggregate_raw_gpu(
    connection: Connection, since: datetime, until: datetime, bucket_s: float
) -> dict[str, list[Any]]:
    """GPU rollup columns computed in SQL from raw samples in [since, until)."""
    c = table_of(GpuSampleRow).c
    bucket = _bucket_epoch(connection, c.ts, bucket_s)
    statement = (
        select(
            bucket,
            c.gpu_uuid,
            func.max(c.worker_id),
            func.count(),
            func.sum(c.window_s),
            func.avg(c.sm_active),
            func.avg(c.tensor_active),
            func.avg(c.dram_active),
            func.avg(c.gpu_util),
            func.avg(c.gr_engine_active),
            func.avg(c.mem_copy_util),
            func.max(c.mem_used_bytes),
            func.sum(case((c.state == "lost", 1), else_=0)),
            func.sum(case((c.state == "degraded", 1), else_=0)),
        )
        .where(c.ts >= since, c.ts < until)
        .group_by(c.gpu_uuid, bucket)
    )
    return _rows(connection, statement, GPU_BUCKET_COLUMNS)


def aggregate_raw_engine(
    connection: Connection, since: datetime, until: datetime, bucket_s: float
) -> dict[str, list[Any]]:
    """Engine rollup columns computed in SQL from raw samples in [since, until)."""
    c = table_of(EngineSampleRow).c
    bucket = _bucket_epoch(connection, c.ts, bucket_s)
    statement = (
        select(
            bucket,
            c.worker_id,
            func.max(c.role),
            func.count(),
            func.sum(c.window_s),
            func.sum(c.prompt_tokens),
            func.sum(c.generation_tokens),
            func.sum(c.preemptions),
            func.avg(c.requests_running),
            func.avg(c.requests_waiting),
            func.max(c.requests_waiting),
            func.avg(c.kv_cache_usage),
            func.max(c.kv_cache_usage),
            func.avg(c.ttft_p50_s),
            func.avg(c.tpot_p50_s),
            func.avg(c.ttft_p90_s),
            func.avg(c.tpot_p90_s),
            func.avg(c.e2e_p90_s),
            queued_share(c.requests_waiting),
        )
        .where(c.ts >= since, c.ts < until)
        .group_by(c.worker_id, bucket)
    )
    columns = _rows(connection, statement, ENGINE_BUCKET_COLUMNS)
    summed = raw_engine_histograms(connection, since, until, bucket_s)
    unknown = (None,) * len(HISTOGRAM_COLUMNS)
    found = [summed.get(key, unknown) for key in zip(columns["worker_id"], columns["ts"], strict=True)]
    for index, name in enumerate(HISTOGRAM_COLUMNS):
        columns[name] = [held[index] for held in found]
    return columns


def raw_engine_histograms(
    connection: Connection, since: datetime, until: datetime, bucket_s: float
) -> dict[tuple[str, float], tuple[Summed, ...]]:
    """(worker id, bucket start) -> the bucket-wise sums of its raw samples' latency histograms in [since,
    until) (``HISTOGRAM_COLUMNS``, each None where no sample held one, a single one as stored), for the
    buckets where some sample held one; the buckets as :func:`aggregate_raw_engine` groups them (the same
    SQL). SQL cannot add the encoded histograms: the rows are streamed in (worker, bucket) order and summed
    here, a chunk at a time (:func:`fleet.store.histogram_rollups.histogram_sums`, as the rollups sum
    them)."""
    statement = held_histograms(lambda ts: _bucket_epoch(connection, ts, bucket_s), since, until)
    with connection.execute(statement) as rows:
        return {key: tuple(sums) for key, sums in histogram_sums(rows)}


def _concat(parts: Sequence[dict[str, list[Any]]], names: Sequence[str]) -> dict[str, list[Any]]:
    return {name: [v for part in parts for v in part[name]] for name in names}


def read_input(
    connection: Connection, since: datetime, until: datetime, *, bucket_s: float = BUCKET_S
) -> AnalysisInput:
    """Everything the analyzer needs for [since, until), bucket-aligned outward; the engine buckets carry
    their latency histograms summed over the bucket (``ENGINE_READ_COLUMNS``)."""
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("analysis range bounds must be timezone-aware")
    if until <= since:
        raise ValueError(
            f"empty analysis range: from {since.isoformat()} is not before to {until.isoformat()}"
        )
    start = _floor(since, bucket_s)
    rolled = rolled_up_until(connection) if bucket_s == BUCKET_S else None
    gpu_parts, engine_parts = [], []
    raw_from = start
    if rolled is not None and rolled > start:
        covered = min(rolled, until)
        gpu_parts.append(_rollup_columns(gpu_rollups(connection, "1h", start, covered), GPU_BUCKET_COLUMNS))
        engine_parts.append(_engine_rollup_columns(engine_rollups(connection, "1h", start, covered)))
        raw_from = covered
    if raw_from < until:
        gpu_parts.append(aggregate_raw_gpu(connection, raw_from, until, bucket_s))
        engine_parts.append(aggregate_raw_engine(connection, raw_from, until, bucket_s))
    return AnalysisInput(
        inventory=read_inventory(connection, since, until),
        gpu_buckets=_concat(gpu_parts, GPU_BUCKET_COLUMNS),
        engine_buckets=_concat(engine_parts, ENGINE_READ_COLUMNS),
        start=start.timestamp(),
        end=until.timestamp(),
        bucket_s=bucket_s,
    )


def _rollup_columns(columns: dict[str, list[Any]], names: Sequence[str]) -> dict[str, list[Any]]:
    """A rollup read (``ts`` = bucket start) restricted to the bucket columns the analyzer uses."""
    return {name: columns[name] for name in names}


def _engine_rollup_columns(columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """An hourly engine rollup read as the analyzer takes it: one rollup row per analysis bucket (the read
    uses them only when ``bucket_s`` is an hour), its summed histograms as stored (the grid sums stored
    forms without decoding each)."""
    out = _rollup_columns(columns, ENGINE_BUCKET_COLUMNS)
    for name in HISTOGRAM_COLUMNS:
        out[name] = [None if stored is None else bytes(stored) for stored in columns[name]]
    return out


def write_result(
    connection: Connection, result: AnalysisResult, *, now: datetime, whole_fleet: bool = True
) -> WriteSummary:
    """Store the run's findings (deduplicated across runs), resolve the open ones it no longer reports, and
    store the summary as an analysis run. A run over some pools (``whole_fleet`` false) resolves only
    findings of the pools it analysed."""
    counts = upsert_findings(connection, result.findings, now=now)
    still_open = [(f.kind, finding_subject(f)) for f in result.findings if f.status is FindingStatus.OPEN]
    if whole_fleet:
        resolved = resolve_findings(connection, still_open=still_open, at=now)
    else:
        pools = [p.pool for p in result.typed_summary.pools]
        resolved = sum(resolve_findings(connection, still_open=still_open, at=now, pool=p) for p in pools)
    run_id = store_summary(connection, result.summary, now=now)
    return WriteSummary(counts.inserted, counts.updated, resolved, run_id)


def store_summary(connection: Connection, summary: dict[str, Any], *, now: datetime) -> int:
    """Record the summary as an analysis run (``fleet.store.analysis``); returns the run's id."""
    return put_analysis(
        connection,
        created_at=now,
        from_ts=datetime.fromisoformat(summary["from"].replace("Z", "+00:00")),
        to_ts=datetime.fromisoformat(summary["to"].replace("Z", "+00:00")),
        summary=summary,
    )


def shard_summaries(
    connection: Connection, start: datetime, end: datetime, shards: int
) -> dict[int, Summary]:
    """Shard index -> the latest stored run of that shard of ``shards`` over exactly [start, end), of this
    summary version (a run of an older one cannot be merged: its shard counts as not run)."""
    table = table_of(AnalysisRunRow)
    rows = connection.execute(
        select(table.c.summary)
        .where(table.c.from_ts <= start + _HOUR, table.c.to_ts >= end - _HOUR)
        .order_by(table.c.created_at, table.c.id)
    )
    bounds = (iso(start.timestamp()), iso(end.timestamp()))
    out: dict[int, Summary] = {}
    for (raw,) in rows:
        scope = raw.get("scope") if isinstance(raw, dict) else None
        shard = scope.get("shard") if isinstance(scope, dict) else None
        if not (isinstance(shard, list) and len(shard) == 2 and shard[1] == shards):
            continue
        if (raw.get("from"), raw.get("to")) != bounds or raw.get("version") != SUMMARY_VERSION:
            continue
        out[int(shard[0])] = Summary.model_validate(raw)  # later runs of a shard replace earlier ones
    return out


def _pod_name(worker_id: str) -> str:
    """The pod part of a ``namespace/pod`` worker id (the whole id where it has no namespace)."""
    return worker_id.rsplit("/", 1)[-1]


def join_by_pod(inventory: Inventory) -> tuple[Inventory, list[str]]:
    """Join engines the collector left without GPUs to the GPUs dcgm-exporter reported under their pod.

    A worker known by its pod (``namespace/pod``, as the collector and zero-agent mode name it) holds the GPUs
    whose samples carry that pod, when one side lacks the namespace (``pod`` against ``namespace/pod``): the
    pod name alone then decides, and only where exactly one engine and one GPU owner share it. Engines that
    still hold no GPU come back as warnings naming the engine and what was tried, so a failed join reads as
    one instead of as missing telemetry."""
    owned = inventory.gpu_worker()
    # An engine holds GPUs if their series name it, or if it reports GPUs the store knows that another pod
    # now holds: a pod replaced on the same GPUs (a Deployment rollout), whose engine samples name them.
    known = {g.gpu_uuid for g in inventory.gpus}
    holders = set(owned.values()) | {
        w.worker_id for w in inventory.workers if any(u in known for u in w.gpu_uuids)
    }
    engine_ids = {w.worker_id for w in inventory.workers}
    # GPU owners no engine claims: the pods dcgm-exporter named that no engine's id matches exactly.
    orphan_owners = sorted(
        {g.worker_id for g in inventory.gpus if g.worker_id and g.worker_id not in engine_ids}
    )
    by_pod: dict[str, list[str]] = {}
    for owner in orphan_owners:
        by_pod.setdefault(_pod_name(owner), []).append(owner)
    engines_by_pod: dict[str, list[str]] = {}
    for w in inventory.workers:
        engines_by_pod.setdefault(_pod_name(w.worker_id), []).append(w.worker_id)
    rename: dict[str, str] = {}  # GPU owner -> engine worker id
    notes: list[str] = []
    for worker in inventory.workers:
        if worker.worker_id in holders:
            continue
        pod = _pod_name(worker.worker_id)
        owners = by_pod.get(pod, [])
        if len(owners) == 1 and engines_by_pod.get(pod) == [worker.worker_id]:
            rename[owners[0]] = worker.worker_id
            continue
        node_gpus = [g for g in inventory.gpus if g.node == worker.node]
        pods_on_node = sorted({g.worker_id for g in node_gpus if g.worker_id})
        unattributed = sum(1 for g in node_gpus if g.worker_id is None and g.gpu_uuid not in owned)
        tried = [
            f"its own GPU UUIDs (none reported; collector join: {worker.gpu_join or 'none'})",
            (
                f"GPUs whose dcgm-exporter series name its pod {pod!r} ("
                + (f"{len(owners)} pods of that name: ambiguous" if len(owners) > 1 else "none")
                + ")"
            ),
            (
                f"the pods on dcgm-exporter's series on node {worker.node!r}: "
                + (", ".join(pods_on_node) if pods_on_node else "none")
                + f"; {unattributed} GPU(s) there without a pod"
            ),
        ]
        notes.append(
            f"engine {worker.worker_id!r} ({worker.engine}, node {worker.node!r}) could not be joined to a "
            f"GPU: tried {'; '.join(tried)}. Its GPU telemetry is not missing, the join failed: name the "
            "engine by its pod (scrape it with pod/namespace labels, or run the collector with "
            "pod-resources) so it matches the pod on dcgm-exporter's series, or list its GPUs under gpus: "
            "in the mapping file "
            "(PHASEFIT_COLLECTOR_ROLE_MAPPING_FILE)"
        )
    if not rename:
        return inventory, notes
    gpus = tuple(
        replace(g, worker_id=rename[g.worker_id]) if g.worker_id in rename else g for g in inventory.gpus
    )
    held: dict[str, list[str]] = {}
    for g in gpus:
        if g.worker_id is not None and g.worker_id in rename.values():
            held.setdefault(g.worker_id, []).append(g.gpu_uuid)
    # dcgm-exporter's pod labels come from the kubelet's pod-resources, as the collector counts that join.
    workers = tuple(
        replace(w, gpu_uuids=tuple(sorted(held[w.worker_id])), gpu_join=GpuJoin.POD_RESOURCES.value)
        if w.worker_id in held
        else w
        for w in inventory.workers
    )
    notes.insert(
        0,
        f"{len(rename)} engine(s) joined to their GPUs by pod name on dcgm-exporter's series: "
        + ", ".join(f"{engine} <- {owner}" for owner, engine in sorted(rename.items())),
    )
    return Inventory(workers, gpus), notes


def rename_gpu_owners(data: AnalysisInput, inventory: Inventory) -> AnalysisInput:
    """``data`` with the joined inventory (:func:`join_by_pod` of ``data.inventory``): each GPU bucket's
    owner renamed as the join renamed it (a pod named without its namespace becomes its engine), a bucket
    that names none given its GPU's owner. A bucket keeps the owner its samples named: the GPUs of a pod
    replaced on them read as the old pod's before the change and the new pod's after, not all as the new
    one's (the old pod's telemetry then read as missing, and the new one's as its role's before it ran)."""
    owner = {g.gpu_uuid: g.worker_id for g in inventory.gpus}
    renamed = {
        before.worker_id: after.worker_id
        for before, after in zip(data.inventory.gpus, inventory.gpus, strict=True)
        if before.worker_id is not None and before.worker_id != after.worker_id
    }
    buckets = dict(data.gpu_buckets)
    buckets["worker_id"] = [
        owner.get(str(u)) if w is None else renamed.get(w, w)
        for u, w in zip(buckets["gpu_uuid"], buckets["worker_id"], strict=True)
    ]
    return AnalysisInput(inventory, buckets, data.engine_buckets, data.start, data.end, data.bucket_s)


def profiling_warnings(data: AnalysisInput) -> list[str]:
    """A warning naming the DCGM fields to enable when some GPUs reported no profiling field at all."""
    from analyzer.telemetry.gpu_view import PROFILING_HELP

    b = data.gpu_buckets
    seen: set[str] = set()
    profiled: set[str] = set()
    names = ("sm_active_avg", "tensor_active_avg", "dram_active_avg")
    for i, uuid in enumerate(b["gpu_uuid"]):
        seen.add(str(uuid))
        if any(b[n][i] is not None and b[n][i] == b[n][i] for n in names):
            profiled.add(str(uuid))
    missing = seen - profiled
    if not missing:
        return []
    return [
        f"{len(missing)} of {len(seen)} GPU(s) report no DCGM profiling field (their samples read 'degraded' "
        f"and their bottleneck unknown): {PROFILING_HELP}"
    ]
