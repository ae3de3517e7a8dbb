"""The dashboard's time series from the store: hourly activity per SKU and role, each worker's counter
means, and each pool's traffic. A few SQL aggregates, never raw samples row by row.

Hours come from the hourly rollups where they exist (``phasefit db prune`` keeps them up to the last complete
hour) and from one ``GROUP BY`` hour over raw samples after that, so a week of 1,024 GPUs is a few hundred
aggregated rows however the store was kept. GPU reads select by GPU UUID and worker reads by worker id:
the rollups' primary keys turn them into index seeks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Connection, Engine, Float, Select, case, func, literal, select, type_coerce

from dashboard.views import Scope, TrafficPoint, UtilisationPoint, WorkerActivity
from fleet.store.engine import is_sqlite
from fleet.store.queries import epoch_seconds, list_gpus, list_workers, rolled_up_until
from fleet.store.schema import EngineSample1hRow, EngineSampleRow, GpuSample1hRow, GpuSampleRow, table_of

HOUR_S = 3600.0
_IN_CHUNK = 900  # bound parameters per IN list (SQLite's limit is far above; keeps statements small)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def _hour_epoch(connection: Connection, column: Any) -> Any:
    """SQL for the start of ``column``'s hour, in epoch seconds."""
    if is_sqlite(connection):
        width = literal(3_600_000_000, BigInteger)
        return type_coerce((type_coerce(column, BigInteger) // width) * width, Float) / 1_000_000.0
    return func.floor(func.date_part("epoch", column) / HOUR_S) * HOUR_S


def _spans(
    connection: Connection, since: datetime, until: datetime
) -> Iterator[tuple[bool, datetime, datetime]]:
    """(from rollups?, start, end) pieces covering [since, until): rollups first, raw after them."""
    rolled = rolled_up_until(connection)
    raw_from = since
    if rolled is not None and rolled > since:
        raw_from = min(rolled, until)
        yield True, since, raw_from
    if raw_from < until:
        yield False, raw_from, until


def _chunks(values: Sequence[str] | None) -> Iterator[Sequence[str] | None]:
    if values is None:
        yield None
        return
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start : start + _IN_CHUNK]


def _gpu_groups(connection: Connection, worker_ids: Sequence[str] | None) -> dict[tuple[str, str], list[str]]:
    """(SKU, role of the GPU's worker) -> GPU UUIDs, for the GPUs of ``worker_ids`` (None: every GPU)."""
    roles = {w.worker_id: w.role for w in list_workers(connection)}
    wanted = set(worker_ids) if worker_ids is not None else None
    groups: dict[tuple[str, str], list[str]] = {}
    for g in list_gpus(connection):
        if wanted is not None and g.worker_id not in wanted:
            continue
        role = roles.get(g.worker_id or "", "unattributed")
        groups.setdefault((g.sku or "unresolved", role), []).append(g.gpu_uuid)
    return groups


def utilisation(engine: Engine, scope: Scope, worker_ids: Sequence[str] | None) -> list[UtilisationPoint]:
    """Hourly mean activity per (SKU, role of the GPU's worker); ``worker_ids`` None: the whole fleet.

    One query per group and chunk of GPU UUIDs: the rollups' primary key (GPU, bucket) serves it as index
    seeks, several times faster than joining every GPU-hour to the GPU and worker tables."""
    acc: dict[tuple[float, str, str], list[float]] = {}
    with engine.connect() as connection:
        groups = _gpu_groups(connection, worker_ids)
        for rollup, start, end in _spans(connection, scope.since, scope.until):
            for (sku, role), uuids in groups.items():
                for chunk in _chunks(uuids):
                    for ts, gpus, *sums in connection.execute(
                        _activity_by_hour(connection, rollup, start, end, chunk)
                    ):
                        slot = acc.setdefault((float(ts), sku, role), [0.0] * 7)
                        slot[0] += float(gpus)
                        for i, value in enumerate(sums):
                            slot[i + 1] += float(value or 0.0)
    points = []
    for (ts, sku, role), (gpus, t_sum, t_n, d_sum, d_n, s_sum, s_n) in sorted(acc.items()):
        points.append(
            UtilisationPoint(
                ts=_utc(ts),
                sku=sku,
                role=role,
                gpus=int(gpus),
                tensor_active=t_sum / t_n if t_n else None,
                dram_active=d_sum / d_n if d_n else None,
                sm_active=s_sum / s_n if s_n else None,
            )
        )
    return points


def _activity_by_hour(
    connection: Connection, rollup: bool, start: datetime, end: datetime, uuids: Sequence[str] | None
) -> Select[Any]:
    table = table_of(GpuSample1hRow if rollup else GpuSampleRow)
    c = table.c
    suffix = "_avg" if rollup else ""
    time_col = c.bucket if rollup else c.ts
    hour = epoch_seconds(connection, time_col) if rollup else _hour_epoch(connection, time_col)
    measures = []
    for name in ("tensor_active", "dram_active", "sm_active"):
        column = c[name + suffix]
        measures += [func.sum(column), func.count(column)]
    statement = (
        select(hour, func.count(func.distinct(c.gpu_uuid)), *measures)
        .where(time_col >= start, time_col < end)
        .group_by(hour)
    )
    return statement.where(c.gpu_uuid.in_(list(uuids))) if uuids is not None else statement


def worker_activity(engine: Engine, scope: Scope, worker_ids: Sequence[str] | None) -> list[WorkerActivity]:
    """Each worker's mean counters over the range, weighted by seconds of telemetry (the GPU rows are
    read per GPU, by primary key, and added up per worker)."""
    gpu: dict[str, list[float]] = {}
    kv: dict[str, list[float]] = {}
    with engine.connect() as connection:
        uuids = [u for group in _gpu_groups(connection, worker_ids).values() for u in group]
        wanted = set(worker_ids) if worker_ids is not None else None
        workers = sorted(wanted) if wanted is not None else [w.worker_id for w in list_workers(connection)]
        for rollup, start, end in _spans(connection, scope.since, scope.until):
            for chunk in _chunks(uuids):
                for worker, *sums in connection.execute(_gpu_means(rollup, start, end, chunk)):
                    if worker is None or (wanted is not None and worker not in wanted):
                        continue
                    slot = gpu.setdefault(worker, [0.0] * 7)
                    for i, value in enumerate(sums):
                        slot[i] += float(value or 0.0)
            for chunk in _chunks(workers):
                for worker, total, weight in connection.execute(_kv_means(rollup, start, end, chunk)):
                    slot = kv.setdefault(worker, [0.0, 0.0])
                    slot[0] += float(total or 0.0)
                    slot[1] += float(weight or 0.0)
    out = []
    for worker, (seconds, t_sum, t_w, d_sum, d_w, s_sum, s_w) in sorted(gpu.items()):
        k_sum, k_w = kv.get(worker, [0.0, 0.0])
        out.append(
            WorkerActivity(
                worker_id=worker,
                gpu_hours=seconds / HOUR_S,
                tensor_active=t_sum / t_w if t_w else None,
                dram_active=d_sum / d_w if d_w else None,
                sm_active=s_sum / s_w if s_w else None,
                kv_cache_usage=k_sum / k_w if k_w else None,
            )
        )
    return out


def _gpu_means(rollup: bool, start: datetime, end: datetime, uuids: Sequence[str] | None) -> Select[Any]:
    table = table_of(GpuSample1hRow if rollup else GpuSampleRow)
    c = table.c
    seconds = c.window_s_sum if rollup else c.window_s
    measures = [func.sum(seconds)]
    for name in ("tensor_active", "dram_active", "sm_active"):
        column = c[name + ("_avg" if rollup else "")]
        measures += [
            func.sum(column * seconds),
            func.sum(case((column.is_not(None), seconds), else_=0.0)),
        ]
    time_col = c.bucket if rollup else c.ts
    statement = (
        select(c.worker_id, *measures)
        .where(time_col >= start, time_col < end)
        .group_by(c.gpu_uuid, c.worker_id)
    )
    return statement.where(c.gpu_uuid.in_(list(uuids))) if uuids is not None else statement


def _kv_means(rollup: bool, start: datetime, end: datetime, ids: Sequence[str] | None) -> Select[Any]:
    table = table_of(EngineSample1hRow if rollup else EngineSampleRow)
    c = table.c
    seconds = c.window_s_sum if rollup else c.window_s
    column = c.kv_cache_usage_avg if rollup else c.kv_cache_usage
    time_col = c.bucket if rollup else c.ts
    statement = (
        select(
            c.worker_id,
            func.sum(column * seconds),
            func.sum(case((column.is_not(None), seconds), else_=0.0)),
        )
        .where(time_col >= start, time_col < end)
        .group_by(c.worker_id)
    )
    return statement.where(c.worker_id.in_(list(ids))) if ids is not None else statement


def traffic(engine: Engine, scope: Scope, pools: dict[str, list[str]]) -> list[TrafficPoint]:
    """Hourly prompt and generated tokens/s of each pool (``pools``: pool -> its worker ids), counted
    where real, and the workers reporting each role."""
    points = []
    with engine.connect() as connection:
        for pool, ids in sorted(pools.items()):
            acc: dict[float, list[float]] = {}
            for rollup, start, end in _spans(connection, scope.since, scope.until):
                for chunk in _chunks(ids):
                    rows = connection.execute(_tokens_by_hour(connection, rollup, start, end, chunk))
                    for ts, role, prompt, generated, seconds, workers in rows:
                        # An hour the collectors covered only in part (the range's last hour) gives its
                        # rate over the seconds its workers covered on average, not over 3,600.
                        covered = float(seconds or 0.0) / max(1, int(workers or 0))
                        covered = HOUR_S if covered >= 0.9 * HOUR_S else covered
                        slot = acc.setdefault(float(ts), [0.0] * 5)
                        rate = 1.0 / covered if covered > 0 else 0.0
                        if role in ("prefill", "mixed"):
                            slot[0] += float(prompt or 0) * rate
                        if role in ("decode", "mixed"):
                            slot[1] += float(generated or 0) * rate
                        index = {"prefill": 2, "decode": 3, "mixed": 4}.get(role)
                        if index is not None:
                            slot[index] += float(seconds or 0.0) / covered if covered > 0 else 0.0
            for ts, (prompt, generated, prefill, decode, mixed) in sorted(acc.items()):
                points.append(
                    TrafficPoint(
                        ts=_utc(ts),
                        pool=pool,
                        prompt_tokens_per_s=prompt,
                        generation_tokens_per_s=generated,
                        prefill_workers=prefill,
                        decode_workers=decode,
                        mixed_workers=mixed,
                    )
                )
    return points


def _tokens_by_hour(
    connection: Connection, rollup: bool, start: datetime, end: datetime, ids: Sequence[str] | None
) -> Select[Any]:
    table = table_of(EngineSample1hRow if rollup else EngineSampleRow)
    c = table.c
    time_col = c.bucket if rollup else c.ts
    hour = epoch_seconds(connection, time_col) if rollup else _hour_epoch(connection, time_col)
    prompt = c.prompt_tokens_sum if rollup else c.prompt_tokens
    generated = c.generation_tokens_sum if rollup else c.generation_tokens
    seconds = c.window_s_sum if rollup else c.window_s
    statement = (
        select(
            hour,
            c.role,
            func.sum(prompt),
            func.sum(generated),
            func.sum(seconds),
            func.count(func.distinct(c.worker_id)),
        )
        .where(time_col >= start, time_col < end)
        .group_by(hour, c.role)
    )
    return statement.where(c.worker_id.in_(list(ids))) if ids is not None else statement
