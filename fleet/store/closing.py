"""Open and closed day partitions of raw samples (PostgreSQL): exactly-once, with no B-tree kept at rest.

An open day partition carries a unique ``(ts, key)`` B-tree index (``<partition>_key``): the writer's
``ON CONFLICT DO NOTHING`` (and its plain ``COPY`` of a file's new rows) relies on it to store a re-sent
sample once. It costs about 31 bytes per row, a quarter of a stored GPU sample. Samples arrive within
minutes of their window, and the service refuses records older than ``PHASEFIT_INGEST_MAX_AGE_S``, so once
a day is behind the ingest horizon the index has almost nothing left to catch. :func:`close_partitions`
then closes the day: in one transaction a BRIN index on ``ts`` (``<partition>_ts``, a few bytes per
thousand rows, enough for the time-range reads, which scan whole days anyway) replaces the unique one.

Writes into a closed day still happen (a collector's backlog after a long outage, a backfill of old files)
and stay exactly-once: the writer sends those rows apart, checks them against the keys the day holds and
inserts only the new ones, one writer per day at a time (:func:`lock_closed_days`). Which days are closed
is read from the catalog (the partition, or ``DEFAULT`` for a day without one, has no unique index), never
from a list that could disagree with it.

Locks: a writer takes a shared advisory lock on every day its batch touches before it reads which are
closed (:func:`lock_days_and_find_closed`), and closing takes that day's lock exclusively, so a day never
closes between a writer's check and its insert. Closing also sets a ``lock_timeout``: the
``DROP INDEX`` waits for the readers of that day, and a closing that cannot get its locks soon is left to
the next run rather than stalling the readers and writers queued behind it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from fleet.store.engine import driver_connection, is_sqlite, writing
from fleet.store.partitions import (
    DAY,
    HAS_UNIQUE_INDEX,
    Partition,
    default_partition,
    floor_day,
    list_partitions,
    partition_name,
    unique_index_name,
)
from fleet.store.schema import RAW_SAMPLE_TABLES

DEFAULT_CLOSE_AFTER_DAYS = 1
_DAY_LOCKS = 0x70666463  # advisory lock class of a day's open/closed state ("pfdc")
_CLOSED_WRITERS = 0x70666477  # advisory lock class of the writers of a closed day ("pfdw")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_LOCK_TIMEOUT_S = 5.0
_LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL SQLSTATE of a lock_timeout


def brin_index_name(partition: str) -> str:
    return f"{partition}_ts"


def day_number(day: datetime) -> int:
    """Days since 1970-01-01 of a UTC day: the advisory lock key of that day."""
    return (floor_day(day) - _EPOCH) // DAY


def days_between(earliest: datetime, latest: datetime) -> list[datetime]:
    """The UTC days (midnights) from ``earliest``'s to ``latest``'s, both included."""
    first, last = floor_day(earliest), floor_day(latest)
    return [first + offset * DAY for offset in range((last - first) // DAY + 1)]


_LOCK_SHARED = "SELECT count(pg_advisory_xact_lock_shared(%s, d)) FROM (SELECT unnest(%s::int4[]) AS d) AS o"
_UNIQUE_INDEXED = (
    f"SELECT c.relname, {HAS_UNIQUE_INDEX} "
    "FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid WHERE c.relname = ANY(%s)"
)


def lock_days_and_find_closed(connection: Connection, days: Sequence[datetime]) -> dict[str, set[datetime]]:
    """Hold each day's state lock, shared, until the transaction ends (days in order: no deadlock), then
    say, per raw table, which of ``days`` are closed: their samples land in a partition without a unique
    index (their own partition, else ``DEFAULT``). Two statements, sent together in psycopg's pipeline
    mode: a statement that waited for a lock reads the catalog as it was before the wait, so the check
    must be a statement of its own, after the locks."""
    driver = driver_connection(connection)
    names = _partition_names(days)
    with driver.cursor() as lock, driver.cursor() as check:
        with driver.pipeline():
            lock.execute(_LOCK_SHARED, (_DAY_LOCKS, _day_numbers(days)))
            check.execute(_UNIQUE_INDEXED, (_wanted(names),))
        unique = dict(check.fetchall())
    return _closed(names, unique)


def _day_numbers(days: Iterable[datetime]) -> list[int]:
    return sorted({day_number(day) for day in days})


def _partition_names(days: Sequence[datetime]) -> dict[str, dict[str, datetime]]:
    return {table: {partition_name(table, day): day for day in days} for table in RAW_SAMPLE_TABLES}


def _wanted(names: dict[str, dict[str, datetime]]) -> list[str]:
    return [name for table in RAW_SAMPLE_TABLES for name in (*names[table], default_partition(table))]


def _closed(names: dict[str, dict[str, datetime]], unique: dict[str, bool]) -> dict[str, set[datetime]]:
    closed: dict[str, set[datetime]] = {}
    for table in RAW_SAMPLE_TABLES:
        default_open = unique.get(default_partition(table), True)
        # a day without a partition of its own lands in DEFAULT
        closed[table] = {day for name, day in names[table].items() if not unique.get(name, default_open)}
    return closed


def lock_closed_days(connection: Connection, days: Iterable[datetime]) -> None:
    """Hold each closed day's writer lock, exclusive, until the transaction ends: two writers of a closed
    day must not both find a sample missing and both store it."""
    with driver_connection(connection).cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(%s, d)) FROM (SELECT unnest(%s::int4[]) AS d) AS o",
            (_CLOSED_WRITERS, _day_numbers(days)),
        )


def closing_horizon(now: datetime, close_after_days: int) -> datetime:
    """Day partitions ending at or before this instant are closed: ``close_after_days`` whole days before
    today's (``now``'s UTC day) start. 1 keeps today and yesterday open."""
    if close_after_days < 0:
        raise ValueError(f"close_after_days must be 0 or more, not {close_after_days}")
    return floor_day(now) - close_after_days * DAY


@dataclass(frozen=True)
class ClosingResult:
    closed: list[Partition]
    deferred: list[Partition]  # their locks were not granted within the lock timeout: the next run retries


def close_partitions(
    engine: Engine,
    now: datetime,
    close_after_days: int = DEFAULT_CLOSE_AFTER_DAYS,
    *,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> ClosingResult:
    """Close every open day partition of both raw tables that ends at or before :func:`closing_horizon`,
    each in its own transaction. Idempotent, safe from several processes at once; nothing on SQLite."""
    horizon = closing_horizon(now, close_after_days)
    closed: list[Partition] = []
    deferred: list[Partition] = []
    if is_sqlite(engine):
        return ClosingResult(closed, deferred)
    for table in RAW_SAMPLE_TABLES:
        with engine.connect() as connection:
            candidates = [
                p
                for p in list_partitions(connection, table)
                if p.end is not None and p.end <= horizon and _has_unique_index(connection, p.name)
            ]
        for partition in candidates:
            try:
                with writing(engine) as connection:
                    if close_partition(connection, partition, lock_timeout_s=lock_timeout_s):
                        closed.append(partition)
            except OperationalError as exc:
                if getattr(exc.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                    raise
                deferred.append(partition)
    return ClosingResult(closed, deferred)


def close_partition(
    connection: Connection, partition: Partition, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> bool:
    """Close one day partition in the caller's transaction; False when it was closed already."""
    if partition.start is None:
        raise ValueError(f"{partition.name} is the DEFAULT partition of {partition.table}; it stays open")
    connection.execute(text(f"SET LOCAL lock_timeout = {int(lock_timeout_s * 1000)}"))
    connection.execute(
        text("SELECT pg_advisory_xact_lock(:lock_class, :day)"),
        {"lock_class": _DAY_LOCKS, "day": day_number(partition.start)},
    )
    if not _has_unique_index(connection, partition.name):
        return False
    brin = brin_index_name(partition.name)
    connection.execute(text(f"CREATE INDEX IF NOT EXISTS {brin} ON {partition.name} USING brin (ts)"))
    connection.execute(text(f"DROP INDEX {unique_index_name(partition.name)}"))
    # Statistics for the reads of closed days, which the BRIN index serves once the planner knows the rows.
    connection.execute(text(f"ANALYZE {partition.name}"))
    return True


def _has_unique_index(connection: Connection, name: str) -> bool:
    return bool(
        connection.execute(
            text(f"SELECT {HAS_UNIQUE_INDEX} FROM pg_class c WHERE c.oid = CAST(:name AS regclass)"),
            {"name": name},
        ).scalar_one()
    )
