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

import gc
import gzip
import json
import multiprocessing
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy import Engine

from fleet.contract import RECORD_ADAPTER, RECORD_KINDS, error_message
from fleet.fast_records import fast_block
from fleet.repeats import SuspectKey, attribute_repeat, suspects
from fleet.store.engine import writing
from fleet.store.keys import KnownKeys
from fleet.store.resend import Conflicts
from fleet.store.rows import RowBatch, RowValueError, TimeEncoding
from fleet.store.writer import (
    DuplicateKeyError,
    SkuResolver,
    WriteCounts,
    time_encoding_for,
    write_dimensions,
    write_sample_rows,
)

MAX_LINE_BYTES = 8 * 1024 * 1024  # an engine_sample naming 1,024 GPUs is ~270 kB; a runaway line is an error
BLOCK_BYTES = 4 * 1024 * 1024  # ~7,500 gpu_sample lines: big enough to amortise a round trip, small in memory
MAX_ERRORS = 20
ProgressCallback = Callable[[int], None]  # bytes read so far


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class LineError:
    line: int | None  # None for a sample key sent with other values than stored (the key is named instead)
    field: str | None  # None when the line is not a JSON object at all
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.field}: {self.message}" if self.field else f"{where}{self.message}"


class _LineTooLongError(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


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


def parse_block(block: bytes, first_line: int, time_encoding: TimeEncoding) -> RowBatch | list[LineError]:
    """Validate the lines of ``block`` (``first_line`` is the number of its first line) into a RowBatch, or
    return the errors found (at most ``MAX_ERRORS``). Runs in worker processes: module-level and pure.

    :mod:`fleet.fast_records` first; pydantic when it declines (a bad line: pydantic names it)."""
    with gc_paused():
        fast = fast_block(block, first_line, time_encoding)
        return fast if fast is not None else _validated_block(block, first_line, time_encoding)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused (as it was after): a block's many new objects, none in a cycle,
    would set it off over and over (the fast parser took 1.4-1.8x as long with it running, the lean
    transform of the rows for the store twice as long). Cycles made meanwhile wait for the next collection."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _validated_block(
    block: bytes, first_line: int, time_encoding: TimeEncoding
) -> RowBatch | list[LineError]:
    """:func:`parse_block` through pydantic, line by line: the authority, and the errors' source."""
    batch = RowBatch(time_encoding, strict_repeats=True)
    errors: list[LineError] = []
    for offset, raw in enumerate(block.split(b"\n")):
        line = raw.strip()
        if not line:
            continue
        if first_line == 1 and offset == 0 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]  # a UTF-8 byte order mark some editors write
        try:
            record = RECORD_ADAPTER.validate_json(line)
            repeated = _repeated_key(line, len(record.model_fields_set))
            if repeated is not None:
                errors.append(LineError(first_line + offset, repeated, _REPEATED))
            else:
                batch.add(record, first_line + offset)
        except ValidationError as exc:
            errors.extend(_line_errors(first_line + offset, exc))
        except RowValueError as exc:
            errors.append(LineError(first_line + offset, exc.field, exc.message))
        if len(errors) >= MAX_ERRORS:
            break
    if not errors:
        try:
            return batch.finish()
        except RowValueError as exc:
            errors.append(LineError(exc.tag if exc.tag is not None else first_line, exc.field, exc.message))
    return errors[:MAX_ERRORS]


_REPEATED = "the key appears more than once in the object: send each field once"
_LOOSE = re.compile(rb'"[ \t\r\n]')  # a string followed by whitespace: maybe a key before a spaced colon


class _RepeatedKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKeyError(key)
        seen[key] = value
    return seen


def _repeated_key(line: bytes, distinct: int) -> str | None:
    """The first key that the object of ``line`` (a valid record of ``distinct`` distinct keys) repeats, or
    None. Without a backslash and a string followed by whitespace, every ``":`` ends a key: as many as the
    distinct keys proves no repeat; else Python's parser looks at each object's pairs."""
    if line.find(b"\\") < 0 and _LOOSE.search(line) is None and line.count(b'":') == distinct:
        return None
    try:
        json.loads(line, object_pairs_hook=_refuse_repeats)
    except _RepeatedKeyError as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None  # pydantic read it: not expected
    return None


def _line_errors(line: int, exc: ValidationError) -> list[LineError]:
    found = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        if loc and loc[0] in RECORD_KINDS:
            loc = loc[1:]  # the union's tag, not a field
        field: str | None = ".".join(loc) if loc else None
        message = error_message(error)
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field = "kind"
        elif error["type"] == "json_invalid":
            message = f"not valid JSON ({error.get('ctx', {}).get('error', message)})"
        elif error["type"] in ("model_type", "dict_type") and not loc:
            message = "not a JSON object"
        elif "input" in error and error["type"] != "missing":
            message = f"{message} (got {_short(error['input'])})"
        found.append(LineError(line, field, message))
    return found


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _blocks(stream: _Reader, block_bytes: int) -> Iterator[tuple[bytes, int, int]]:
    """Yield (block of whole lines, number of its first line, bytes read so far)."""
    carry = b""
    line = 1
    read = 0
    while True:
        data = stream.read(block_bytes)
        read += len(data)
        if not data:
            if carry:
                yield carry, line, read
            return
        data = carry + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) > MAX_LINE_BYTES:
                raise _LineTooLongError(line)
            carry = data
            continue
        block, carry = data[:cut], data[cut:]
        yield block, line, read
        line += block.count(b"\n")


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


def default_jobs() -> int:
    """Parsing processes: one per CPU, at most four; 0 (parse in this process) on a single CPU. Parsing
    is most of ingest's work, so it pays even on busy CPUs: on 2 shared cores at a load average of 1,
    two parsing processes stored a million samples 1.8x (SQLite) and 1.15x (PostgreSQL) as fast as one
    process (``benchmarks/ingest_bench.py``). ``--jobs 0`` keeps ingest to one CPU, e.g. beside a busy
    database server."""
    cpus = os.cpu_count() or 1
    return 0 if cpus < 2 else min(4, cpus)


def ingest_file(
    engine: Engine,
    path: Path,
    *,
    sku_resolver: SkuResolver | None = None,
    jobs: int | None = None,
    block_bytes: int = BLOCK_BYTES,
    on_progress: ProgressCallback | None = None,
) -> IngestResult:
    """Store every record of one JSONL file (``.gz`` accepted) in one transaction, or nothing: raises
    :class:`IngestError` naming the bad lines. ``jobs`` = parsing processes (0: parse in this process).

    On PostgreSQL the file is first loaded as new data (COPY straight into the sample tables); if any of
    its keys is already stored, that transaction is rolled back and the file is loaded again the
    idempotent way (staging table, ``ON CONFLICT DO NOTHING``). Worker processes (``jobs`` > 0) need the
    calling program's main module to be importable (the usual ``if __name__ == "__main__"`` guard)."""
    opener = gzip.open if path.suffix == ".gz" else open
    return ingest_stream(
        engine, lambda: opener(path, "rb"), path, sku_resolver=sku_resolver, jobs=jobs,
        block_bytes=block_bytes, on_progress=on_progress,
    )  # fmt: skip


def ingest_stream(
    engine: Engine,
    open_source: Callable[[], AbstractContextManager[_Reader]],
    name: Path,
    *,
    sku_resolver: SkuResolver | None = None,
    jobs: int | None = None,
    block_bytes: int = BLOCK_BYTES,
    on_progress: ProgressCallback | None = None,
) -> IngestResult:
    """:func:`ingest_file` over any byte stream of JSON lines (``name`` labels it in errors and results).

    ``open_source`` is called once per load, and twice on PostgreSQL when the fast load meets stored keys:
    each call must give the same records from the start (a file reopened, a seeded simulation rerun); it is
    also called once more when a key repeated in the file may differ in its GPU's or worker's attributes."""
    started = time.perf_counter()
    jobs = default_jobs() if jobs is None else jobs
    load = partial(
        _ingest_once, engine, open_source, name, started, sku_resolver=sku_resolver, jobs=jobs,
        block_bytes=block_bytes, on_progress=on_progress,
    )  # fmt: skip
    if engine.dialect.name == "postgresql":
        try:
            return load(assume_new=True)
        except DuplicateKeyError:
            pass  # rolled back: some keys are stored already
    return load(assume_new=False)


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
    open_source: Callable[[], AbstractContextManager[_Reader]],
    path: Path,
    started: float,
    *,
    assume_new: bool,
    sku_resolver: SkuResolver | None,
    jobs: int,
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
    with gc_paused(), open_source() as stream, writing(engine) as connection:
        encoding = time_encoding_for(connection)
        dimensions = RowBatch(encoding)
        known_keys = KnownKeys()  # this transaction's
        parsed_blocks = _parsed_blocks(stream, encoding, jobs, block_bytes, on_progress)
        for parsed in _line_length_checked(parsed_blocks, path):
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
    open_source: Callable[[], AbstractContextManager[_Reader]],
    path: Path,
    block_bytes: int,
    wanted: set[SuspectKey],
) -> None:
    """Read the file once more to compare the records of ``wanted`` keys (:mod:`fleet.repeats`; rare)."""
    if not wanted:
        return
    with open_source() as stream:
        found = attribute_repeat(_blocks(stream, block_bytes), wanted)
    if found is not None:
        line, error = found
        raise IngestError(path, [LineError(line, error.field, error.message)])


def _raise_conflicts(path: Path, conflicts: Conflicts) -> None:
    """Refuse the file (the transaction rolls back) when a key came with other values than stored."""
    found = conflicts.conflicts()
    if found:
        errors = [LineError(None, conflict.differences[0][0], str(conflict)) for conflict in found]
        raise IngestError(path, errors[:MAX_ERRORS], more=True)


def _line_length_checked(
    parsed: Iterator[RowBatch | list[LineError]], path: Path
) -> Iterator[RowBatch | list[LineError]]:
    try:
        yield from parsed
    except _LineTooLongError as exc:
        message = f"line longer than {MAX_LINE_BYTES // 2**20} MiB without a line end"
        raise IngestError(path, [LineError(exc.line, None, message)], more=True) from None


def _parsed_blocks(
    stream: _Reader,
    encoding: TimeEncoding,
    jobs: int,
    block_bytes: int,
    on_progress: ProgressCallback | None,
) -> Iterator[RowBatch | list[LineError]]:
    """Parsed blocks in file order: inline for small files or ``jobs=0``, else through a process pool that
    keeps at most two blocks per worker in flight (bounded memory)."""
    blocks = _blocks(stream, block_bytes)
    first = next(blocks, None)
    if first is None:
        return
    second = next(blocks, None)
    if jobs <= 0 or second is None:
        for block, line, read in chain((first,), () if second is None else (second,), blocks):
            yield parse_block(block, line, encoding)
            if on_progress is not None:
                on_progress(read)
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=_worker_context()) as pool:
        pending: deque[tuple[Future[RowBatch | list[LineError]], int]] = deque()
        try:
            for block, line, read in chain((first, second), blocks):
                pending.append((pool.submit(parse_block, block, line, encoding), read))
                if len(pending) >= 2 * jobs:
                    yield from _drain_one(pending, on_progress)
            while pending:
                yield from _drain_one(pending, on_progress)
        finally:
            for future, _ in pending:
                future.cancel()


def _worker_context() -> multiprocessing.context.BaseContext:
    """Plain fork on Linux while this process runs no other thread (the CLI's case): the workers start with
    the parser already imported, where a fork server is a new interpreter importing it first (~0.5-1 s of
    CPU before the first block is parsed, on 2 shared cores). Next to other threads fork is unsafe (a lock
    one of them holds stays held in the child), and on macOS system libraries may not survive it: then a
    fork server that has imported the parser once."""
    methods = multiprocessing.get_all_start_methods()
    if sys.platform.startswith("linux") and "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["fleet.ingest"])
    return context


def _drain_one(
    pending: deque[tuple[Future[RowBatch | list[LineError]], int]], on_progress: ProgressCallback | None
) -> Iterator[RowBatch | list[LineError]]:
    future, read = pending.popleft()
    result = future.result()
    if on_progress is not None:
        on_progress(read)
    yield result
