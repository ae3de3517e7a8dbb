"""Streaming JSONL ingest: one ``gpu_sample`` / ``engine_sample`` object per line, all or nothing per file.

A file is read in blocks cut at line ends (never held whole). Each block is validated against
:mod:`fleet.contract` (strict: an unknown field, a ratio outside 0..1, a negative count or a timestamp
without a time zone is an error) and turned into row tuples, in worker processes when the file is large
enough to pay for them, while this process writes the previous block. :mod:`fleet.fast_records` parses a
block first (msgspec, ~2.5x as fast); a block it declines is validated line by line through pydantic, the
authority, which names the bad lines. The whole file is written in one transaction, so a bad line
anywhere stores nothing from that file; the error names the file, the line and the field.

As strict as the HTTP service: a line repeating a key is refused (line and key), and so is a sample key
already stored, or repeated in the file, with other values (:mod:`fleet.store.resend`: the key and each
field that differs; :mod:`fleet.repeats`: a repeat in the file with other GPU or worker attributes at any
window, naming the line); the same values again are duplicates, stored once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from sqlalchemy import Engine

from fleet.ingest_blocks import (
    BLOCK_BYTES,
    MAX_ERRORS,
    LineError,
    LineTooLongError,
    Parsed,
    ParsedBlocks,
    ProgressCallback,
    Reader,
    blocks,
    default_jobs,
    file_source,
    gc_paused,
    parse_block,
)
from fleet.repeats import SuspectKey, attribute_repeat, suspects
from fleet.store.engine import writing
from fleet.store.keys import KnownKeys
from fleet.store.resend import Conflicts
from fleet.store.rows import RowBatch, RowValueError, time_encoding_of
from fleet.store.writer import (
    DuplicateKeyError,
    SkuResolver,
    WriteCounts,
    write_dimensions,
    write_sample_rows,
)

__all__ = [
    "BLOCK_BYTES",
    "ChunkReader",
    "IngestError",
    "IngestResult",
    "LineError",
    "ParsedBlocks",
    "catalog_sku_resolver",
    "default_jobs",
    "file_source",
    "ingest_file",
    "ingest_stream",
    "parse_block",
]


class IngestError(Exception):
    """A file with bad lines; nothing from it was stored."""

    def __init__(self, path: Path, errors: list[LineError], *, more: bool = False) -> None:
        self.path = path
        self.errors = errors
        self.more = more  # parsing stopped at the first bad block: later lines were not checked
        shown = "; ".join(f"{path}:{error}" for error in errors[:3])
        extra = len(errors) - 3
        super().__init__(shown + (f" (and {extra} more)" if extra > 0 else ""))


@dataclass(frozen=True)
class IngestResult:
    path: Path
    records: int
    gpu_samples: int
    engine_samples: int
    stored: int
    duplicates: int
    seconds: float


def catalog_sku_resolver(catalog_path: Path | None = None) -> SkuResolver:
    """``(gpu_name, mig_profile) -> SKU key`` through the GPU catalog (built-in data merged with
    ``catalog_path``; a MIG instance gets its own SKU), cached so an unknown name is warned about once;
    unknown names resolve to the catalog's ``unknown``."""
    from fleet.catalog import load_catalog

    gpus = load_catalog(catalog_path).gpus

    @lru_cache(maxsize=4096)
    def resolve(gpu_name: str, mig_profile: str | None) -> str | None:
        return gpus.resolve(gpu_name, mig_profile).key

    return resolve


def ingest_file(
    engine: Engine,
    path: Path,
    *,
    sku_resolver: SkuResolver | None = None,
    jobs: int | None = None,
    block_bytes: int = BLOCK_BYTES,
    on_progress: ProgressCallback | None = None,
    parsed: ParsedBlocks | None = None,
) -> IngestResult:
    """Store every record of one JSONL file (``.gz`` accepted) in one transaction, or nothing: raises
    :class:`IngestError` naming the bad lines. ``jobs`` = parsing processes (0: parse in this process).

    On PostgreSQL the file is first loaded as new data (COPY straight into the sample tables); if any of
    its keys is already stored, that transaction is rolled back and the file is loaded again the
    idempotent way (staging table, ``ON CONFLICT DO NOTHING``). Worker processes (``jobs`` > 0) need the
    calling program's main module to be importable (the usual ``if __name__ == "__main__"`` guard).
    ``parsed``: this file's blocks, parsing already (see :func:`ingest_stream`)."""
    return ingest_stream(
        engine, file_source(path), path, sku_resolver=sku_resolver, jobs=jobs, block_bytes=block_bytes,
        on_progress=on_progress, parsed=parsed,
    )  # fmt: skip


def ingest_stream(
    engine: Engine,
    open_source: Callable[[], AbstractContextManager[Reader]],
    name: Path,
    *,
    sku_resolver: SkuResolver | None = None,
    jobs: int | None = None,
    block_bytes: int = BLOCK_BYTES,
    on_progress: ProgressCallback | None = None,
    parsed: ParsedBlocks | None = None,
) -> IngestResult:
    """:func:`ingest_file` over any byte stream of JSON lines (``name`` labels it in errors and results).

    ``open_source`` is called once per load, and twice on PostgreSQL when the fast load meets stored keys:
    each call must give the same records from the start (a file reopened, a seeded simulation rerun); it is
    also called once more when a key repeated in the file may differ in its GPU's or worker's attributes.
    ``parsed``, when given, is the first load's blocks of the same source, started early by the caller
    (:meth:`ParsedBlocks.start`) so that parsing overlapped its own start-up; it is closed here."""
    started = time.perf_counter()
    jobs = default_jobs() if jobs is None else jobs
    encoding = time_encoding_of(engine.dialect.name)
    if parsed is not None and parsed.encoding != encoding:
        parsed.close()  # started for another kind of store: parsed again, for this one
        parsed = None
    first = parsed if parsed is not None else ParsedBlocks(open_source, encoding, jobs, block_bytes)
    load = partial(
        _ingest_once, engine, open_source, name, started, sku_resolver=sku_resolver, block_bytes=block_bytes,
        on_progress=on_progress,
    )  # fmt: skip
    if engine.dialect.name == "postgresql":
        try:
            return load(first, assume_new=True)
        except DuplicateKeyError:
            first = ParsedBlocks(open_source, encoding, jobs, block_bytes)  # rolled back: keys are stored
    return load(first, assume_new=False)


class ChunkReader:
    """A ``read(size)`` stream over an iterator of byte chunks (e.g. a simulation writing JSON lines), so
    records can be ingested as they are produced, with no file in between."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buffer = bytearray()

    def read(self, size: int = -1, /) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        cut = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        data = bytes(self._buffer[:cut])
        del self._buffer[:cut]
        return data

    def __enter__(self) -> ChunkReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._buffer.clear()


def _ingest_once(
    engine: Engine,
    open_source: Callable[[], AbstractContextManager[Reader]],
    path: Path,
    started: float,
    parsed_blocks: ParsedBlocks,
    *,
    assume_new: bool,
    sku_resolver: SkuResolver | None,
    block_bytes: int,
    on_progress: ProgressCallback | None,
) -> IngestResult:
    counts = WriteCounts()
    conflicts = Conflicts()
    gpu_samples = engine_samples = 0
    # The collector paused for the whole load, not block by block: the parsed blocks arrive (unpickled by
    # the pool's thread) while it would run, and each re-enabling set off a collection over the block's
    # rows (~5% of a load). The rows hold no cycles and are freed as each block is written; cycles made
    # meanwhile (a few per statement) wait for the collection after the load. Forked parsing processes
    # start paused too (parse_block pauses it anyway).
    with gc_paused(), parsed_blocks.start(), writing(engine) as connection:
        dimensions = RowBatch(parsed_blocks.encoding)
        known_keys = KnownKeys()  # this transaction's
        for parsed in _line_length_checked(parsed_blocks.results(on_progress), path):
            if isinstance(parsed, list):
                raise IngestError(path, parsed, more=True)  # leaving the block rolls the transaction back
            written = write_sample_rows(connection, parsed, assume_new=assume_new, known_keys=known_keys)
            try:
                dimensions.merge(parsed, rows=False, strict=True)
            except RowValueError as exc:  # one key in two blocks of the file with other attributes
                raise IngestError(path, [LineError(None, exc.field, exc.message)]) from exc
            if written.duplicates:  # a key stored before, or repeated in the file: the same values only
                conflicts.samples(connection, parsed)
                _raise_conflicts(path, conflicts)
            counts += written
            gpu_samples += len(parsed.gpu_rows)
            engine_samples += len(parsed.engine_rows)
        if counts.duplicates:
            dimensions.finish()
            conflicts.attributes(connection, dimensions)
            _raise_conflicts(path, conflicts)
            _refuse_attribute_repeats(
                open_source, path, block_bytes, suspects(conflicts.collided, dimensions.changed())
            )
        write_dimensions(connection, dimensions, sku_resolver=sku_resolver)
    return IngestResult(
        path, gpu_samples + engine_samples, gpu_samples, engine_samples, counts.stored, counts.duplicates,
        time.perf_counter() - started,
    )  # fmt: skip


def _refuse_attribute_repeats(
    open_source: Callable[[], AbstractContextManager[Reader]],
    path: Path,
    block_bytes: int,
    wanted: set[SuspectKey],
) -> None:
    """Read the file once more to compare the records of ``wanted`` keys (:mod:`fleet.repeats`; rare)."""
    if not wanted:
        return
    with open_source() as stream:
        found = attribute_repeat(blocks(stream, block_bytes), wanted)
    if found is not None:
        line, error = found
        raise IngestError(path, [LineError(line, error.field, error.message)])


def _raise_conflicts(path: Path, conflicts: Conflicts) -> None:
    """Refuse the file (the transaction rolls back) when a key came with other values than stored."""
    found = conflicts.conflicts()
    if found:
        errors = [LineError(None, conflict.differences[0][0], str(conflict)) for conflict in found]
        raise IngestError(path, errors[:MAX_ERRORS], more=True)


def _line_length_checked(parsed: Iterator[Parsed], path: Path) -> Iterator[Parsed]:
    try:
        yield from parsed
    except LineTooLongError as exc:
        message = f"line longer than {exc.limit // 2**20} MiB without a line end"
        raise IngestError(path, [LineError(exc.line, None, message)], more=True) from None
