"""JSON lines to validated rows, a block at a time, in parsing processes: ingest's parsing half.

It imports no SQLAlchemy, so ``phasefit ingest`` starts the parsing processes (:class:`ParsedBlocks`)
before it imports the store and checks its schema: the first blocks are parsed on the other CPUs meanwhile
(start-up was a third of a 200,000-record load on 2 cores). :func:`parse_block` tries
:mod:`fleet.fast_records` first and falls back to pydantic, the authority, which names the bad lines.
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
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from fleet.contract import RECORD_ADAPTER, RECORD_KINDS, error_message
from fleet.fast_records import fast_block, keys_held
from fleet.store.rows import RowBatch, RowValueError, TimeEncoding

MAX_LINE_BYTES = 8 * 1024 * 1024  # an engine_sample naming 1,024 GPUs is ~270 kB; a runaway line is an error
BLOCK_BYTES = 4 * 1024 * 1024  # ~7,500 gpu_sample lines: big enough to amortise a round trip, small in memory
MAX_ERRORS = 20
ProgressCallback = Callable[[int], None]  # bytes read so far


class Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class LineError:
    line: int | None  # None for a sample key sent with other values than stored (the key is named instead)
    field: str | None  # None when the line is not a JSON object at all
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.field}: {self.message}" if self.field else f"{where}{self.message}"


class LineTooLongError(Exception):
    def __init__(self, line: int, limit: int) -> None:
        super().__init__(line)
        self.line = line
        self.limit = limit  # bytes


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
            repeated = _repeated_key(line, keys_held(record))
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


def blocks(stream: Reader, block_bytes: int) -> Iterator[tuple[bytes, int, int]]:
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
                raise LineTooLongError(line, MAX_LINE_BYTES)
            carry = data
            continue
        block, carry = data[:cut], data[cut:]
        yield block, line, read
        line += block.count(b"\n")


def file_source(path: Path) -> Callable[[], AbstractContextManager[Reader]]:
    """Opens ``path`` for reading bytes each time it is called (``.gz``: decompressed)."""
    opener = gzip.open if path.suffix == ".gz" else open
    return lambda: opener(path, "rb")


def default_jobs() -> int:
    """Parsing processes: one per CPU, at most four; 0 (parse in this process) on a single CPU. Parsing
    is most of ingest's work, so it pays even on busy CPUs: on 2 shared cores at a load average of 1,
    two parsing processes stored a million samples 1.8x (SQLite) and 1.15x (PostgreSQL) as fast as one
    process (``benchmarks/ingest_bench.py``). ``--jobs 0`` keeps ingest to one CPU, e.g. beside a busy
    database server."""
    cpus = os.cpu_count() or 1
    return 0 if cpus < 2 else min(4, cpus)


Parsed = RowBatch | list[LineError]  # a block's rows, or the errors found in it
# Blocks in flight per parsing process (each ~4 MB of lines, or its rows awaiting the writer).
AHEAD_PER_JOB = 4


class ParsedBlocks(AbstractContextManager["ParsedBlocks"]):
    """The parsed blocks of one source, in order: inline for a small source or ``jobs=0``, else through
    ``jobs`` processes that keep ``AHEAD_PER_JOB`` blocks each in flight (bounded memory).

    :meth:`start` opens the source and sets the processes parsing at once, so the caller can do other work
    (import the store, check its schema) while the first blocks are parsed; :meth:`results` then yields
    them. Closing cancels what was not yet parsed and shuts the processes down."""

    def __init__(
        self,
        open_source: Callable[[], AbstractContextManager[Reader]],
        encoding: TimeEncoding,
        jobs: int,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.encoding = encoding
        self._open_source = open_source
        self._jobs = jobs
        self._block_bytes = block_bytes
        self._exits = ExitStack()
        self._pending: deque[tuple[Future[Parsed], int]] = deque()
        self._blocks: Iterator[tuple[bytes, int, int]] = iter(())
        self._pool: ProcessPoolExecutor | None = None
        self._started = False

    def start(self) -> ParsedBlocks:
        if self._started:
            return self
        self._started = True
        try:
            self._start()
        except BaseException:
            self.close()  # the pool, its thread and the file: nothing left behind
            raise
        return self

    def _start(self) -> None:
        stream = self._exits.enter_context(self._open_source())
        self._blocks = blocks(stream, self._block_bytes)
        if self._jobs <= 0:
            return
        head: list[tuple[bytes, int, int]] = []
        try:
            head.extend(islice(self._blocks, 2))
        except LineTooLongError as exc:
            self._blocks = chain(head, _raising(exc))  # raised in its place, after the blocks before it
            return
        self._blocks = chain(head, self._blocks)
        if len(head) < 2:
            return  # one block at most: parsed here, no process is worth starting
        self._pool = self._exits.enter_context(
            ProcessPoolExecutor(max_workers=self._jobs, mp_context=_worker_context())
        )
        self._exits.callback(self._cancel_pending)
        self._submit(self._jobs * AHEAD_PER_JOB)

    def results(self, on_progress: ProgressCallback | None = None) -> Iterator[Parsed]:
        """Each block's rows or errors in file order (``on_progress`` gets the bytes read so far)."""
        self.start()
        if self._pool is None:
            for block, line, read in self._blocks:
                yield parse_block(block, line, self.encoding)
                if on_progress is not None:
                    on_progress(read)
            return
        while self._pending:
            future, read = self._pending.popleft()
            self._submit(1)
            result = future.result()
            if on_progress is not None:
                on_progress(read)
            yield result

    def _submit(self, count: int) -> None:
        assert self._pool is not None
        for _ in range(count):
            try:
                found = next(self._blocks, None)
            except LineTooLongError as exc:  # raised in its place among the results
                failed: Future[Parsed] = Future()
                failed.set_exception(exc)
                self._pending.append((failed, 0))
                return
            if found is None:
                return
            block, line, read = found
            self._pending.append((self._pool.submit(parse_block, block, line, self.encoding), read))

    def _cancel_pending(self) -> None:
        for future, _ in self._pending:
            future.cancel()
        self._pending.clear()

    def close(self) -> None:
        self._exits.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raising(exc: Exception) -> Iterator[tuple[bytes, int, int]]:
    raise exc
    yield  # a generator: raises when first read


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
    context.set_forkserver_preload(["fleet.ingest_blocks"])
    return context
