"""Raw-sample retention and rollups (``phasefit db prune``).

``PHASEFIT_RAW_RETENTION_DAYS`` (default 14, :class:`fleet.settings.Settings.raw_retention_days`) is how
many days of raw ``gpu_samples`` / ``engine_samples`` the store keeps. Before raw rows go, they are rolled
up per minute and per hour (``*_1m`` / ``*_1h`` tables: averages of ratios and gauges over the non-null
samples, sums of tokens and preemptions, maxima of memory, queue and latency quantiles, sample counts);
rollups are never pruned, so reads over weeks use them.

A prune run:

1. recomputes the rollup buckets of every complete hour from the last rolled-up hour minus a look-back
   (24 h by default, so late samples that collectors replayed from their spool are counted) up to the
   start of the current hour; ``full=True`` recomputes from the oldest raw sample instead;
2. deletes raw samples older than ``now - retention_days`` (rounded down to the hour, so no bucket is cut).

Both happen in one transaction. Run it from cron or a Kubernetes CronJob, e.g. hourly.
Future work (DESIGN.md, Scale): on PostgreSQL, daily partitions of the raw tables would turn step 2 into
dropping whole partitions.
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
    delete,
    func,
    insert,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.sql.elements import ColumnElement

from fleet.store.engine import is_sqlite, writing
from fleet.store.schema import (
    EngineSample1hRow,
    EngineSample1mRow,
    EngineSampleRow,
    GpuSample1hRow,
    GpuSample1mRow,
    GpuSampleRow,
    table_of,
)

DEFAULT_LOOKBACK = timedelta(hours=24)
_WIDTHS = {"1m": timedelta(minutes=1), "1h": timedelta(hours=1)}
_UNITS = {"1m": "minute", "1h": "hour"}


@dataclass(frozen=True)
class PruneResult:
    cutoff: datetime  # raw samples before this were deleted
    rolled_up_until: datetime  # rollups are complete up to this hour
    rollup_rows: dict[str, int] = field(default_factory=dict)  # rows (re)written per rollup table
    deleted: dict[str, int] = field(default_factory=dict)  # raw rows deleted per table


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _bucket(connection: Connection, column: Any, resolution: str) -> ColumnElement[Any]:
    # Literals, not bound parameters: PostgreSQL only matches the GROUP BY expression to the selected one
    # when both are spelled identically.
    if is_sqlite(connection):
        width_us = literal_column(str(_WIDTHS[resolution] // timedelta(microseconds=1)), BigInteger)
        return (type_coerce(column, BigInteger) // width_us) * width_us
    return func.date_trunc(literal_column(f"'{_UNITS[resolution]}'"), column, literal_column("'UTC'"))


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
        "kv_cache_usage_avg": func.avg(c.kv_cache_usage),
        "kv_cache_usage_max": func.max(c.kv_cache_usage),
        "ttft_p50_s_avg": func.avg(c.ttft_p50_s),
        "ttft_p99_s_max": func.max(c.ttft_p99_s),
        "tpot_p50_s_avg": func.avg(c.tpot_p50_s),
        "tpot_p99_s_max": func.max(c.tpot_p99_s),
    }
    source = select(*columns.values()).where(c.ts >= start, c.ts < end).group_by(c.worker_id, bucket)
    return _replace(connection, target, start=start, end=end, columns=list(columns), source=source)


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
_FAMILIES: tuple[tuple[Table, _Rollup, dict[str, Table]], ...] = (
    (table_of(GpuSampleRow), _gpu_rollup, {"1m": table_of(GpuSample1mRow), "1h": table_of(GpuSample1hRow)}),
    (
        table_of(EngineSampleRow),
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
        target.name: rollup(connection, target, start, end, resolution)
        for _raw, rollup, targets in _FAMILIES
        for resolution, target in targets.items()
        if resolution in resolutions
    }


def apply_retention(
    engine: Engine,
    *,
    now: datetime,
    retention_days: int,
    full: bool = False,
    lookback: timedelta = DEFAULT_LOOKBACK,
) -> PruneResult:
    """Roll up complete hours, then delete raw samples older than the retention (module docstring)."""
    if retention_days < 1:
        raise ValueError("retention_days must be at least 1")
    end = floor_hour(now)
    cutoff = floor_hour(now - timedelta(days=retention_days))
    rollup_rows: dict[str, int] = {}
    deleted: dict[str, int] = {}
    with writing(engine) as connection:
        for raw, rollup, targets in _FAMILIES:
            earliest = connection.execute(select(func.min(raw.c.ts))).scalar_one()
            if earliest is not None:
                start = floor_hour(earliest)
                done = connection.execute(select(func.max(targets["1h"].c.bucket))).scalar_one()
                if done is not None and not full:
                    start = max(start, done - lookback)
                for resolution, target in targets.items():
                    rollup_rows[target.name] = (
                        rollup(connection, target, start, end, resolution) if start < end else 0
                    )
            deleted[raw.name] = int(connection.execute(delete(raw).where(raw.c.ts < cutoff)).rowcount)
    return PruneResult(cutoff, end, rollup_rows, deleted)
