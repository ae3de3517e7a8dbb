"""The parse-copy baseline of ``benchmarks/ingest_bench.py`` (issue 31): a minimal loader of gpu_sample JSONL.

It does what `phasefit ingest` cannot skip and nothing more: it reads the file in blocks cut at line ends,
decodes each line with msgspec into a :class:`Sample` holding only the fields the lean table needs (typed
loosely: no range checks, no unknown-field checks, no repeated-key checks), maps the GPU UUID and worker id
to the integer keys already registered in the store (read once at start, timed), the enumerations to their
codes and the timestamp to the store's representation, and loads the rows into ``raw_gpu_samples``: no
validation, no dedup, no dimension tables.

- Parsing runs in ``--jobs`` worker processes (0: in this process), like `phasefit ingest --jobs`: blocks go
  to a process pool with at most two per worker in flight, and come back as row tuples in file order while
  this process writes the previous ones.
- PostgreSQL: one ``COPY raw_gpu_samples (...) FROM STDIN`` (psycopg ``cursor.copy()``, ``write_row``), in
  one transaction; ``--copy-format binary`` (the default: measured faster) or ``text``.
- SQLite: ``executemany`` of ``INSERT`` in one transaction, as the raw baseline does (WAL journal).

    .venv/bin/python benchmarks/parse_copy_loader.py FILE.jsonl --database-url URL [--jobs N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sqlite3
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from fleet.store.codes import EVIDENCE, SOURCE, STATE

BLOCK_BYTES = 4 * 1024 * 1024  # as `phasefit ingest` reads (fleet.ingest.BLOCK_BYTES)
COLUMNS = (
    "ts", "mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes",
    "gpu_key", "worker_key", "window_s", "sm_active", "tensor_active", "dram_active", "gpu_util", "power_w",
    "sm_clock_mhz", "gr_engine_active", "mem_copy_util", "state", "source", "activity_evidence",
)  # fmt: skip  # fleet.store.lean.RAW_GPU_COLUMNS (a test checks), not imported: it loads SQLAlchemy
# PostgreSQL types of COLUMNS for a binary COPY (byte counts are 4-byte floats there).
PG_TYPES = ("timestamptz", *["float4"] * 5, "int4", "int4", *["float4"] * 9, "int2", "int2", "int2")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
Row = tuple[Any, ...]


class Sample(msgspec.Struct):
    """The fields of a gpu_sample line that the lean table stores; the others are skipped by the decoder."""

    ts: datetime
    gpu_uuid: str
    window_s: float
    state: str
    source: str
    worker_id: str | None = None
    sm_active: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    gpu_util: float | None = None
    mem_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    nvlink_tx_bytes: int | None = None
    nvlink_rx_bytes: int | None = None
    pcie_tx_bytes: int | None = None
    pcie_rx_bytes: int | None = None
    gr_engine_active: float | None = None
    mem_copy_util: float | None = None
    activity_evidence: str | None = None


_DECODE = msgspec.json.Decoder(Sample).decode
_PROFILING, _UTILISATION = EVIDENCE["profiling"], EVIDENCE["utilisation"]
# Set in each parsing process (and in this one for --jobs 0) by _set_keys.
_KEYS: dict[str, Any] = {}


def _set_keys(gpu_keys: dict[str, int], worker_keys: dict[str | None, int | None], epoch_us: bool) -> None:
    _KEYS.update(gpu=gpu_keys, worker=worker_keys, epoch_us=epoch_us)


def _evidence(s: Sample) -> int | None:
    """What the store derives (fleet.contract.activity_evidence): as sent, else from the fields present."""
    if s.activity_evidence is not None:
        return EVIDENCE[s.activity_evidence]
    if s.sm_active is not None or s.tensor_active is not None or s.dram_active is not None:
        return _PROFILING
    if s.gpu_util is not None or s.mem_copy_util is not None or s.gr_engine_active is not None:
        return _UTILISATION
    return None


def parse_block(block: bytes) -> list[Row]:
    """The block's lines as ``raw_gpu_samples`` rows (``COLUMNS``)."""
    gpus, workers = _KEYS["gpu"], _KEYS["worker"]
    samples = list(map(_DECODE, filter(None, block.split(b"\n"))))
    times: Iterable[Any] = (s.ts for s in samples)
    if _KEYS["epoch_us"]:
        times = [(ts - EPOCH) // MICROSECOND for ts in times]
    return [
        (ts, s.mem_used_bytes, s.nvlink_tx_bytes, s.nvlink_rx_bytes, s.pcie_tx_bytes, s.pcie_rx_bytes,
         gpus[s.gpu_uuid], workers[s.worker_id], s.window_s, s.sm_active, s.tensor_active, s.dram_active,
         s.gpu_util, s.power_w, s.sm_clock_mhz, s.gr_engine_active, s.mem_copy_util, STATE[s.state],
         SOURCE[s.source], _evidence(s))
        for ts, s in zip(times, samples, strict=True)
    ]  # fmt: skip


def blocks(stream: BinaryIO, block_bytes: int) -> Iterator[bytes]:
    """The stream in blocks of about ``block_bytes``, each ending at a line end."""
    rest = b""
    while chunk := stream.read(block_bytes):
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            rest += chunk
            continue
        yield rest + chunk[:cut]
        rest = chunk[cut:]
    if rest:
        yield rest


def parsed_rows(path: Path, jobs: int, block_bytes: int, keys: tuple[Any, ...]) -> Iterator[Row]:
    """Every row of the file, in file order, parsed here (``jobs`` 0) or in ``jobs`` processes."""
    with path.open("rb") as stream:
        if jobs <= 0:
            _set_keys(*keys)
            for block in blocks(stream, block_bytes):
                yield from parse_block(block)
            return
        context = multiprocessing.get_context("fork")  # no threads here yet: the cheapest start
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_set_keys, initargs=keys) as pool:
            pending: deque[Future[list[Row]]] = deque()
            for block in blocks(stream, block_bytes):
                pending.append(pool.submit(parse_block, block))
                if len(pending) >= 2 * jobs:
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()


def load_sqlite(path: Path, db: str, jobs: int, block_bytes: int) -> int:
    connection = sqlite3.connect(db, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        gpus = dict(connection.execute("SELECT gpu_uuid, id FROM gpu_keys").fetchall())
        workers = dict(connection.execute("SELECT worker_id, id FROM worker_keys").fetchall())
        rows = parsed_rows(path, jobs, block_bytes, (gpus, {None: None, **workers}, True))
        placeholders = ", ".join("?" * len(COLUMNS))
        connection.execute("BEGIN")
        cursor = connection.executemany(
            f"INSERT INTO raw_gpu_samples ({', '.join(COLUMNS)}) VALUES ({placeholders})", rows
        )
        connection.execute("COMMIT")
        return int(cursor.rowcount)
    finally:
        connection.close()


def load_postgres(path: Path, conninfo: str, jobs: int, block_bytes: int, copy_format: str) -> int:
    import psycopg

    with psycopg.connect(conninfo, options="-c timezone=UTC") as connection, connection.cursor() as cursor:
        gpus: dict[str, int] = dict(cursor.execute("SELECT gpu_uuid, id FROM gpu_keys").fetchall())
        workers: dict[str, int] = dict(cursor.execute("SELECT worker_id, id FROM worker_keys").fetchall())
        rows = parsed_rows(path, jobs, block_bytes, (gpus, {None: None, **workers}, False))
        statement = f"COPY raw_gpu_samples ({', '.join(COLUMNS)}) FROM STDIN (FORMAT {copy_format.upper()})"
        written = 0
        with cursor.copy(statement) as copy:
            if copy_format == "binary":
                copy.set_types(PG_TYPES)
            for row in rows:
                copy.write_row(row)
                written += 1
        return written  # the connection's context commits


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--database-url", required=True, help="sqlite:///PATH or postgresql[+psycopg]://...")
    parser.add_argument("--jobs", type=int, default=2, help="parsing processes (0: in this process)")
    parser.add_argument("--block-bytes", type=int, default=BLOCK_BYTES)
    parser.add_argument("--copy-format", choices=("binary", "text"), default="binary")
    args = parser.parse_args(argv)
    url: str = args.database_url
    if url.startswith("sqlite:///"):
        written = load_sqlite(args.file, url.removeprefix("sqlite:///"), args.jobs, args.block_bytes)
    else:
        conninfo = "postgresql://" + url.split("://", 1)[1]
        written = load_postgres(args.file, conninfo, args.jobs, args.block_bytes, args.copy_format)
    print(f"{args.file}: {written:,} rows loaded", file=sys.stderr)


if __name__ == "__main__":
    main()
