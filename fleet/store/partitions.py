"""Daily partitions of the raw sample tables on PostgreSQL (SQLite keeps one unpartitioned table).

``raw_gpu_samples`` and ``raw_engine_samples`` are partitioned by ``RANGE (ts)``, one partition per UTC day
(``raw_gpu_samples_p20260302`` holds [2026-03-02, 2026-03-03)), plus a ``DEFAULT`` partition
(``raw_gpu_samples_default``); each carries a unique ``(ts, key)`` index while open, and trades it for a
BRIN index once closed (:mod:`fleet.store.closing`). :func:`ensure_partitions` creates today's and the
next ``days_ahead`` days' partitions ahead of the samples; ``phasefit db upgrade``, ``phasefit db
partitions`` and the hourly ``phasefit db prune`` call it, and so should anything long-running that writes
samples, on start.

A sample whose day has no partition (the partitions were not kept ahead, a collector's clock is off, a
backfill of old files) lands in the ``DEFAULT`` partition: ingest never fails or loses data for want of a
partition, and no DDL ever runs on the ingest path (creating a partition there would take locks that stall
every concurrent writer). :func:`partition_backfilled_days` (``phasefit db upgrade``, ``db partitions``,
``db prune``) then gives every day ``DEFAULT`` holds samples of, from the retention's start on, a partition
of its own, so a backfilled day is closed (:mod:`fleet.store.closing`) and dropped like any other. Whenever
a day's partition is created, the day's rows move out of ``DEFAULT`` in the same transaction, in time order
(what the day's BRIN index needs once it is closed): each row is in exactly one partition at every commit.
Retention drops whole day partitions and deletes the rows ``DEFAULT`` holds past the retention
(:mod:`fleet.store.retention`).

Locks: a partition is created as a plain table and then attached (``SHARE UPDATE EXCLUSIVE`` on the parent:
readers and writers of other days carry on); the ``DEFAULT`` partition is locked while rows are moved out
of it and while the attach checks it (a scan of ``DEFAULT``: small when partitions are kept ahead, and only
the days of a backfill make it large until they move). Concurrent callers serialise on an advisory lock.
Moving a backfilled day waits at most a few seconds for these locks, then leaves the day to the next run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from fleet.store.engine import is_sqlite, writing
from fleet.store.schema import RAW_SAMPLE_TABLES, Base, is_view

DEFAULT_DAYS_AHEAD = 7
KEY_COLUMNS = {"raw_gpu_samples": "gpu_key", "raw_engine_samples": "worker_key"}  # with ts: a sample's key
DAY = timedelta(days=1)
DEFAULT_LOCK_TIMEOUT_S = 5.0  # how long moving a backfilled day waits for its locks before deferring
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL SQLSTATE of a lock_timeout
_LOCK_KEY = 0x70667074  # advisory lock: one process creating partitions at a time ("pfpt")
_BOUND = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True)
class Partition:
    """One partition of a raw sample table: [start, end), or both None for the ``DEFAULT`` partition."""

    table: str
    name: str
    start: datetime | None
    end: datetime | None

    @property
    def is_default(self) -> bool:
        return self.start is None


def floor_day(moment: datetime) -> datetime:
    """Midnight UTC of ``moment``'s day (``moment`` must be timezone-aware)."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment.isoformat()} has no time zone; partitions are UTC days")
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def days_to_ensure(now: datetime, days_ahead: int = DEFAULT_DAYS_AHEAD) -> list[datetime]:
    """The UTC days (midnights) that must have a partition at ``now``: today and the next ``days_ahead``."""
    if days_ahead < 0:
        raise ValueError(f"days_ahead must be 0 or more, not {days_ahead}")
    today = floor_day(now)
    return [today + offset * DAY for offset in range(days_ahead + 1)]


def partition_name(table: str, day: datetime) -> str:
    """``raw_gpu_samples_p20260302`` for the table's partition of that UTC day."""
    return f"{table}_p{floor_day(day):%Y%m%d}"


def default_partition(table: str) -> str:
    return f"{table}_default"


# SQL: whether the relation ``c`` (a pg_class row) has a unique index, i.e. its day is open.
HAS_UNIQUE_INDEX = "EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisunique)"


def unique_index_name(partition: str) -> str:
    return f"{partition}_key"


def create_open_index(connection: Connection, table: str, partition: str) -> None:
    """The unique ``(ts, key)`` index every partition has while it is open (:mod:`fleet.store.closing`):
    what makes a re-sent sample a duplicate. Created before the partition is attached."""
    connection.execute(
        text(f"CREATE UNIQUE INDEX {unique_index_name(partition)} ON {partition} (ts, {KEY_COLUMNS[table]})")
    )


def list_partitions(connection: Connection, table: str) -> list[Partition]:
    """The partitions of ``table`` (PostgreSQL), day partitions by start, then ``DEFAULT``."""
    rows = connection.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:table AS regclass)"
        ),
        {"table": table},
    ).all()
    found = []
    for name, bound in rows:
        if bound == "DEFAULT":
            found.append(Partition(table, name, None, None))
            continue
        match = _BOUND.fullmatch(bound)
        if match is None:
            raise RuntimeError(f"partition {name} of {table} has bounds phasefit does not use: {bound}")
        start, end = (datetime.fromisoformat(value).astimezone(UTC) for value in match.groups())
        found.append(Partition(table, name, start, end))
    return sorted(found, key=lambda p: (p.start is None, p.start or datetime.min.replace(tzinfo=UTC)))


def ensure_partitions(engine: Engine, now: datetime, days_ahead: int = DEFAULT_DAYS_AHEAD) -> list[Partition]:
    """Create the day partitions :func:`days_to_ensure` names that do not exist yet, for both raw sample
    tables, each in its own short transaction; return those created (none on SQLite). Idempotent and safe
    to run from several processes at once."""
    days = days_to_ensure(now, days_ahead)
    if is_sqlite(engine):
        return []
    created = []
    for table in RAW_SAMPLE_TABLES:
        with engine.connect() as connection:
            covered = _covered(list_partitions(connection, table))
        for day in days:
            if day in covered:
                continue
            with writing(engine) as connection:
                partition = create_partition(connection, table, day)
            if partition is not None:
                created.append(partition)
    return created


def partition_backfilled_days(
    engine: Engine,
    keep_from: datetime,
    *,
    until: datetime | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    deferred: list[str] | None = None,
) -> list[Partition]:
    """Create a partition for every UTC day from ``keep_from``'s on that the ``DEFAULT`` partition holds
    samples of (a backfill, a collector's clock off), moving the day's rows into it, one transaction per
    table and day; return those created (none on SQLite). Days before ``keep_from`` (the retention's start)
    stay in ``DEFAULT`` for the prune to delete. A day whose locks are not granted within
    ``lock_timeout_s`` (a backfill still writing into ``DEFAULT``, a long read of it) is left to the next
    run rather than stalling the writers queued behind the move; its name goes to ``deferred``. Days from
    ``until`` on (a collector's clock years ahead) get no partition a retention would keep for years: they
    stay in ``DEFAULT``. ``DEFAULT`` is vacuumed afterwards, so its emptied pages go back to the file system
    rather than waiting for autovacuum."""
    if not lock_timeout_s >= 0.001:  # PostgreSQL reads a lock_timeout of 0 as "wait forever"
        raise ValueError(f"lock_timeout_s must be at least 0.001 s, got {lock_timeout_s}")
    since = floor_day(keep_from)
    if is_sqlite(engine):
        return []
    created = []
    for table in RAW_SAMPLE_TABLES:
        with engine.connect() as connection:
            days = [d for d in days_in_default(connection, table, since) if until is None or d < until]
        moved = []
        for day in days:
            partition = _move_day(engine, table, day, lock_timeout_s)
            if partition is not None:
                moved.append(partition)
            elif deferred is not None and not _has_partition(engine, table, day):
                deferred.append(partition_name(table, day))
        if moved:
            vacuum(engine, default_partition(table))
        created += moved
    return created


def _move_day(engine: Engine, table: str, day: datetime, lock_timeout_s: float) -> Partition | None:
    """:func:`create_partition` in a transaction of its own under a lock timeout; None when the partition
    exists already or the locks were not granted in time."""
    try:
        with writing(engine) as connection:
            connection.execute(text(f"SET LOCAL lock_timeout = {int(lock_timeout_s * 1000)}"))
            return create_partition(connection, table, day)
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        return None


def _has_partition(engine: Engine, table: str, day: datetime) -> bool:
    with engine.connect() as connection:
        return any(p.start == day for p in list_partitions(connection, table))


def days_in_default(connection: Connection, table: str, since: datetime) -> list[datetime]:
    """The UTC days from ``since`` on that ``table``'s ``DEFAULT`` partition holds samples of: one probe of
    its ``(ts, key)`` index per day found, however many rows each day has."""
    if not any(p.is_default for p in list_partitions(connection, table)):
        return []
    days: list[datetime] = []
    first = _first_sample(connection, default_partition(table), since)
    while first is not None:
        days.append(floor_day(first))
        first = _first_sample(connection, default_partition(table), days[-1] + DAY)
    return days


def _first_sample(connection: Connection, relation: str, since: datetime) -> datetime | None:
    query = text(f"SELECT min(ts) FROM {relation} WHERE ts >= :since")
    first: datetime | None = connection.execute(query, {"since": since}).scalar_one()
    return first


def vacuum(engine: Engine, relation: str) -> None:
    """``VACUUM (ANALYZE)`` one relation (outside any transaction, as PostgreSQL requires): its row estimate
    becomes true, and its empty trailing pages are given back when no one else holds a lock on it."""
    with engine.connect() as connection:
        autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
        autocommit.execute(text(f"VACUUM (ANALYZE) {relation}"))


def _covered(partitions: list[Partition]) -> set[datetime]:
    return {p.start for p in partitions if p.start is not None and p.end == p.start + DAY}


def create_partition(connection: Connection, table: str, day: datetime) -> Partition | None:
    """Create ``table``'s partition of ``day`` in the caller's transaction, moving that day's rows out of
    the ``DEFAULT`` partition; None when another process created it first. Raises when an existing
    partition overlaps the day without being exactly that day (made by hand: phasefit will not guess)."""
    start = floor_day(day)
    end = start + DAY
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    existing = list_partitions(connection, table)
    for partition in existing:
        if partition.start is None or partition.end is None:
            continue
        if partition.start == start and partition.end == end:
            return None
        if partition.start < end and start < partition.end:
            raise RuntimeError(
                f"{partition.name} covers [{partition.start.isoformat()}, {partition.end.isoformat()}), "
                f"which overlaps the day {start:%Y-%m-%d}: drop or detach it, phasefit partitions by UTC day"
            )
    name = partition_name(table, start)
    default = default_partition(table)
    has_default = any(p.is_default for p in existing)
    if has_default:  # no sample of the day may slip into DEFAULT between the move and the attach
        connection.execute(text(f"LOCK TABLE {default} IN SHARE ROW EXCLUSIVE MODE"))
    connection.execute(text(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    create_open_index(connection, table, name)
    if has_default:
        connection.execute(
            text(
                f"WITH moved AS (DELETE FROM {default} WHERE ts >= :start AND ts < :end RETURNING *) "
                f"INSERT INTO {name} SELECT * FROM moved ORDER BY ts, {KEY_COLUMNS[table]}"
            ),
            {"start": start, "end": end},
        )
    connection.execute(
        text(
            f"ALTER TABLE {table} ATTACH PARTITION {name} "
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    )
    return Partition(table, name, start, end)


def drop_partition(connection: Connection, partition: Partition) -> None:
    """Drop a day partition and its rows (takes ``ACCESS EXCLUSIVE`` on the parent until commit)."""
    if partition.is_default:
        raise ValueError(
            f"{partition.name} is the DEFAULT partition of {partition.table}; it is never dropped"
        )
    connection.execute(text(f"DROP TABLE {partition.name}"))


@dataclass(frozen=True)
class PartitionSize:
    partition: Partition
    bytes: int  # pg_total_relation_size: table, index and TOAST
    rows: int  # the planner's estimate (pg_class.reltuples), 0 before the first ANALYZE or VACUUM
    open: bool  # it has its unique index (fleet.store.closing)


def partition_sizes(connection: Connection, table: str) -> list[PartitionSize]:
    """Each partition of ``table`` with its size on disk and estimated rows (PostgreSQL)."""
    sizes = []
    for partition in list_partitions(connection, table):
        size, rows, is_open = connection.execute(
            text(
                "SELECT pg_total_relation_size(c.oid), greatest(c.reltuples, 0)::bigint, "
                f"{HAS_UNIQUE_INDEX} FROM pg_class c WHERE c.oid = CAST(:name AS regclass)"
            ),
            {"name": partition.name},
        ).one()
        sizes.append(PartitionSize(partition, int(size), int(rows), bool(is_open)))
    return sizes


PARTITION_NAME = re.compile(r"raw_(gpu|engine)_samples_(p\d{8}|default)")


def compared_by_autogenerate(_object: Any, name: str | None, kind: str, reflected: bool, _to: Any) -> bool:
    """Alembic's ``include_object``: the day partitions (in the database only) and the reading views (in the
    metadata only, as tables) are not schema drift."""
    if kind != "table" or name is None:
        return True
    if reflected:
        return PARTITION_NAME.fullmatch(name) is None
    return not is_view(Base.metadata.tables[name]) if name in Base.metadata.tables else True
