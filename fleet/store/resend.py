"""Re-sent samples in a bulk load: a sample key already stored (or written earlier in the same transaction)
must come back with the same values, and so must its GPU's or worker's attributes when that sample is the one
the ``gpus`` / ``workers`` row was last written from; otherwise the load is refused naming the key and every
field that differs. The HTTP service applies the same rule (:mod:`phasefit.service.claims`).

Only batches whose write met a duplicate key are compared (rare), so a load of new data pays nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from fleet.store.columns import from_epoch_us
from fleet.store.lean import stored_equal
from fleet.store.rows import ENGINE_SAMPLE_COLUMNS, GPU_SAMPLE_COLUMNS, RowBatch
from fleet.store.schema import Base

SampleKey = tuple[str, datetime]
Difference = tuple[str, Any, Any]  # (field, stored, sent)
_CHUNK = 500


@dataclass(frozen=True)
class SampleKind:
    kind: str
    samples: str
    dimensions: str
    key: str
    columns: tuple[str, ...]
    attributes: tuple[str, ...]


GPU_KIND = SampleKind("gpu_sample", "gpu_samples", "gpus", "gpu_uuid", GPU_SAMPLE_COLUMNS,
             ("node", "gpu_index", "gpu_name", "parent_gpu_uuid", "mig_profile", "cluster", "worker_id",
              "state", "source"))  # fmt: skip
ENGINE_KIND = SampleKind("engine_sample", "engine_samples", "workers", "worker_id", ENGINE_SAMPLE_COLUMNS,
                ("node", "engine", "model", "role", "role_source", "precision", "tp", "gpu_uuids", "gpu_join",
                 "cluster", "deployment"))  # fmt: skip


@dataclass(frozen=True)
class Conflict:
    """A sample key sent with other values than the ones stored (or sent before it in the same load)."""

    kind: str
    key_field: str
    key: str
    ts: datetime
    differences: tuple[Difference, ...]

    def __str__(self) -> str:
        shown = "; ".join(f"{name}: stored {old!r}, sent {new!r}" for name, old, new in self.differences[:6])
        more = f"; and {len(self.differences) - 6} more" if len(self.differences) > 6 else ""
        stamp = self.ts.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return (
            f"{self.kind} ({self.key_field} {self.key!r}, ts {stamp}) is already stored with other values "
            f"({shown}{more}); a stored sample is never rewritten: send the same values or a new ts"
        )


def instant(value: Any) -> datetime:
    """A sample row's ``ts`` (epoch microseconds for SQLite rows, a datetime for PostgreSQL) as UTC."""
    return from_epoch_us(value) if isinstance(value, int) else value.astimezone(UTC)


class Conflicts:
    """The conflicts found over a load, block by block (:meth:`samples`), then for the load's GPUs and
    workers once (:meth:`attributes`, with the load's merged dimensions)."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, SampleKey], list[Difference]] = {}
        self.collided: dict[str, set[SampleKey]] = {GPU_KIND.kind: set(), ENGINE_KIND.kind: set()}

    def samples(self, connection: Connection, batch: RowBatch) -> None:
        """Compare each row of ``batch`` with the stored row of its key (earlier loads, or this transaction's
        earlier writes, which include the batch's own first row of a key it repeats)."""
        dialect = connection.dialect.name
        for kind, rows in ((GPU_KIND, batch.gpu_rows), (ENGINE_KIND, batch.engine_rows)):
            if not rows:
                continue
            keyed = [((row[0], instant(row[1])), row) for row in rows]
            stored = stored_samples(connection, kind, {key for key, _ in keyed})
            self.collided[kind.kind].update(stored)
            for key, row in keyed:
                stored_row = stored.get(key)
                if stored_row is None:
                    continue
                differences = [
                    (name, old, new)
                    for name, old, new in zip(kind.columns[2:], stored_row[2:], row[2:], strict=True)
                    if not stored_equal(dialect, name, old, new)
                ]
                if differences:
                    self._add(kind, key, differences)

    def attributes(self, connection: Connection, dimensions: RowBatch) -> None:
        """Compare the GPUs and workers last written from a collided key with the load's attributes."""
        for kind, dims in ((GPU_KIND, dimensions.gpus), (ENGINE_KIND, dimensions.workers)):
            for key, differences in attribute_differences(connection, kind, dims, self.collided[kind.kind]):
                self._add(kind, key, differences)

    def _add(self, kind: SampleKind, key: SampleKey, differences: list[Difference]) -> None:
        found = self.found.setdefault((kind.kind, key), [])
        named = {name for name, _, _ in found}
        found.extend(d for d in differences if d[0] not in named)

    def conflicts(self) -> list[Conflict]:
        key_fields = {GPU_KIND.kind: GPU_KIND.key, ENGINE_KIND.kind: ENGINE_KIND.key}
        return [
            Conflict(kind, key_fields[kind], id_, ts, tuple(differences))
            for (kind, (id_, ts)), differences in self.found.items()
            if differences
        ]


def stored_samples(
    connection: Connection, kind: SampleKind, keys: Collection[SampleKey]
) -> dict[SampleKey, tuple[Any, ...]]:
    """The stored rows among ``keys``: one range query per 500 ids over their span."""
    if not keys:
        return {}
    table = Base.metadata.tables[kind.samples]
    key_column, ts = table.c[kind.key], table.c.ts
    ids = sorted({key[0] for key in keys})
    earliest, latest = min(key[1] for key in keys), max(key[1] for key in keys)
    columns = [table.c[name] for name in kind.columns]
    found: dict[SampleKey, tuple[Any, ...]] = {}
    for start in range(0, len(ids), _CHUNK):
        statement = select(*columns).where(
            key_column.in_(ids[start : start + _CHUNK]), ts >= earliest, ts <= latest
        )
        for row in connection.execute(statement):
            key = (row[0], instant(row[1]))
            if key in keys:
                found[key] = tuple(row)
    return found


def attribute_differences(
    connection: Connection, kind: SampleKind, dimensions: dict[str, Any], stored: Collection[SampleKey]
) -> list[tuple[SampleKey, list[Difference]]]:
    """GPUs / workers whose stored row was last written from a colliding key and would be rewritten from
    this batch with other attributes (the upsert's "latest window wins" takes the re-send on a tie)."""
    candidates = {id_: dim for id_, dim in dimensions.items() if (id_, instant(dim.last_seen)) in stored}
    if not candidates:
        return []
    table = Base.metadata.tables[kind.dimensions]
    key_column = table.c[kind.key]
    columns = [table.c[name] for name in kind.attributes]
    ids = sorted(candidates)
    dialect = connection.dialect.name
    found: list[tuple[SampleKey, list[Difference]]] = []
    for start in range(0, len(ids), _CHUNK):
        statement = select(key_column, table.c.last_seen, *columns).where(
            key_column.in_(ids[start : start + _CHUNK])
        )
        for id_, last_seen, *stored_values in connection.execute(statement):
            dim = candidates[id_]
            values = [tuple(v) if isinstance(v, list) else v for v in stored_values]
            if instant(last_seen) != instant(dim.last_seen):
                continue
            differences = [
                (name, old, getattr(dim, name))
                for name, old in zip(kind.attributes, values, strict=True)
                if not stored_equal(dialect, name, old, getattr(dim, name))
            ]
            if differences:
                found.append(((id_, instant(dim.last_seen)), differences))
    return found
