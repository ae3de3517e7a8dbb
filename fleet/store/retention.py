"""Raw-sample retention and rollups (``phasefit db prune``).

``PHASEFIT_RAW_RETENTION_DAYS`` (default 14, :class:`fleet.settings.Settings.raw_retention_days`) is how
many days of raw samples the store keeps. Before raw rows go, they are rolled up per minute and per hour
(``*_1m`` / ``*_1h`` tables: averages of ratios and gauges over the non-null samples, sums of tokens and
preemptions, maxima of memory, queue and latency quantiles, sample counts, and the windows' latency
histograms summed bucket by bucket, :mod:`fleet.store.histogram_rollups`), so reads over weeks use them.
Rollups have retentions of their own (``PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS``, default 35, and
``PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS``, default 400, 0 = forever): given a
:class:`fleet.store.rollup_retention.RollupRetention`, a prune expires them last, in bounded batches of
their own transactions (:mod:`fleet.store.rollup_retention`); readers that want per-minute rollups read the
hourly ones where per-minute ones are gone, and say so.

A prune run, in one transaction (then the rollup expiry, in batches):

1. recomputes the rollup buckets of every complete hour from the last rolled-up hour minus a look-back
   (24 h by default, so late samples that collectors replayed from their spool are counted) up to the
   start of the current hour; ``full=True`` recomputes from the oldest raw sample instead;
2. expires raw samples older than ``now - retention_days``, rounded down to the hour on SQLite (rows are
   deleted) and to the UTC day on PostgreSQL, where whole day partitions are dropped (so PostgreSQL keeps
   between ``retention_days`` and one day more). Rows the ``DEFAULT`` partition holds past the cutoff are
   deleted. Before any raw row goes, each of its hours is checked: the hourly rollups must count exactly
   the raw rows of that hour, and an hour where they do not (a sample that arrived after its hour was
   rolled up and past the look-back) is rolled up again first. Raw samples never go un-rolled-up.

On PostgreSQL a day partition is checked under a ``SHARE`` lock of its own (a sample for that day waits,
samples of other days do not); the drops come last and hold ``ACCESS EXCLUSIVE`` on the raw tables until the
prune commits: moments, once a day. Run it from cron or a Kubernetes CronJob, e.g. hourly; ``phasefit db
prune`` also creates the next days' partitions (:func:`fleet.store.partitions.ensure_partitions`) and,
after expiring, those of the days left in ``DEFAULT``
(:func:`fleet.store.partitions.partition_backfilled_days`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Table,
    case,
    column,
    delete,
    func,
    insert,
    literal_column,
    select,
    table,
    text,
    type_coerce,
)
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import TableClause

from fleet.store.columns import UtcDateTime, from_epoch_us
from fleet.store.engine import is_sqlite, writing
from fleet.store.histogram_rollups import fill_histograms
from fleet.store.partitions import Partition, drop_partition, floor_day, list_partitions
from fleet.store.rollup_retention import RollupExpiry, RollupRetention, expire_rollups
from fleet.store.schema import (
    EngineSample1hRow,
    EngineSample1mRow,
    EngineSampleRow,
    GpuSample1hRow,
    GpuSample1mRow,
    GpuSampleRow,
    RawEngineSampleRow,
    RawGpuSampleRow,
    table_of,
)
from fleet.store.time_span import raw_time_range

DEFAULT_LOOKBACK = timedelta(hours=24)
_WIDTHS = {"1m": timedelta(minutes=1), "1h": timedelta(hours=1)}
_UNITS = {"1m": "minute", "1h": "hour"}


@dataclass(frozen=True)
class PruneResult:
    cutoff: datetime  # raw samples before this were deleted
    rolled_up_until: datetime  # rollups are complete up to this hour
    rollup_rows: dict[str, int] = field(default_factory=dict)  # rows (re)written per rollup table
    deleted: dict[str, int] = field(default_factory=dict)  # raw rows deleted per table (view name)
    dropped_partitions: tuple[str, ...] = ()  # PostgreSQL day partitions dropped
    rollups_expired: RollupExpiry | None = None  # rollup rows expired per tier (None: not asked to)


@dataclass(frozen=True)
class Expired:
    """What :func:`expire_raw_samples` did to one raw table."""

    rows: int = 0  # raw rows gone (dropped with their partition or deleted)
    dropped_partitions: tuple[str, ...] = ()
    rollup_rows: dict[str, int] = field(default_factory=dict)  # rollup rows rewritten for stale hours


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _bucket(connection: Connection, column: Any, resolution: str) -> ColumnElement[Any]:
    # Literals, not bound parameters: PostgreSQL only matches the GROUP BY expression to the selected one
    # when both are spelled identically.
    if is_sqlite(connection):
        width_us = literal_column(str(_WIDTHS[resolution] // timedelta(microseconds=1)), BigInteger)
        return (type_coerce(column, BigInteger) // width_us) * width_us
    return func.date_trunc(literal_column(f"'{_UNITS[resolution]}'"), column, literal_column("'UTC'"))


def queued_share(requests_waiting: ColumnElement[Any]) -> ColumnElement[Any]:
    """SQL: the share of the rows that report a queue in which a request waited (NULL where none reports
    one: unknown, never "no queue"). A queue held through the bucket reads near 1; bursts the pool clears
    between them well under it (analyzer.pools.pool_state)."""
    return func.avg(case((requests_waiting > 0, 1.0), (requests_waiting.is_not(None), 0.0)))


def _gpu_rollup(
    connection: Connection, target: Table, start: datetime, end: datetime, resolution: str
) -> int:
    c = table_of(GpuSampleRow).c
    bucket = _bucket(connection, c.ts, resolution)
    columns: dict[str, ColumnElement[Any]] = {
        "gpu_uuid": c.gpu_uuid,
        "bucket": bucket,
        "worker_id": func.max(c.worker_id),
        "samples": func.count(),
        "window_s_sum": func.sum(c.window_s),
        "sm_active_avg": func.avg(c.sm_active),
        "tensor_active_avg": func.avg(c.tensor_active),
        "dram_active_avg": func.avg(c.dram_active),
        "gpu_util_avg": func.avg(c.gpu_util),
        "gr_engine_active_avg": func.avg(c.gr_engine_active),
        "mem_copy_util_avg": func.avg(c.mem_copy_util),
        "power_w_avg": func.avg(c.power_w),
        "mem_used_bytes_max": func.max(c.mem_used_bytes),
        "lost_samples": func.sum(case((c.state == "lost", 1), else_=0)),
        "degraded_samples": func.sum(case((c.state == "degraded", 1), else_=0)),
    }
    source = select(*columns.values()).where(c.ts >= start, c.ts < end).group_by(c.gpu_uuid, bucket)
    return _replace(connection, target, start=start, end=end, columns=list(columns), source=source)


def _engine_rollup(
    connection: Connection, target: Table, start: datetime, end: datetime, resolution: str
) -> int:
    c = table_of(EngineSampleRow).c
    bucket = _bucket(connection, c.ts, resolution)
    columns: dict[str, ColumnElement[Any]] = {
        "worker_id": c.worker_id,
        "bucket": bucket,
        "role": func.max(c.role),
        "samples": func.count(),
        "window_s_sum": func.sum(c.window_s),
        "prompt_tokens_sum": func.sum(c.prompt_tokens),
        "generation_tokens_sum": func.sum(c.generation_tokens),
        "preemptions_sum": func.sum(c.preemptions),
        "requests_running_avg": func.avg(c.requests_running),
        "requests_waiting_avg": func.avg(c.requests_waiting),
        "requests_waiting_max": func.max(c.requests_waiting),
        "queued_share": queued_share(c.requests_waiting),
        "kv_cache_usage_avg": func.avg(c.kv_cache_usage),
        "kv_cache_usage_max": func.max(c.kv_cache_usage),
        "ttft_p50_s_avg": func.avg(c.ttft_p50_s),
        "ttft_p99_s_max": func.max(c.ttft_p99_s),
        "tpot_p50_s_avg": func.avg(c.tpot_p50_s),
        "tpot_p99_s_max": func.max(c.tpot_p99_s),
        "ttft_p90_s_avg": func.avg(c.ttft_p90_s),
        "tpot_p90_s_avg": func.avg(c.tpot_p90_s),
        "e2e_p90_s_avg": func.avg(c.e2e_p90_s),
    }
    source = select(*columns.values()).where(c.ts >= start, c.ts < end).group_by(c.worker_id, bucket)
    written = _replace(connection, target, start=start, end=end, columns=list(columns), source=source)
    fill_histograms(connection, target, start, end, lambda ts: _bucket(connection, ts, resolution), _instant)
    return written


def _replace(
    connection: Connection, target: Table, *, start: datetime, end: datetime, columns: list[str], source: Any
) -> int:
    """Replace the target's buckets in [start, end) with ``source``'s rows."""
    in_window = (target.c.bucket >= start) & (target.c.bucket < end)
    connection.execute(delete(target).where(in_window))
    connection.execute(insert(target).from_select(columns, source))
    # Counted, not taken from rowcount: INSERT ... SELECT through psycopg reports -1.
    return int(connection.execute(select(func.count()).select_from(target).where(in_window)).scalar_one())


_Rollup = Callable[[Connection, Table, datetime, datetime, str], int]


@dataclass(frozen=True)
class _Family:
    view: Table  # what rollups read (keys and text)
    raw: Table  # what stores the rows (time bounds, deletes, partitions)
    rollup: _Rollup
    targets: dict[str, Table]


_FAMILIES = (
    _Family(
        table_of(GpuSampleRow),
        table_of(RawGpuSampleRow),
        _gpu_rollup,
        {"1m": table_of(GpuSample1mRow), "1h": table_of(GpuSample1hRow)},
    ),
    _Family(
        table_of(EngineSampleRow),
        table_of(RawEngineSampleRow),
        _engine_rollup,
        {"1m": table_of(EngineSample1mRow), "1h": table_of(EngineSample1hRow)},
    ),
)


def refresh_rollups(
    connection: Connection, start: datetime, end: datetime, resolutions: Collection[str] = ("1m", "1h")
) -> dict[str, int]:
    """Recompute the rollup buckets of ``resolutions`` in [start, end) from raw samples (both must be
    hour-aligned). The hourly ones are what the analyzer, dashboard and report read; the per-minute ones
    serve the API's finer reads once raw samples are pruned."""
    if start != floor_hour(start) or end != floor_hour(end):
        raise ValueError("rollup windows must start and end on the hour")
    unknown = set(resolutions) - set(_WIDTHS)
    if unknown:
        raise ValueError(f"unknown rollup resolution(s) {sorted(unknown)}; known: {sorted(_WIDTHS)}")
    return {
        target.name: family.rollup(connection, target, start, end, resolution)
        for family in _FAMILIES
        for resolution, target in family.targets.items()
        if resolution in resolutions
    }


def retention_cutoff(connection: Connection, now: datetime, retention_days: int) -> datetime:
    """Where raw samples end: ``now - retention_days`` rounded down to the hour (SQLite) or to the UTC day
    (PostgreSQL: whole day partitions go)."""
    if retention_days < 1:
        raise ValueError("retention_days must be at least 1")
    cutoff = floor_hour(now - timedelta(days=retention_days))
    return cutoff if is_sqlite(connection) else floor_day(cutoff)


def apply_retention(
    engine: Engine,
    *,
    now: datetime,
    retention_days: int,
    full: bool = False,
    lookback: timedelta = DEFAULT_LOOKBACK,
    rollup_retention: RollupRetention | None = None,
) -> PruneResult:
    """Roll up complete hours, then expire raw samples older than the retention (module docstring), then
    (when ``rollup_retention`` is given) the rollup rows older than theirs, in batches of their own
    (:mod:`fleet.store.rollup_retention`)."""
    if retention_days < 1:
        raise ValueError("retention_days must be at least 1")
    if rollup_retention is not None and rollup_retention.minute_days < retention_days:
        raise ValueError(
            f"per-minute rollups kept {rollup_retention.minute_days} days but raw samples "
            f"{retention_days} (PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS < raw retention): per-minute rollups "
            "must be kept at least as long as raw samples"
        )
    end = floor_hour(now)
    rollup_rows: dict[str, int] = {}
    with writing(engine) as connection:
        cutoff = retention_cutoff(connection, now, retention_days)
        for family in _FAMILIES:
            span = raw_time_range(connection, family.raw.name)
            if span is not None:
                start = floor_hour(span[0])
                done = connection.execute(select(func.max(family.targets["1h"].c.bucket))).scalar_one()
                if done is not None and not full:
                    start = max(start, done - lookback)
                for resolution, target in family.targets.items():
                    rollup_rows[target.name] = (
                        family.rollup(connection, target, start, end, resolution) if start < end else 0
                    )
        expired = expire_raw_samples(connection, cutoff)
    for result in expired.values():
        for name, count in result.rollup_rows.items():
            rollup_rows[name] = rollup_rows.get(name, 0) + count
    deleted = {name: result.rows for name, result in expired.items()}
    dropped = tuple(name for result in expired.values() for name in result.dropped_partitions)
    rollups_expired = None
    if rollup_retention is not None:
        rollups_expired = expire_rollups(engine, now=now, retention=rollup_retention, raw_cutoff=cutoff)
    return PruneResult(cutoff, end, rollup_rows, deleted, dropped, rollups_expired)


def expire_raw_samples(connection: Connection, cutoff: datetime) -> dict[str, Expired]:
    """Step 2 of a prune on its own (per view name), in the caller's transaction: check the rollups of
    every hour before ``cutoff`` that still has raw rows, roll up again those that miss some, then drop the
    day partitions that end by ``cutoff`` (PostgreSQL) and delete the raw rows left before it.

    PostgreSQL: each expired partition is locked ``SHARE`` while it is checked (a sample for that old day
    waits; samples of other days do not), and only the drops, all at the end, take ``ACCESS EXCLUSIVE`` on
    the raw tables, until the caller commits. Rows of the ``DEFAULT`` partition are checked without a lock:
    one committed between the count and the delete makes the counts differ, and the whole expiry fails
    (rolled back; the next prune does it)."""
    expired: dict[str, Expired] = {}
    drops: list[Partition] = []
    for family in _FAMILIES:
        rows = 0
        dropped: list[str] = []
        rewritten: dict[str, int] = {}
        partitions = [] if is_sqlite(connection) else list_partitions(connection, family.raw.name)
        if not partitions:  # SQLite (or a PostgreSQL raw table someone left unpartitioned)
            rows += _delete_before(connection, family, family.raw, cutoff, rewritten)
        for partition in partitions:
            stored = _relation(partition.name)
            if partition.start is None or partition.end is None:
                rows += _delete_before(connection, family, stored, cutoff, rewritten)
            elif partition.end <= cutoff:
                connection.execute(text(f"LOCK TABLE {partition.name} IN SHARE MODE"))
                rows += _ensure_rolled_up(
                    connection, family, stored, partition.start, partition.end, rewritten
                )
                drops.append(partition)
                dropped.append(partition.name)
        expired[family.view.name] = Expired(rows, tuple(dropped), rewritten)
    for partition in drops:
        drop_partition(connection, partition)
    return expired


def _relation(name: str) -> TableClause:
    """A partition, as much of it as expiry reads: its time column."""
    return table(name, column("ts", UtcDateTime()))


def _delete_before(
    connection: Connection,
    family: _Family,
    stored: Table | TableClause,
    cutoff: datetime,
    rewritten: dict[str, int],
) -> int:
    """Delete the rows of ``stored`` before ``cutoff`` once their hours are rolled up; how many."""
    ts = stored.c.ts
    earliest = connection.execute(select(func.min(ts)).where(ts < cutoff)).scalar_one()
    if earliest is None:
        return 0
    counted = _ensure_rolled_up(connection, family, stored, floor_hour(earliest), cutoff, rewritten)
    deleted = int(connection.execute(delete(stored).where(ts < cutoff)).rowcount)
    if deleted != counted:
        raise RuntimeError(
            f"{stored.name}: {counted} rows counted before {cutoff.isoformat()} but {deleted} to delete "
            "(written meanwhile): nothing was expired, the next prune will"
        )
    return deleted


def _ensure_rolled_up(
    connection: Connection,
    family: _Family,
    stored: Table | TableClause,
    start: datetime,
    end: datetime,
    rewritten: dict[str, int],
) -> int:
    """Rows of ``stored`` (the raw table, or one of its partitions) in [start, end), after rolling up again
    every hour whose hourly rollups do not count exactly its raw rows (hours without raw rows are left
    alone: their rows went in an earlier prune). Only the hours ``stored`` has rows in are compared: on
    PostgreSQL a partition holds every raw row of its hours (a day), and so does ``DEFAULT`` of the hours
    it has rows in (a day's rows leave it when the day gets a partition).

    Raw rows of an hour are only ever added (never deleted) until their whole hour goes, so the rollups of
    the hours from the first raw row on count at most the raw rows: equal totals mean every hour is
    complete, and one ``count(*)`` (an index-only scan of the time key) settles the usual case."""
    ts, hourly = stored.c.ts, family.targets["1h"]
    first = connection.execute(select(func.min(ts)).where(ts >= start, ts < end)).scalar_one()
    if first is None:
        return 0
    start = max(start, floor_hour(first))
    total = int(connection.execute(select(func.count()).where(ts >= start, ts < end)).scalar_one())
    counted = connection.execute(
        select(func.sum(hourly.c.samples)).where(hourly.c.bucket >= start, hourly.c.bucket < end)
    ).scalar_one()
    if counted is not None and int(counted) == total:
        return total
    hour = _bucket(connection, ts, "1h")
    counts = {
        _instant(bucket): int(count)
        for bucket, count in connection.execute(
            select(hour, func.count()).where(ts >= start, ts < end).group_by(hour)
        )
    }
    rolled = {
        _instant(bucket): int(samples)
        for bucket, samples in connection.execute(
            select(hourly.c.bucket, func.sum(hourly.c.samples))
            .where(hourly.c.bucket >= start, hourly.c.bucket < end)
            .group_by(hourly.c.bucket)
        )
    }
    for bucket, count in counts.items():
        if rolled.get(bucket) != count:
            for resolution, target in family.targets.items():
                written = family.rollup(connection, target, bucket, bucket + _WIDTHS["1h"], resolution)
                rewritten[target.name] = rewritten.get(target.name, 0) + written
    return sum(counts.values())


def _instant(value: Any) -> datetime:
    """An hour as a UTC datetime: a stored bucket, or one computed in SQL (microseconds on SQLite)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return from_epoch_us(int(value))
