"""The parsing half of ingest: blocks parsed in order, started early, closed cleanly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine

from fleet import ingest_blocks
from fleet.contract import dump_record
from fleet.ingest import IngestError, ingest_file
from fleet.ingest_blocks import ParsedBlocks, blocks, file_source, parse_block
from fleet.store.queries import table_counts
from fleet.store.rows import RowBatch, TimeEncoding
from tests.fleet.store_factories import engine_sample, gpu_sample


def _file(path: Path, count: int) -> Path:
    lines = [
        dump_record(engine_sample(i % 3, i) if i % 4 == 3 else gpu_sample(i % 5, i)) for i in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _inline(path: Path, block_bytes: int) -> list[RowBatch | list[ingest_blocks.LineError]]:
    with file_source(path)() as stream:
        return [parse_block(block, line, "epoch_us") for block, line, _ in blocks(stream, block_bytes)]


@pytest.mark.parametrize("jobs", [0, 2])
def test_blocks_come_back_parsed_and_in_file_order(tmp_path: Path, jobs: int) -> None:
    path = _file(tmp_path / "samples.jsonl", 200)
    progress: list[int] = []
    with ParsedBlocks(file_source(path), "epoch_us", jobs, block_bytes=2048) as parsed:
        got = list(parsed.start().start().results(progress.append))  # starting twice starts once
    assert got == _inline(path, 2048) and len(got) > 2 * ingest_blocks.AHEAD_PER_JOB * max(jobs, 1)
    assert progress == sorted(progress) and progress[-1] == path.stat().st_size


@pytest.mark.skipif(sys.platform != "linux", reason="forked parsing processes: Linux only")
def test_blocks_started_early_are_parsed_before_they_are_asked_for(tmp_path: Path) -> None:
    path = _file(tmp_path / "samples.jsonl", 200)
    with ParsedBlocks(file_source(path), "epoch_us", 2, block_bytes=2048) as parsed:
        parsed.start()
        pending = list(parsed._pending)
        assert len(pending) == 2 * ingest_blocks.AHEAD_PER_JOB
        for future, _ in pending:
            future.result(timeout=60)  # parsed with no one reading the results yet
        assert list(parsed.results()) == _inline(path, 2048)


def test_closing_unread_blocks_cancels_them(tmp_path: Path) -> None:
    path = _file(tmp_path / "samples.jsonl", 200)
    parsed = ParsedBlocks(file_source(path), "epoch_us", 2, block_bytes=2048).start()
    parsed.close()
    assert not parsed._pending
    parsed.close()  # twice is harmless


def test_a_runaway_line_in_the_first_blocks_is_an_error_of_the_load(
    store_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_blocks, "MAX_LINE_BYTES", 4096)
    path = tmp_path / "runaway.jsonl"
    path.write_text(dump_record(gpu_sample(0, 0)) + "\n" + "x" * 10_000)
    parsed = ParsedBlocks(file_source(path), "epoch_us", 2, block_bytes=1024).start()
    with pytest.raises(IngestError, match="line 2: line longer than 0 MiB"):
        ingest_file(store_engine, path, jobs=2, block_bytes=1024, parsed=parsed)
    with store_engine.connect() as connection:  # closed: an open one would hold PostgreSQL's locks
        assert table_counts(connection)["gpu_samples"] == 0


def test_blocks_parsed_for_another_kind_of_store_are_parsed_again(
    store_engine: Engine, tmp_path: Path
) -> None:
    path = _file(tmp_path / "samples.jsonl", 40)
    other: TimeEncoding = "datetime" if store_engine.dialect.name == "sqlite" else "epoch_us"
    parsed = ParsedBlocks(file_source(path), other, 0, block_bytes=2048).start()
    result = ingest_file(store_engine, path, jobs=0, block_bytes=2048, parsed=parsed)
    assert (result.stored, result.duplicates) == (40, 0)


class _Failing:
    """A stream that fails on its ``fail_at``-th read (a corrupt gzip body found while reading ahead)."""

    def __init__(self, data: bytes, fail_at: int) -> None:
        self.data, self.fail_at, self.reads, self.closed = data, fail_at, 0, False

    def read(self, size: int = -1, /) -> bytes:
        self.reads += 1
        if self.reads >= self.fail_at:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        chunk, self.data = self.data[:size], self.data[size:]
        return chunk

    def __enter__(self) -> _Failing:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.closed = True


def test_a_failure_while_reading_ahead_leaves_no_process_thread_or_file_behind(tmp_path: Path) -> None:
    import multiprocessing
    import threading

    data = _file(tmp_path / "samples.jsonl", 200).read_bytes()
    stream = _Failing(data, fail_at=6)  # after the pool started
    threads = threading.active_count()
    with pytest.raises(EOFError):
        ParsedBlocks(lambda: stream, "epoch_us", 2, block_bytes=2048).start()
    assert stream.closed and threading.active_count() == threads
    assert multiprocessing.active_children() == []


def test_a_runaway_line_after_good_blocks_comes_after_their_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_blocks, "MAX_LINE_BYTES", 4096)
    bad = dump_record(gpu_sample(0, 0)).replace('"sm_active":', '"sm_active":"x","y":')
    path = tmp_path / "late-runaway.jsonl"
    path.write_text(bad + "\n" + "x" * 9000)  # the runaway in the second block read
    for jobs in (0, 2):
        with ParsedBlocks(file_source(path), "epoch_us", jobs, block_bytes=1024) as parsed:
            first = next(parsed.results())
        assert isinstance(first, list) and first[0].line == 1  # the first block's own error, either way
