"""The batch write path: idempotent, fast on both dialects, inside the caller's transaction.

- Samples are stored lean (:mod:`fleet.store.schema`): the batch's GPU UUIDs and worker ids become integer
  keys (:func:`fleet.store.keys.resolve_keys`, one query when all are known), its enumerations become codes
  (:mod:`fleet.store.codes`), column by column at C speed, before anything is sent.
- SQLite gets one ``executemany`` of ``INSERT OR IGNORE``; PostgreSQL gets ``COPY`` into a session-local
  staging table, then ``INSERT ... SELECT ... ON CONFLICT DO NOTHING`` (COPY itself has no conflict
  handling). Batches under ``SMALL_BATCH_ROWS`` skip the staging table: one
  ``INSERT ... SELECT * FROM unnest(<an array per column>) ON CONFLICT DO NOTHING``, one round trip.
  Either way the primary key ``(ts, key)`` makes a re-sent sample a duplicate, counted and stored once.
- A bulk load that expects new data (JSONL ingest) may COPY straight into the sample tables
  (``assume_new``), which is as fast as PostgreSQL loads; a key already stored aborts it, and the caller
  repeats the load the idempotent way.
- On PostgreSQL a sample lands in its day's partition, or in the ``DEFAULT`` partition when that day has
  none yet (:mod:`fleet.store.partitions`): never refused, never lost. Rows of a closed day (one whose
  partition traded its unique index for a BRIN one, :mod:`fleet.store.closing`) go apart: with that day's
  writer lock held, into a staging table, and only those whose key the day does not hold are inserted.
- GPUs, workers and nodes are upserted from the batch with "latest window wins" and first/last seen;
  the GPU's SKU comes from an injected ``sku_resolver`` (``gpu_name -> catalog key``), so the store does not
  depend on the catalog.

The caller owns the transaction (see :func:`fleet.store.engine.writing`): a batch is stored whole or not at
all, and JSONL ingest writes a whole file in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    REAL,
    BigInteger,
    Connection,
    Float,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    case,
    func,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from fleet.contract import EngineSample, GpuSample
from fleet.store.closing import days_between, lock_closed_days, lock_days_and_find_closed
from fleet.store.columns import UtcDateTime
from fleet.store.engine import driver_connection, is_sqlite
from fleet.store.keys import KnownKeys, resolve_keys
from fleet.store.lean import (
    RAW_ENGINE_COLUMNS,
    RAW_GPU_COLUMNS,
    columns_of,
    lean_engine_rows,
    lean_gpu_rows,
)
from fleet.store.partitions import KEY_COLUMNS, floor_day
from fleet.store.rows import RowBatch, TimeEncoding, batch_from_records, time_encoding_of
from fleet.store.schema import Base

SkuResolver = Callable[[str, str | None], str | None]  # (reported name, MIG profile) -> catalog key
SMALL_BATCH_ROWS = 2_000
_UNIQUE_VIOLATION = "23505"  # PostgreSQL SQLSTATE

_GPU_TABLE, _ENGINE_TABLE = "raw_gpu_samples", "raw_engine_samples"
_PRIMARY_KEY = itemgetter(0, 6)  # ts and the GPU / worker key in RAW_GPU_COLUMNS and RAW_ENGINE_COLUMNS
_TS = itemgetter(0)
_SPANNED_DAYS = timedelta(days=31)  # up to this span a batch locks every day in it, beyond only its own
_GPU_ATTRS = ("node", "gpu_index", "gpu_name", "sku", "parent_gpu_uuid", "mig_profile", "cluster",
              "worker_id", "state", "source")  # fmt: skip
_WORKER_ATTRS = ("node", "engine", "model", "role", "role_source", "precision", "tp", "gpu_uuids", "gpu_join",
                 "cluster", "deployment", "kv_capacity_tokens", "max_running_requests")  # fmt: skip
_DIMENSIONS = {
    "nodes": ("name", ()),
    "gpus": ("gpu_uuid", _GPU_ATTRS),
    "workers": ("worker_id", _WORKER_ATTRS),
}


class DuplicateKeyError(Exception):
    """An ``assume_new`` write met a stored key; the transaction is aborted and must be rolled back."""


@dataclass(frozen=True)
class WriteCounts:
    """What a write did: rows newly stored, and rows already there (or repeated within the batch)."""

    stored: int = 0
    duplicates: int = 0

    def __add__(self, other: WriteCounts) -> WriteCounts:
        return WriteCounts(self.stored + other.stored, self.duplicates + other.duplicates)


def time_encoding_for(bind: Connection) -> TimeEncoding:
    """How :mod:`fleet.store.rows` must encode ``ts`` for this connection's dialect."""
    return time_encoding_of(bind.dialect.name)


def write_samples(
    connection: Connection,
    records: Sequence[GpuSample | EngineSample],
    *,
    sku_resolver: SkuResolver | None = None,
) -> WriteCounts:
    """Store validated records (the service's path); raises ``RowValueError`` for a value the store cannot
    hold, before anything is written."""
    batch = batch_from_records(list(records), time_encoding_for(connection))
    return write_batch(connection, batch, sku_resolver=sku_resolver)


def write_batch(
    connection: Connection, batch: RowBatch, *, sku_resolver: SkuResolver | None = None
) -> WriteCounts:
    """Store a prepared :class:`RowBatch`: its GPUs, workers and nodes, then its samples."""
    write_dimensions(connection, batch, sku_resolver=sku_resolver)
    return write_sample_rows(connection, batch)


def write_sample_rows(
    connection: Connection,
    batch: RowBatch,
    *,
    assume_new: bool = False,
    known_keys: KnownKeys | None = None,
) -> WriteCounts:
    """Store the batch's sample rows only (ingest calls :func:`write_dimensions` once per file).

    ``assume_new`` (PostgreSQL): COPY straight into the sample tables, as fast as a raw load; a key already
    stored raises :class:`DuplicateKeyError` and leaves the transaction aborted, so the caller rolls back
    and writes again without it. SQLite ignores it (its path costs the same either way). ``known_keys``:
    the GPU and worker keys resolved earlier in this transaction (:class:`fleet.store.keys.KnownKeys`),
    for a caller writing many batches in one."""
    if batch.time_encoding != time_encoding_for(connection):
        raise ValueError(f"batch encoded as {batch.time_encoding!r} for a {connection.dialect.name} store")
    if not batch.gpu_rows and not batch.engine_rows:
        return WriteCounts()
    # Transposed once: the names to resolve and the lean rows both come from the columns (C speed).
    gpu_columns, engine_columns = columns_of(batch.gpu_rows), columns_of(batch.engine_rows)
    gpu_uuids: set[str] = set(gpu_columns[0]) if gpu_columns else set()
    worker_ids: set[str] = set(gpu_columns[3]) if gpu_columns else set()
    worker_ids.discard(None)  # a GPU sample without a worker
    if engine_columns:
        worker_ids.update(engine_columns[0])
    gpu_keys, worker_keys = resolve_keys(connection, gpu_uuids, worker_ids, known_keys)
    postgres = not is_sqlite(connection)
    gpu_rows = lean_gpu_rows(
        batch.gpu_rows, gpu_keys, worker_keys, float4_counts=postgres, columns=gpu_columns
    )
    engine_rows = lean_engine_rows(batch.engine_rows, worker_keys, columns=engine_columns)
    tables = [(_GPU_TABLE, RAW_GPU_COLUMNS, gpu_rows), (_ENGINE_TABLE, RAW_ENGINE_COLUMNS, engine_rows)]
    stored = 0
    if postgres:
        tables, stored = _write_closed_days(connection, tables)
    for table, columns, rows in tables:
        if not rows:
            continue
        if not postgres:
            stored += _insert_sqlite(connection, table, columns, rows)
        elif assume_new:
            stored += _copy_postgres_new(connection, table, columns, rows)
        elif len(rows) < SMALL_BATCH_ROWS:
            stored += _insert_unnest_postgres(connection, table, columns, rows)
        else:
            stored += _copy_postgres(connection, table, columns, rows)
    return WriteCounts(stored=stored, duplicates=len(batch) - stored)


_Rows = list[tuple[Any, ...]]
_Tables = list[tuple[str, tuple[str, ...], _Rows]]


def _write_closed_days(connection: Connection, tables: _Tables) -> tuple[_Tables, int]:
    """Lock the batch's days against closing, store the rows of closed days the slow exactly-once way and
    return the other rows, for the unique-index path, with the count stored here."""
    instants = [min(map(_TS, rows)) for _, _, rows in tables if rows]
    instants += [max(map(_TS, rows)) for _, _, rows in tables if rows]
    if not instants:
        return tables, 0
    earliest, latest = min(instants), max(instants)
    if latest - earliest <= _SPANNED_DAYS:
        days = days_between(earliest, latest)
    else:  # a batch from far apart (a backfill, stored rows at the calendar's edges): only its own days
        days = sorted({floor_day(row[0]) for _, _, rows in tables for row in rows})
    closed = lock_days_and_find_closed(connection, days)
    if not any(closed.values()):
        return tables, 0
    lock_closed_days(connection, set().union(*closed.values()))
    stored = 0
    remaining: _Tables = []
    for table, columns, rows in tables:
        shut = closed[table]
        kept = rows
        if shut and rows:
            in_shut = [floor_day(row[0]) in shut for row in rows]
            late = [row for row, closed_day in zip(rows, in_shut, strict=True) if closed_day]
            stored += _insert_closed_postgres(connection, table, columns, late)
            kept = [row for row, closed_day in zip(rows, in_shut, strict=True) if not closed_day]
        remaining.append((table, columns, kept))
    return remaining, stored


def _insert_closed_postgres(connection: Connection, table: str, columns: tuple[str, ...], rows: _Rows) -> int:
    """Rows of closed days (their writer locks held): staged, then inserted unless the day holds the key
    already or the batch repeats it. Without a unique index to probe, the stored keys of the rows' time
    span are read once (the BRIN index narrows that to the blocks holding it) and hash-joined."""
    if not rows:
        return 0
    staging = _stage(connection, table, columns, rows)
    key = KEY_COLUMNS[table]
    column_list = ", ".join(columns)
    earliest, latest = min(map(_TS, rows)), max(map(_TS, rows))
    with driver_connection(connection).cursor() as cursor:
        cursor.execute(f"ANALYZE {staging}")  # sizes for the planner: a hash join, not a loop per row
        cursor.execute(
            f"INSERT INTO {table} ({column_list}) SELECT DISTINCT ON (s.ts, s.{key}) "
            f"{', '.join(f's.{c}' for c in columns)} FROM {staging} s WHERE NOT EXISTS ("
            f"SELECT 1 FROM {table} r WHERE r.ts = s.ts AND r.{key} = s.{key} "
            "AND r.ts >= %s AND r.ts <= %s) ORDER BY s.ts, s." + key,
            (earliest, latest),
        )
        return int(cursor.rowcount)


def _stage(connection: Connection, table: str, columns: tuple[str, ...], rows: _Rows) -> str:
    """COPY ``rows`` into this session's staging table for ``table``, emptied first; return its name."""
    staging = f"pf_stage_{table}"
    with driver_connection(connection).cursor() as cursor:
        # Session-local, no WAL, emptied at commit; created once per connection.
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {staging} (LIKE {table}) ON COMMIT DELETE ROWS")
        cursor.execute(f"TRUNCATE {staging}")
        with cursor.copy(f"COPY {staging} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_copy_types(table, columns))
            for row in rows:
                copy.write_row(row)
    return staging


def _insert_sqlite(
    connection: Connection, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    cursor = driver_connection(connection).cursor()
    try:
        placeholders = ", ".join("?" * len(columns))
        cursor.executemany(
            f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({placeholders})", rows
        )
        return int(cursor.rowcount)
    finally:
        cursor.close()


def _insert_unnest_postgres(
    connection: Connection, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    """One INSERT of the rows passed as one array per column: a fixed statement text (prepared and cached
    by the driver) whatever the batch size, and a single round trip."""
    rows = sorted(rows, key=_PRIMARY_KEY)  # (ts, key) order: concurrent writers wait, never deadlock
    arrays = ", ".join(f"%s::{name}[]" for name in _copy_types(table, columns))
    with driver_connection(connection).cursor() as cursor:
        statement = f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM unnest({arrays})"
        cursor.execute(
            statement + " ON CONFLICT DO NOTHING", [list(column) for column in zip(*rows, strict=True)]
        )
        return int(cursor.rowcount)


def _copy_postgres(
    connection: Connection, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    staging = _stage(connection, table, columns, rows)
    column_list = ", ".join(columns)
    with driver_connection(connection).cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({column_list}) SELECT {column_list} FROM {staging} ON CONFLICT DO NOTHING"
        )
        return int(cursor.rowcount)


def _copy_postgres_new(
    connection: Connection, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    try:
        with (
            driver_connection(connection).cursor() as cursor,
            cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types(_copy_types(table, columns))
            for row in rows:
                copy.write_row(row)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == _UNIQUE_VIOLATION:
            raise DuplicateKeyError(
                f"{table} already holds a key of this batch (or the batch repeats one)"
            ) from exc
        raise
    return len(rows)


def write_dimensions(
    connection: Connection, batch: RowBatch, *, sku_resolver: SkuResolver | None = None
) -> None:
    """Upsert the nodes, GPUs and workers the batch mentions (nodes first: the others reference them), in
    key order, so concurrent writers lock rows in the same order and cannot deadlock each other."""
    batch.finish()
    if batch.nodes:
        nodes = [
            {"name": name, "first_seen": first, "last_seen": last}
            for name, (first, last) in sorted(batch.nodes.items())
        ]
        _upsert(connection, "nodes", nodes)
    if batch.gpus:
        skus: dict[tuple[str, str | None], str | None] = {}
        gpu_rows = []
        for _, gpu in sorted(batch.gpus.items()):
            named = (gpu.gpu_name, gpu.mig_profile)
            if named not in skus:
                skus[named] = sku_resolver(*named) if sku_resolver is not None else None
            gpu_rows.append({**vars(gpu), "sku": skus[named]})
        _upsert(connection, "gpus", gpu_rows)
    if batch.workers:
        _upsert(connection, "workers", [
            {**vars(worker), "role": worker.role.value, "gpu_uuids": list(worker.gpu_uuids)}
            for _, worker in sorted(batch.workers.items())
        ])  # fmt: skip


@lru_cache(maxsize=8)
def _copy_types(table: str, columns: tuple[str, ...]) -> tuple[str, ...]:
    """PostgreSQL type names for a binary COPY (several times faster than text) into ``table``'s columns."""
    sql_table = Base.metadata.tables[table]
    names = []
    for column in columns:
        column_type = sql_table.c[column].type
        if isinstance(column_type, UtcDateTime):
            names.append("timestamptz")
        elif isinstance(column_type, BigInteger):
            names.append("int8")
        elif isinstance(column_type, SmallInteger):
            names.append("int2")
        elif isinstance(column_type, Integer):
            names.append("int4")
        elif isinstance(column_type, REAL):
            names.append("float4")
        elif isinstance(column_type, Float):
            names.append("float8")
        elif isinstance(column_type, String):
            names.append("text")
        elif isinstance(column_type, LargeBinary):  # an encoded latency histogram (bytes)
            names.append("bytea")
        else:
            raise TypeError(f"no COPY type for {table}.{column} ({column_type!r})")
    return tuple(names)


def _upsert(connection: Connection, table_name: str, rows: list[dict[str, Any]]) -> None:
    connection.execute(_upsert_statement(connection.dialect.name, table_name), rows)


@lru_cache(maxsize=16)
def _upsert_statement(dialect: str, table_name: str) -> Any:
    """Insert new keys; for known ones keep the attributes of the later window and widen first/last seen.
    Built once per dialect and table: constructing it costs more than running it for a small batch."""
    key, attributes = _DIMENSIONS[table_name]
    table = Base.metadata.tables[table_name]
    statement = sqlite.insert(table) if dialect == "sqlite" else postgresql.insert(table)
    excluded = statement.excluded
    newer = excluded.last_seen >= table.c.last_seen
    least, greatest = (func.min, func.max) if dialect == "sqlite" else (func.least, func.greatest)
    updates: dict[str, ColumnElement[Any]] = {
        name: case((newer, excluded[name]), else_=table.c[name]) for name in attributes
    }
    updates["first_seen"] = least(table.c.first_seen, excluded.first_seen)
    updates["last_seen"] = greatest(table.c.last_seen, excluded.last_seen)
    return statement.on_conflict_do_update(index_elements=[key], set_=updates)
