"""Storing one validated batch: whole or nothing, idempotent, inside the token's node binding and its
cardinality budget.

Each process remembers what it last wrote to ``gpus``, ``workers`` and ``nodes`` (:class:`SeriesCache`).
A batch upserts only the rows whose attributes changed, that this process has not written yet, or whose
``last_seen`` it advanced by ``refresh_s`` or more since; the samples are always written. That keeps a
steady fleet's write to two statements per batch, and ``last_seen`` in those tables accurate to
``refresh_s``. The ids this process has not seen cost one lookup: those the store does not hold either are
what the batch would create, and they are reserved against the token's hourly budget before any write.
Several processes (``phasefit serve --workers``, replicas) each keep their own cache: one that did not write
a row writes it again (an idempotent upsert), and one that wrote attributes another has since changed
rewrites them only when its batch differs from its own last write or ``refresh_s`` has passed.

In the same transaction, before anything is written (:mod:`phasefit.service.claims`): a node-bound token's
batch is refused (403) when it names a GPU or worker the store holds on a node outside the token's patterns
(one lookup per table per group), and a batch that met a stored sample key is refused (409) unless every
such key comes back with the same values (compared only on that rare path).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.orm import InstrumentedAttribute

from fleet.inventory import GpuRecord, WorkerRecord
from fleet.store.engine import writing
from fleet.store.rows import RowBatch
from fleet.store.schema import GpuRow, WorkerRow
from fleet.store.writer import (
    DuplicateKeyError,
    SkuResolver,
    WriteCounts,
    write_dimensions,
    write_sample_rows,
)
from phasefit.service.batches import BatchRejectedError
from phasefit.service.claims import (
    AnyRecord,
    References,
    check_known_nodes,
    check_repeats,
    distinct_keys,
    known_nodes,
    resend_conflicts,
)
from phasefit.service.guards import CardinalityExceededError, CardinalityGuard, OverloadedError, Reservation
from phasefit.service.tokens import Token

_LOOKUP_CHUNK = 500
_RESEND_ATTEMPTS = 3
log = logging.getLogger(__name__)


class ConcurrentWriteError(OverloadedError):
    """Another transaction stored some of this batch's keys between the comparison and the insert, every
    time it was tried; the client retries after ``retry_after_s`` (its values are then compared)."""


class _KeysTakenMeanwhileError(Exception):
    """Internal: a key compared as new was stored by another transaction before this one inserted it."""


@dataclass(frozen=True)
class _Written:
    attributes: tuple[Any, ...]
    first_seen: datetime
    last_seen: datetime


def _attributes(dimension: Any) -> tuple[Any, ...]:
    values = vars(dimension)
    return tuple(
        tuple(value) if isinstance(value, list) else value
        for name, value in values.items()
        if name not in ("first_seen", "last_seen")
    )


def _span(record: GpuRecord | WorkerRecord) -> tuple[datetime, datetime]:
    """A batch's record always carries the span of the windows that named it."""
    assert record.first_seen is not None and record.last_seen is not None
    return record.first_seen, record.last_seen


class SeriesCache:
    """The GPU, worker and node rows this process wrote (bounded: forgotten past ``cap`` entries)."""

    def __init__(self, refresh_s: float = 60.0, cap: int = 1_000_000) -> None:
        self.refresh = timedelta(seconds=refresh_s)
        self.cap = cap
        self._gpus: dict[str, _Written] = {}
        self._workers: dict[str, _Written] = {}
        self._nodes: dict[str, _Written] = {}
        self._lock = threading.Lock()

    def unseen(self, batch: RowBatch) -> tuple[list[str], list[str]]:
        """GPU UUIDs and worker ids of ``batch`` (finished) that this process has never written."""
        with self._lock:
            return (
                [uuid for uuid in batch.gpus if uuid not in self._gpus],
                [worker for worker in batch.workers if worker not in self._workers],
            )

    def stale(self, batch: RowBatch) -> RowBatch:
        """A batch holding only the dimension rows of ``batch`` that need writing (no sample rows)."""
        out = RowBatch(batch.time_encoding)
        with self._lock:
            out.gpus = {k: d for k, d in batch.gpus.items() if self._due(self._gpus.get(k), d)}
            out.workers = {k: d for k, d in batch.workers.items() if self._due(self._workers.get(k), d)}
            out.nodes = {
                k: span for k, span in batch.nodes.items() if self._due_span(self._nodes.get(k), span)
            }
        return out

    def written(self, dimensions: RowBatch) -> None:
        with self._lock:
            if len(self._gpus) + len(self._workers) + len(self._nodes) > self.cap:
                self._gpus.clear()
                self._workers.clear()
                self._nodes.clear()
            for key, gpu in dimensions.gpus.items():
                self._gpus[key] = _merge(self._gpus.get(key), _attributes(gpu), *_span(gpu))
            for key, worker in dimensions.workers.items():
                self._workers[key] = _merge(self._workers.get(key), _attributes(worker), *_span(worker))
            for key, (first, last) in dimensions.nodes.items():
                self._nodes[key] = _merge(self._nodes.get(key), (), first, last)

    def _due(self, known: _Written | None, dimension: Any) -> bool:
        if known is None or known.attributes != _attributes(dimension):
            return True
        return self._due_span(known, (dimension.first_seen, dimension.last_seen))

    def _due_span(self, known: _Written | None, span: tuple[datetime, datetime]) -> bool:
        return known is None or span[0] < known.first_seen or span[1] - known.last_seen >= self.refresh


def _merge(known: _Written | None, attributes: tuple[Any, ...], first: datetime, last: datetime) -> _Written:
    if known is None:
        return _Written(attributes, first, last)
    return _Written(attributes, min(first, known.first_seen), max(last, known.last_seen))


def _existing(connection: Connection, column: InstrumentedAttribute[str], ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), _LOOKUP_CHUNK):
        chunk = ids[start : start + _LOOKUP_CHUNK]
        found.update(connection.execute(select(column).where(column.in_(chunk))).scalars())
    return found


@dataclass
class _Pending:
    batch: RowBatch
    token: Token
    done: Callable[[WriteCounts | BaseException], None]
    queued_at: float
    records: Sequence[AnyRecord] = ()  # to name a refused record's index
    references: References | None = None  # the GPUs and workers a node-bound token's batch names
    outcome: WriteCounts | BaseException = field(default_factory=WriteCounts)


class BatchWriter:
    """Writer threads that commit several queued ingest batches per transaction (group commit).

    Each request still gets its own outcome: its records' stored/duplicate counts, a 403 for a GPU or worker
    its node-bound token may not write, a 409 for a re-sent key with other values, a 429 for its token's
    cardinality budget, or the store's error; one commit (one fsync) serves every batch of the group. A
    group that fails for any reason but an unavailable store is retried batch by batch, so one batch can
    never fail another. The queue is bounded (:meth:`submit` raises :class:`OverloadedError` when it is
    full) and a batch that waited longer than ``max_wait_s`` is refused with 429 rather than written late.
    ``on_queued`` and ``on_writing`` are told each change (+n, -n) of the queue and of the transactions in
    progress (the service's gauges).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        threads: int,
        max_queued: int,
        max_wait_s: float,
        retry_after_s: int,
        cache: SeriesCache,
        guard: CardinalityGuard,
        sku_resolver: SkuResolver | None,
        unavailable: Callable[[BaseException], bool],
        monotonic: Callable[[], float],
        observe: Callable[[float], None] | None = None,
        on_queued: Callable[[float], None] | None = None,
        on_writing: Callable[[float], None] | None = None,
        max_group_rows: int = 20_000,
    ) -> None:
        self.engine = engine
        self.threads = threads
        self.max_wait_s = max_wait_s
        self.retry_after_s = retry_after_s
        self.cache, self.guard, self.sku_resolver = cache, guard, sku_resolver
        self.unavailable = unavailable
        self.monotonic = monotonic
        self.observe = observe
        self.on_queued = on_queued or _ignore
        self.on_writing = on_writing or _ignore
        self.max_group_rows = max_group_rows
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=max_queued)
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.writing = 0

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(
        self,
        batch: RowBatch,
        token: Token,
        done: Callable[[WriteCounts | BaseException], None],
        *,
        records: Sequence[AnyRecord] = (),
        references: References | None = None,
    ) -> None:
        """Queue ``batch`` (of ``records``); ``done`` is called from a writer thread with its counts or its
        error. A node-bound ``token`` needs the batch's ``references``."""
        if token.nodes and references is None:
            raise ValueError(f"token {token.name!r} is bound to nodes: pass the batch's references")
        self._start()
        try:
            self._queue.put_nowait(
                _Pending(batch, token, done, self.monotonic(), records=records, references=references)
            )
        except queue.Full:
            raise OverloadedError(
                f"{self._queue.maxsize} batches already wait for the store", self.retry_after_s
            ) from None
        self.on_queued(1)

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for _ in workers:
            self._queue.put(None)
        for worker in workers:
            worker.join(timeout=30)

    def _start(self) -> None:
        if len(self._workers) == self.threads:
            return
        with self._lock:
            while len(self._workers) < self.threads:
                worker = threading.Thread(
                    target=self._run, name=f"phasefit-writer-{len(self._workers)}", daemon=True
                )
                worker.start()
                self._workers.append(worker)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group, rows = [first], len(first.batch)
            while rows < self.max_group_rows:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # let another thread see the stop too, after this group
                    break
                group.append(item)
                rows += len(item.batch)
            self.on_queued(-len(group))
            live = [item for item in group if not self._expired(item)]
            if live:
                self._write_group(live)

    def _expired(self, item: _Pending) -> bool:
        waited = self.monotonic() - item.queued_at
        if waited <= self.max_wait_s:
            return False
        _settle(item, OverloadedError(f"waited {waited:.1f} s for the store", self.retry_after_s))
        return True

    def _write_group(self, group: list[_Pending]) -> None:
        started = time.perf_counter()
        self.writing += 1
        self.on_writing(1)
        try:
            outcomes = self._transaction(group)
        except BaseException as exc:
            if len(group) == 1 or (self.unavailable(exc) and not _is_conflict(exc)):
                outcomes = [exc] * len(group)
            else:
                outcomes = [self._one(item) for item in group]  # isolate whatever failed the group
        finally:
            self.writing -= 1
            self.on_writing(-1)
        if self.observe is not None:
            self.observe(time.perf_counter() - started)
        for item, outcome in zip(group, outcomes, strict=True):
            _settle(item, outcome)

    def _one(self, item: _Pending) -> WriteCounts | BaseException:
        try:
            return self._transaction([item])[0]
        except BaseException as exc:
            return exc

    def _transaction(self, group: list[_Pending]) -> list[WriteCounts | BaseException]:
        """Write ``group`` in one transaction: first as new rows (one COPY per table for the whole group);
        if any row was already stored (a collector re-sent it), the transaction is rolled back and written
        again batch by batch, comparing each batch's stored keys with what it sends (409 on a difference)
        and counting its duplicates. Re-sends are rare, so the common case is one transaction of a few
        statements, without a savepoint."""
        try:
            return self._attempt(group, assume_new=True)
        except DuplicateKeyError:
            pass
        for _ in range(_RESEND_ATTEMPTS):
            try:
                return self._attempt(group, assume_new=False)
            except _KeysTakenMeanwhileError:
                continue  # another writer stored some of the keys meanwhile: compare them this time
        refused = ConcurrentWriteError(
            f"other writers kept storing keys of this batch meanwhile ({_RESEND_ATTEMPTS} attempts)",
            self.retry_after_s,
        )
        return [refused] * len(group)

    def _attempt(self, group: list[_Pending], *, assume_new: bool) -> list[WriteCounts | BaseException]:
        reservations: list[Reservation | None] = []
        written: list[RowBatch] = []
        for item in group:
            item.outcome = WriteCounts()
        try:
            with writing(self.engine) as connection:
                if assume_new:
                    self._write_group_new(connection, group, reservations, written)
                else:
                    self._write_group_each(connection, group, reservations, written)
        except BaseException:
            for reservation in reservations:
                self.guard.release(reservation)
            raise
        for dimensions in written:
            self.cache.written(dimensions)
        return [item.outcome for item in group]

    def _write_group_new(
        self,
        connection: Connection,
        group: list[_Pending],
        reservations: list[Reservation | None],
        written: list[RowBatch],
    ) -> None:
        """Every batch's samples as new rows, in one statement per table (raises DuplicateKeyError)."""
        bound = [item for item in group if item.token.nodes]
        known = None
        if bound:
            wanted = References()
            for item in bound:
                assert item.references is not None
                wanted.merge(item.references)
            known = known_nodes(connection, wanted.gpus, wanted.workers)
        accepted: list[_Pending] = []
        claimed: set[str] = set()
        for item in group:
            try:
                if item.token.nodes:
                    assert item.references is not None and known is not None
                    check_known_nodes(item.token, item.references, known)
                reservations.append(self._reserve(connection, item, claimed))
                accepted.append(item)
            except (BatchRejectedError, CardinalityExceededError) as exc:
                item.outcome = exc
        dimensions = _stale_dimensions(self.cache, [item.batch for item in accepted])
        if dimensions is not None:
            write_dimensions(connection, dimensions, sku_resolver=self.sku_resolver)
            written.append(dimensions)
        for item, counts in zip(
            accepted, _write_new(connection, [item.batch for item in accepted]), strict=True
        ):
            item.outcome = counts

    def _write_group_each(
        self,
        connection: Connection,
        group: list[_Pending],
        reservations: list[Reservation | None],
        written: list[RowBatch],
    ) -> None:
        """Batch by batch, each seeing the ones before it: its node binding, its repeated and already stored
        keys compared (403/409, nothing of it written), its budget, then its rows written idempotently."""
        claimed: set[str] = set()
        for item in group:
            try:
                if item.token.nodes:
                    assert item.references is not None
                    refs = item.references
                    check_known_nodes(item.token, refs, known_nodes(connection, refs.gpus, refs.workers))
                check_repeats(item.records)
                collisions = resend_conflicts(connection, item.batch, item.records)
                reservations.append(self._reserve(connection, item, claimed))
            except (BatchRejectedError, CardinalityExceededError) as exc:
                item.outcome = exc
                continue
            dimensions = self.cache.stale(item.batch)
            if dimensions.gpus or dimensions.workers or dimensions.nodes:
                write_dimensions(connection, dimensions, sku_resolver=self.sku_resolver)
                written.append(dimensions)
            counts = write_sample_rows(connection, item.batch)
            if counts.stored != distinct_keys(item.batch) - collisions:
                raise _KeysTakenMeanwhileError()
            item.outcome = counts

    def _reserve(self, connection: Connection, item: _Pending, claimed: set[str]) -> Reservation | None:
        new_gpus, new_workers = self.cache.unseen(item.batch)
        new_gpus = [uuid for uuid in new_gpus if "gpu:" + uuid not in claimed]
        new_workers = [worker for worker in new_workers if "worker:" + worker not in claimed]
        if not new_gpus and not new_workers:
            return None
        reservation = self.guard.reserve(item.token.name, _created(connection, new_gpus, new_workers))
        claimed.update("gpu:" + uuid for uuid in new_gpus)
        claimed.update("worker:" + worker for worker in new_workers)
        return reservation


def _ignore(_: float) -> None:
    return None


def _settle(item: _Pending, outcome: WriteCounts | BaseException) -> None:
    try:
        item.done(outcome)
    except Exception:  # a caller that went away (its event loop closed) must not stop the writer thread
        log.exception("could not deliver an ingest batch's outcome")


def _write_new(connection: Connection, batches: list[RowBatch]) -> list[WriteCounts]:
    """The sample rows of ``batches`` written together as new rows (PostgreSQL: binary COPY straight into the
    sample tables); raises :class:`DuplicateKeyError` if any was already stored."""
    if not batches:
        return []
    merged = batches[0]
    if len(batches) > 1:
        merged = RowBatch(batches[0].time_encoding)
        for batch in batches:
            merged.gpu_rows.extend(batch.gpu_rows)
            merged.engine_rows.extend(batch.engine_rows)
    written = write_sample_rows(connection, merged, assume_new=True)
    if written.stored != len(merged):  # SQLite ignores assume_new and skips duplicates itself
        raise DuplicateKeyError(f"{len(merged) - written.stored} rows of the group were already stored")
    return [WriteCounts(stored=len(batch)) for batch in batches]


def _stale_dimensions(cache: SeriesCache, batches: list[RowBatch]) -> RowBatch | None:
    merged: RowBatch | None = None
    for batch in batches:
        stale = cache.stale(batch)
        if merged is None:
            merged = stale
        else:
            merged.merge(stale, rows=False)
    return merged


def _is_conflict(exc: BaseException) -> bool:
    """A deadlock or serialization failure between writers: retried batch by batch, not answered 503."""
    return getattr(getattr(exc, "orig", exc), "sqlstate", None) in ("40P01", "40001")


def _created(connection: Connection, gpus: list[str], workers: list[str]) -> int:
    return (len(gpus) - len(_existing(connection, GpuRow.gpu_uuid, gpus))) + (
        len(workers) - len(_existing(connection, WorkerRow.worker_id, workers))
    )
