"""The integer keys raw samples store for GPU UUIDs and worker ids (``gpu_keys`` / ``worker_keys``).

:func:`resolve_keys` returns the key of every name a batch mentions, creating the missing ones inside the
caller's transaction. In the steady state (every name known) it costs one query for both tables. A key is
never deleted or reused, so a raw row's key means the same name for as long as the row exists.

New names are inserted in sorted order, so concurrent writers lock them in the same order and cannot
deadlock; only names missing from a first lookup are inserted, so the PostgreSQL sequence behind ``id`` is
consumed by new names only (``INSERT ... ON CONFLICT`` draws a value for every row it tries). A name another
transaction committed between the lookup and the insert is read again afterwards (a new statement sees it
under READ COMMITTED).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from fleet.store.engine import driver_connection, is_sqlite

_CHUNK = 500  # names per IN list on SQLite
_TABLES = (("gpu_keys", "gpu_uuid"), ("worker_keys", "worker_id"))


@dataclass
class KnownKeys:
    """The keys resolved so far in one transaction (JSONL ingest: one per file), so that a batch naming
    only GPUs and workers resolved before costs no query (each block of a file names the same ones: on
    PostgreSQL the lookup sent ~1,500 names per block, a tenth of the file's write time). Valid for that
    transaction only: a key it created is gone if it rolls back; a committed key never changes."""

    gpus: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)


def resolve_keys(
    connection: Connection,
    gpu_uuids: Collection[str],
    worker_ids: Collection[str],
    known: KnownKeys | None = None,
) -> tuple[dict[str, int], dict[str, int]]:
    """The keys of ``gpu_uuids`` and ``worker_ids`` (created when missing), as ``name -> key``. With
    ``known`` (this transaction's), only the names it lacks are looked up; it learns them, and its own
    dictionaries are returned (every name asked for, and those resolved before)."""
    if known is None:
        return _resolve(connection, gpu_uuids, worker_ids)
    gpus, workers = known.gpus, known.workers
    new_gpus = [name for name in set(gpu_uuids) if name not in gpus]
    new_workers = [name for name in set(worker_ids) if name not in workers]
    if new_gpus or new_workers:
        found_gpus, found_workers = _resolve(connection, new_gpus, new_workers)
        gpus.update(found_gpus)
        workers.update(found_workers)
    return gpus, workers


def _resolve(
    connection: Connection, gpu_uuids: Collection[str], worker_ids: Collection[str]
) -> tuple[dict[str, int], dict[str, int]]:
    wanted = (sorted(set(gpu_uuids)), sorted(set(worker_ids)))
    if not wanted[0] and not wanted[1]:
        return {}, {}
    cursor = driver_connection(connection).cursor()
    try:
        if is_sqlite(connection):
            return _sqlite(cursor, wanted[0], "gpu_keys", "gpu_uuid"), _sqlite(
                cursor, wanted[1], "worker_keys", "worker_id"
            )
        return _postgres(cursor, wanted)
    finally:
        cursor.close()


def _sqlite(cursor: Any, names: list[str], table: str, column: str) -> dict[str, int]:
    found = _sqlite_lookup(cursor, names, table, column)
    missing = [name for name in names if name not in found]
    if missing:
        cursor.executemany(f"INSERT OR IGNORE INTO {table} ({column}) VALUES (?)", [(n,) for n in missing])
        found.update(_sqlite_lookup(cursor, missing, table, column))
    _check(found, names, table)
    return found


def _sqlite_lookup(cursor: Any, names: list[str], table: str, column: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for start in range(0, len(names), _CHUNK):
        chunk = names[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        cursor.execute(f"SELECT {column}, id FROM {table} WHERE {column} IN ({marks})", chunk)
        found.update(cursor.fetchall())
    return found


def _postgres(cursor: Any, wanted: tuple[list[str], list[str]]) -> tuple[dict[str, int], dict[str, int]]:
    found = _postgres_lookup(cursor, wanted)
    for index, (table, column) in enumerate(_TABLES):
        missing = [name for name in wanted[index] if name not in found[index]]
        if not missing:
            continue
        cursor.execute(
            f"INSERT INTO {table} ({column}) SELECT name FROM unnest(%s::text[]) AS new(name) ORDER BY name "
            f"ON CONFLICT DO NOTHING RETURNING {column}, id",
            [missing],
        )
        found[index].update(cursor.fetchall())
        raced = [name for name in missing if name not in found[index]]
        if raced:  # committed by another writer since our lookup
            cursor.execute(f"SELECT {column}, id FROM {table} WHERE {column} = ANY(%s)", [raced])
            found[index].update(cursor.fetchall())
    for index, (table, _column) in enumerate(_TABLES):
        _check(found[index], wanted[index], table)
    return found


def _postgres_lookup(
    cursor: Any, wanted: tuple[list[str], list[str]]
) -> tuple[dict[str, int], dict[str, int]]:
    cursor.execute(
        "SELECT 0, gpu_uuid, id FROM gpu_keys WHERE gpu_uuid = ANY(%s) "
        "UNION ALL SELECT 1, worker_id, id FROM worker_keys WHERE worker_id = ANY(%s)",
        [wanted[0], wanted[1]],
    )
    found: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for table, name, key in cursor.fetchall():
        found[table][name] = key
    return found


def _check(found: dict[str, int], names: list[str], table: str) -> None:
    missing = [name for name in names if name not in found]
    if missing:
        raise RuntimeError(
            f"{table} holds no key for {missing[:3]} after inserting them (concurrent delete?)"
        )
