"""The first and last raw sample of a table, cheaply on closed day partitions too.

``min(ts)`` over a partitioned table walks the partitions in order and stops at the first that holds a row;
an open day answers from its unique index, but a closed day (:mod:`fleet.store.closing`) has only a BRIN
index, which cannot be read in order, so a plain ``min(ts)`` would read the whole of the oldest day (9 GB a
day at 10,000 GPUs in 10-s windows) for every dashboard load and every prune. Here each day partition is
asked for its first row within growing windows from the day's start (its last, from the day's end): rows
arrive in time order, so the BRIN index narrows each probe to the first (last) few blocks, and the answer is
exact because a window's minimum, when it has one, is the day's.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, func, select, text

from fleet.store.engine import is_sqlite
from fleet.store.partitions import DAY, Partition, list_partitions
from fleet.store.schema import RawEngineSampleRow, RawGpuSampleRow, table_of

_WINDOWS = (timedelta(minutes=10), timedelta(hours=2), DAY)
_TABLES = {row.__tablename__: table_of(row) for row in (RawGpuSampleRow, RawEngineSampleRow)}


def raw_time_range(
    connection: Connection, table: str, *, before: datetime | None = None
) -> tuple[datetime, datetime] | None:
    """First and last ``ts`` of ``table`` (a raw sample table), only among those before ``before`` when
    given; None when it holds none."""
    raw = _TABLES[table]
    if is_sqlite(connection):  # one table clustered on (ts, key): both ends are index reads
        statement = select(func.min(raw.c.ts), func.max(raw.c.ts))
        if before is not None:
            statement = statement.where(raw.c.ts < before)
        first, last = connection.execute(statement).one()
        return None if first is None else (first, last)
    partitions = list_partitions(connection, table)
    days = [
        p for p in partitions if not p.is_default and (before is None or p.start is None or p.start < before)
    ]
    bounds = [_default_bounds(connection, p, before) for p in partitions if p.is_default]
    first = next((found for p in days if (found := _first(connection, p, before)) is not None), None)
    last = next((found for p in reversed(days) if (found := _last(connection, p, before)) is not None), None)
    if first is not None and last is not None:
        bounds.append((first, last))
    spans = [b for b in bounds if b is not None]
    if not spans:
        return None
    return min(b[0] for b in spans), max(b[1] for b in spans)


def _first(connection: Connection, partition: Partition, before: datetime | None) -> datetime | None:
    assert partition.start is not None and partition.end is not None
    for window in _WINDOWS:
        upper = min(partition.start + window, partition.end)
        if before is not None:
            upper = min(upper, before)
        found = _scalar(connection, f"SELECT min(ts) FROM {partition.name} WHERE ts < :upper", upper=upper)
        if found is not None or upper >= partition.end or (before is not None and upper >= before):
            return found
    return None


def _last(connection: Connection, partition: Partition, before: datetime | None) -> datetime | None:
    assert partition.start is not None and partition.end is not None
    upper = partition.end if before is None else min(partition.end, before)
    for window in _WINDOWS:
        lower = max(upper - window, partition.start)
        found = _scalar(
            connection, f"SELECT max(ts) FROM {partition.name} WHERE ts >= :lower AND ts < :upper",
            lower=lower, upper=upper,
        )  # fmt: skip
        if found is not None or lower <= partition.start:
            return found
    return None


def _default_bounds(
    connection: Connection, partition: Partition, before: datetime | None
) -> tuple[datetime, datetime] | None:
    """The ``DEFAULT`` partition is never closed: its unique index answers both ends."""
    where = "" if before is None else " WHERE ts < :before"
    first, last = connection.execute(
        text(f"SELECT min(ts), max(ts) FROM {partition.name}{where}"), {"before": before}
    ).one()
    return None if first is None else (first, last)


def _scalar(connection: Connection, sql: str, **values: datetime) -> datetime | None:
    found: datetime | None = connection.execute(text(sql), values).scalar()
    return found
