"""What an ingest batch says about series the store already holds, checked in the write transaction.

- **Node binding.** A token bound to node patterns writes only GPUs and workers on those nodes: every GPU
  UUID (``gpu_uuid``, ``parent_gpu_uuid``, an engine sample's ``gpu_uuids``) and worker id (either kind's
  ``worker_id``) of its batch that ``gpus`` / ``workers`` already hold on a node outside its patterns is
  refused (403) with the record and field that names it. A real move between nodes goes through a token
  that is not bound to nodes (docs/security.md). A GPU or worker new to the store is checked only by the
  record's own ``node`` (:func:`phasefit.service.batches.check_nodes`).
- **Re-sent samples.** A sample key (``(gpu_uuid, ts)``, ``(worker_id, ts)``) already stored must come back
  with the same values, and so must the GPU's or worker's attributes when that sample is the one the
  ``gpus`` / ``workers`` row was last written from (equal ``last_seen``); otherwise the batch is refused
  (409) naming the key and the fields that differ, and nothing of it is stored. A key repeated inside one
  batch with different values is refused the same way. Only keys that collide are compared: the writer
  runs :func:`resend_conflicts` only after a batch met a stored key, which is rare.

Queries use SQLAlchemy Core on the tables of :mod:`fleet.store.schema`; timestamps come back as aware UTC
``datetime`` on both dialects (``UtcDateTime``), and batch rows are brought to the same form to compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Connection, Table, select

from fleet.contract import EngineSample, GpuSample
from fleet.store.lean import stored_equal
from fleet.store.resend import (
    ENGINE_KIND,
    GPU_KIND,
    Difference,
    SampleKey,
    SampleKind,
    attribute_differences,
    instant,
    stored_samples,
)
from fleet.store.rows import RowBatch
from fleet.store.schema import Base
from phasefit.service.batches import MAX_REPORTED_ERRORS, BatchRejectedError, RecordError
from phasefit.service.tokens import Token

AnyRecord = GpuSample | EngineSample

_CHUNK = 500


def _table(name: str) -> Table:
    return Base.metadata.tables[name]


# --- node binding --------------------------------------------------------------------------------------


@dataclass
class References:
    """The GPU UUIDs and worker ids a batch names, each with the first (record index, field) naming it."""

    gpus: dict[str, tuple[int, str]] = field(default_factory=dict)
    workers: dict[str, tuple[int, str]] = field(default_factory=dict)

    def merge(self, other: References) -> None:
        for uuid, where in other.gpus.items():
            self.gpus.setdefault(uuid, where)
        for worker, where in other.workers.items():
            self.workers.setdefault(worker, where)


def references(records: Sequence[AnyRecord]) -> References:
    """Every GPU UUID and worker id of ``records`` (computed for node-bound tokens only)."""
    found = References()
    gpus, workers = found.gpus, found.workers
    for index, record in enumerate(records):
        if isinstance(record, GpuSample):
            gpus.setdefault(record.gpu_uuid, (index, "gpu_uuid"))
            if record.parent_gpu_uuid is not None:
                gpus.setdefault(record.parent_gpu_uuid, (index, "parent_gpu_uuid"))
            if record.worker_id is not None:
                workers.setdefault(record.worker_id, (index, "worker_id"))
        else:
            workers.setdefault(record.worker_id, (index, "worker_id"))
            for position, uuid in enumerate(record.gpu_uuids):
                gpus.setdefault(uuid, (index, f"gpu_uuids.{position}"))
    return found


@dataclass(frozen=True)
class KnownNodes:
    """The node the store holds each of some GPUs and workers on (absent: new to the store)."""

    gpus: dict[str, str]
    workers: dict[str, str]


def known_nodes(connection: Connection, gpu_uuids: Iterable[str], worker_ids: Iterable[str]) -> KnownNodes:
    """One query per table (per 500 ids): where ``gpus`` / ``workers`` say these ids are."""
    return KnownNodes(
        _nodes(connection, _table("gpus"), "gpu_uuid", sorted(set(gpu_uuids))),
        _nodes(connection, _table("workers"), "worker_id", sorted(set(worker_ids))),
    )


def _nodes(connection: Connection, table: Table, key: str, ids: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    column = table.c[key]
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        for id_, node in connection.execute(select(column, table.c.node).where(column.in_(chunk))):
            found[id_] = node
    return found


def check_known_nodes(token: Token, refs: References, known: KnownNodes) -> None:
    """Refuse (403) a batch naming a GPU or worker the store holds on a node ``token`` may not write."""
    errors: list[RecordError] = []
    for kind, named, where_known in (("GPU", refs.gpus, known.gpus), ("worker", refs.workers, known.workers)):
        for id_, (index, field_name) in named.items():
            node = where_known.get(id_)
            if node is None or token.allows_node(node):
                continue
            message = (
                f"{kind} {id_!r} is known on node {node!r}, which token {token.name!r} may not write (it "
                f"writes for {', '.join(token.nodes)}); a {kind} moves between nodes through a token whose "
                "patterns cover both nodes, or one not bound to nodes (docs/security.md)"
            )
            errors.append(RecordError(index, field_name, message))
    if errors:
        errors.sort(key=lambda error: (error.index or 0, error.field or ""))
        raise BatchRejectedError(403, "foreign_series", errors[:MAX_REPORTED_ERRORS])


# --- re-sent samples ----------------------------------------------------------------------------------


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def distinct_keys(batch: RowBatch) -> int:
    """Sample keys in ``batch``, a key repeated inside it counted once."""
    return len({(row[0], row[1]) for row in batch.gpu_rows}) + len(
        {(row[0], row[1]) for row in batch.engine_rows}
    )


def resend_conflicts(connection: Connection, batch: RowBatch, records: Sequence[AnyRecord]) -> int:
    """How many of ``batch``'s sample keys the store already holds, all with the same values; else raise
    :class:`BatchRejectedError` (409) naming each key sent with different values."""
    conflicts: dict[tuple[SampleKind, SampleKey], list[Difference]] = {}
    collisions = 0
    for kind, rows, dimensions in (
        (GPU_KIND, batch.gpu_rows, batch.gpus),
        (ENGINE_KIND, batch.engine_rows, batch.workers),
    ):
        sent = {(row[0], instant(row[1])): row for row in rows}
        stored = stored_samples(connection, kind, sent)
        collisions += len(stored)
        for key, stored_row in stored.items():
            columns = zip(kind.columns[2:], stored_row[2:], sent[key][2:], strict=True)
            dialect = connection.dialect.name
            differences = [
                (name, old, new) for name, old, new in columns if not stored_equal(dialect, name, old, new)
            ]
            if differences:
                conflicts.setdefault((kind, key), []).extend(differences)
        for key, differences in attribute_differences(connection, kind, dimensions, stored):
            found = conflicts.setdefault((kind, key), [])
            named = {name for name, _, _ in found}  # worker_id, state, role... are in both places
            found.extend(difference for difference in differences if difference[0] not in named)
    if conflicts:
        raise BatchRejectedError(409, "conflict", _conflict_errors(conflicts, records))
    return collisions


def _conflict_errors(
    conflicts: dict[tuple[SampleKind, SampleKey], list[Difference]], records: Sequence[AnyRecord]
) -> list[RecordError]:
    index_of = _record_indexes(records, {(kind.kind, key) for kind, key in conflicts})
    errors = []
    for (kind, (id_, ts)), differences in conflicts.items():
        shown = "; ".join(f"{name}: stored {old!r}, sent {new!r}" for name, old, new in differences[:6])
        more = f"; and {len(differences) - 6} more" if len(differences) > 6 else ""
        message = (
            f"{kind.kind} ({kind.key} {id_!r}, ts {_stamp(ts)}) is already stored with other values "
            f"({shown}{more}); a stored sample is never rewritten: re-send the same values (idempotent) "
            "or send a new ts"
        )
        errors.append(RecordError(index_of.get((kind.kind, (id_, ts))), differences[0][0], message))
    errors.sort(key=lambda error: (-1 if error.index is None else error.index, error.field or ""))
    return errors[:MAX_REPORTED_ERRORS]


def _record_indexes(
    records: Sequence[AnyRecord], wanted: set[tuple[str, SampleKey]]
) -> dict[tuple[str, SampleKey], int]:
    found: dict[tuple[str, SampleKey], int] = {}
    for index, record in enumerate(records):
        key = _record_key(record)
        if key in wanted and key not in found:
            found[key] = index
    return found


def _record_key(record: AnyRecord) -> tuple[str, SampleKey]:
    if isinstance(record, GpuSample):
        return ("gpu_sample", (record.gpu_uuid, record.ts.astimezone(UTC)))
    return ("engine_sample", (record.worker_id, record.ts.astimezone(UTC)))


def check_repeats(records: Sequence[AnyRecord]) -> None:
    """Refuse (409) a batch that repeats a sample key with different values (an identical repeat is a
    duplicate, stored once). Called only for batches that met a duplicate key."""
    first: dict[tuple[str, SampleKey], int] = {}
    errors: list[RecordError] = []
    for index, record in enumerate(records):
        key = _record_key(record)
        seen = first.setdefault(key, index)
        if seen == index:
            continue
        earlier = records[seen]
        if earlier.__dict__ == record.__dict__:
            continue
        differing = [name for name, value in record.__dict__.items() if earlier.__dict__.get(name) != value]
        kind, (id_, ts) = key
        key_field = "gpu_uuid" if kind == "gpu_sample" else "worker_id"
        errors.append(RecordError(index, differing[0] if differing else None, (
            f"{kind} ({key_field} {id_!r}, ts {_stamp(ts)}) repeats record {seen} with other values "
            f"({', '.join(differing)}); one key, one set of values"
        )))  # fmt: skip
        if len(errors) >= MAX_REPORTED_ERRORS:
            break
    if errors:
        raise BatchRejectedError(409, "conflict", errors)
