"""Read helpers for the analyzer, the service and the dashboard.

Sample reads return columns, not ORM objects: ``{"ts": [...], "gpu_uuid": [...], ...}`` with one list per
column, rows ordered by (ts, key). ``ts`` is POSIX seconds (float, UTC) so vectorised code can take it as is
(``numpy.asarray(columns["ts"])``). Time ranges are half-open: ``since <= ts < until``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, Float, Select, Table, func, select, type_coerce
from sqlalchemy.sql.elements import ColumnElement

from fleet.contract import Role
from fleet.inventory import GpuRecord, WorkerRecord
from fleet.store.engine import is_sqlite
from fleet.store.rows import ENGINE_SAMPLE_COLUMNS, GPU_SAMPLE_COLUMNS
from fleet.store.schema import (
    RAW_SAMPLE_TABLES,
    Base,
    EngineSample1hRow,
    EngineSample1mRow,
    EngineSampleRow,
    GpuRow,
    GpuSample1hRow,
    GpuSample1mRow,
    GpuSampleRow,
    WorkerRow,
    is_view,
    table_of,
)
from fleet.store.time_span import raw_time_range

Columns = dict[str, list[Any]]
Resolution = Literal["1m", "1h"]
_GPU_ROLLUPS = {"1m": GpuSample1mRow.__table__, "1h": GpuSample1hRow.__table__}
_ENGINE_ROLLUPS = {"1m": EngineSample1mRow.__table__, "1h": EngineSample1hRow.__table__}


def _gpu(row: Mapping[Any, Any]) -> GpuRecord:
    return GpuRecord(**row)


def _worker(row: Mapping[Any, Any]) -> WorkerRecord:
    """A stored worker; a role the contract no longer names reads as unknown rather than failing the read."""
    values = dict(row)
    values["role"] = Role(values["role"]) if values["role"] in Role._value2member_map_ else Role.UNKNOWN
    values["gpu_uuids"] = tuple(values["gpu_uuids"] or ())
    return WorkerRecord(**values)


def epoch_seconds(connection: Connection, column: Any) -> ColumnElement[Any]:
    """SQL for a stored timestamp as POSIX seconds (float)."""
    if is_sqlite(connection):
        return type_coerce(column, Float) / 1_000_000.0
    return type_coerce(func.date_part("epoch", column), Float)


def _columnar(
    connection: Connection,
    table: Any,
    *,
    time_column: str,
    key: str,
    names: Sequence[str],
    since: datetime,
    until: datetime,
    filters: dict[str, Sequence[str] | None],
) -> Columns:
    assert isinstance(table, Table)
    unknown = [name for name in names if name not in table.c and name != "ts"]
    if unknown:
        raise ValueError(f"unknown columns {unknown} for {table.name}; known: {list(table.c.keys())}")
    time_col = table.c[time_column]
    selected = [epoch_seconds(connection, time_col).label("ts") if n == "ts" else table.c[n] for n in names]
    statement: Select[Any] = select(*selected).where(time_col >= since, time_col < until)
    for column, values in filters.items():
        if values is not None:
            statement = statement.where(table.c[column].in_(list(values)))
    rows = connection.execute(statement.order_by(time_col, table.c[key])).all()
    if not rows:
        return {name: [] for name in names}
    return {name: list(values) for name, values in zip(names, zip(*rows, strict=True), strict=True)}


def gpu_samples(
    connection: Connection,
    since: datetime,
    until: datetime,
    *,
    gpu_uuids: Sequence[str] | None = None,
    worker_ids: Sequence[str] | None = None,
    columns: Sequence[str] = GPU_SAMPLE_COLUMNS,
) -> Columns:
    """Raw GPU samples in [since, until), fleet-wide or for some GPUs / some workers' GPUs."""
    filters = {"gpu_uuid": gpu_uuids, "worker_id": worker_ids}
    return _columnar(
        connection,
        GpuSampleRow.__table__,
        time_column="ts",
        key="gpu_uuid",
        names=columns,
        since=since,
        until=until,
        filters=filters,
    )


def engine_samples(
    connection: Connection,
    since: datetime,
    until: datetime,
    *,
    worker_ids: Sequence[str] | None = None,
    columns: Sequence[str] = ENGINE_SAMPLE_COLUMNS,
) -> Columns:
    """Raw engine samples in [since, until), fleet-wide or for some workers."""
    filters = {"worker_id": worker_ids}
    return _columnar(
        connection,
        EngineSampleRow.__table__,
        time_column="ts",
        key="worker_id",
        names=columns,
        since=since,
        until=until,
        filters=filters,
    )


def gpu_rollups(
    connection: Connection,
    resolution: Resolution,
    since: datetime,
    until: datetime,
    *,
    gpu_uuids: Sequence[str] | None = None,
    worker_ids: Sequence[str] | None = None,
) -> Columns:
    """Per-minute or per-hour GPU aggregates whose bucket starts in [since, until) (``ts``: bucket start)."""
    table = _GPU_ROLLUPS[resolution]
    names = ["ts", *(column.name for column in table.c if column.name != "bucket")]
    filters = {"gpu_uuid": gpu_uuids, "worker_id": worker_ids}
    return _columnar(
        connection,
        table,
        time_column="bucket",
        key="gpu_uuid",
        names=names,
        since=since,
        until=until,
        filters=filters,
    )


def engine_rollups(
    connection: Connection,
    resolution: Resolution,
    since: datetime,
    until: datetime,
    *,
    worker_ids: Sequence[str] | None = None,
) -> Columns:
    """Per-minute or per-hour worker aggregates whose bucket starts in [since, until)."""
    table = _ENGINE_ROLLUPS[resolution]
    names = ["ts", *(column.name for column in table.c if column.name != "bucket")]
    return _columnar(
        connection,
        table,
        time_column="bucket",
        key="worker_id",
        names=names,
        since=since,
        until=until,
        filters={"worker_id": worker_ids},
    )


def sample_time_range(
    connection: Connection, *, before: datetime | None = None
) -> tuple[datetime, datetime] | None:
    """First and last raw sample timestamps over both sample tables (only those before ``before`` when
    given: a sample stamped in the future by a skewed clock must not move a default range), or None."""
    bounds = [
        span for table in RAW_SAMPLE_TABLES if (span := raw_time_range(connection, table, before=before))
    ]
    if not bounds:
        return None
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


def rolled_up_until(connection: Connection) -> datetime | None:
    """End of the last hour both hourly rollups cover (None when either is empty)."""
    ends: list[datetime] = []
    for model in (GpuSample1hRow, EngineSample1hRow):
        last = connection.execute(select(func.max(table_of(model).c.bucket))).scalar_one()
        if last is None:
            return None
        assert isinstance(last, datetime)
        ends.append(_later(last, timedelta(hours=1)))
    return min(ends)


def _later(moment: datetime, delta: timedelta) -> datetime:
    """``moment + delta``, or the last representable instant for a row stored at the calendar's end."""
    try:
        return moment + delta
    except OverflowError:
        return datetime.max.replace(tzinfo=moment.tzinfo)


def telemetry_span(connection: Connection) -> tuple[datetime | None, datetime | None]:
    """Where stored telemetry starts and ends: raw samples, and the hourly rollups that outlive them
    (the end is exclusive: a second after the last raw sample, or the end of the last rolled-up hour)."""
    span = sample_time_range(connection)
    first_rollup = connection.execute(select(func.min(table_of(GpuSample1hRow).c.bucket))).scalar_one()
    ends = [
        t for t in (_later(span[1], timedelta(seconds=1)) if span else None, rolled_up_until(connection)) if t
    ]
    starts = [t for t in (span[0] if span else None, first_rollup) if t is not None]
    return (min(starts) if starts else None, max(ends) if ends else None)


def list_gpus(connection: Connection, *, node: str | None = None, sku: str | None = None) -> list[GpuRecord]:
    statement = select(GpuRow).order_by(GpuRow.node, GpuRow.gpu_index, GpuRow.gpu_uuid)
    if node is not None:
        statement = statement.where(GpuRow.node == node)
    if sku is not None:
        statement = statement.where(GpuRow.sku == sku)
    return [_gpu(row) for row in connection.execute(statement).mappings()]


def list_workers(
    connection: Connection,
    *,
    model: str | None = None,
    role: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[WorkerRecord]:
    statement = select(WorkerRow).order_by(WorkerRow.worker_id).offset(offset).limit(limit)
    if model is not None:
        statement = statement.where(WorkerRow.model == model)
    if role is not None:
        statement = statement.where(WorkerRow.role == role)
    return [_worker(row) for row in connection.execute(statement).mappings()]


def get_worker(connection: Connection, worker_id: str) -> WorkerRecord | None:
    row = connection.execute(select(WorkerRow).where(WorkerRow.worker_id == worker_id)).mappings().first()
    return _worker(row) if row is not None else None


def table_counts(connection: Connection) -> dict[str, int]:
    """Row count of every phasefit table, in dependency order; raw samples under their views' names
    (``gpu_samples``, ``engine_samples``), the tables that store them (``raw_*``) not repeated."""
    return {
        table.name: int(connection.execute(select(func.count()).select_from(_counted(table))).scalar_one())
        for table in Base.metadata.sorted_tables
        if "rows_of" not in table.info
    }


def _counted(table: Table) -> Table:
    """What to count for ``table``: a sample view's rows are its raw table's (no join to count through)."""
    if is_view(table):
        return next(t for t in Base.metadata.tables.values() if t.info.get("rows_of") == table.name)
    return table
