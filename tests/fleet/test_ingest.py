"""Streaming JSONL ingest: all or nothing per file, errors naming line and field, idempotent."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet import ingest_blocks
from fleet.contract import dump_record
from fleet.ingest import (
    ChunkReader,
    IngestError,
    LineError,
    default_jobs,
    ingest_file,
    ingest_stream,
    parse_block,
)
from fleet.store.queries import table_counts
from fleet.store.rows import RowBatch
from tests.fleet.store_factories import engine_sample, gpu_sample


def _lines(count: int) -> list[str]:
    """``count`` valid records: GPU samples with one engine sample every fourth line."""
    return [
        dump_record(engine_sample(i % 3, i) if i % 4 == 3 else gpu_sample(i % 5, i)) for i in range(count)
    ]


def _write(path: Path, lines: list[str], ending: str = "\n") -> Path:
    path.write_text(ending.join(lines) + ending)
    return path


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return table_counts(connection)


def test_a_file_is_stored_whole_and_a_second_ingest_stores_nothing_twice(
    store_engine: Engine, tmp_path: Path
) -> None:
    path = _write(tmp_path / "samples.jsonl", _lines(40), ending="\r\n")
    progress: list[int] = []
    first = ingest_file(store_engine, path, jobs=0, block_bytes=2048, on_progress=progress.append)
    again = ingest_file(store_engine, path, jobs=0)
    assert (first.records, first.gpu_samples, first.engine_samples) == (40, 30, 10)
    assert (first.stored, first.duplicates) == (40, 0)
    assert (again.stored, again.duplicates) == (0, 40)
    assert progress == sorted(progress) and progress[-1] == path.stat().st_size and len(progress) > 3
    counts = _counts(store_engine)
    assert counts | {"gpu_samples": 30, "engine_samples": 10, "gpus": 5, "workers": 3} == counts


def test_gzip_blank_lines_and_a_byte_order_mark(store_engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl.gz"
    with gzip.open(path, "wt") as stream:
        stream.write("\ufeff" + "\n\n".join(_lines(6)) + "\n   \n")
    assert ingest_file(store_engine, path, jobs=0).stored == 6


def test_chunks_are_read_back_as_a_stream_of_any_block_size() -> None:
    chunks = [b"ab", b"", b"cdefg", b"h\n"]
    reader = ChunkReader(chunks)
    assert [reader.read(3), reader.read(3), reader.read(3), reader.read(3)] == [b"abc", b"def", b"gh\n", b""]
    assert ChunkReader(chunks).read() == b"abcdefgh\n"


def test_a_stream_stores_what_the_same_lines_in_a_file_store(store_engine: Engine, tmp_path: Path) -> None:
    lines = _lines(40)
    chunks = ["".join(line + "\n" for line in lines[i : i + 7]).encode() for i in range(0, 40, 7)]
    opened: list[int] = []

    def source() -> ChunkReader:
        opened.append(1)
        return ChunkReader(chunks)

    result = ingest_stream(store_engine, source, Path("<test stream>"), jobs=0, block_bytes=1024)
    assert (result.records, result.stored, result.path) == (40, 40, Path("<test stream>"))
    assert opened  # opened again only when PostgreSQL's fast path meets stored keys
    again = ingest_file(store_engine, _write(tmp_path / "same.jsonl", lines), jobs=0)
    assert (again.stored, again.duplicates) == (0, 40)


def test_a_bad_line_in_a_stream_names_the_stream_and_stores_nothing(store_engine: Engine) -> None:
    chunks = [("\n".join(_lines(5)) + "\n").encode(), b'{"kind": "gpu_sample"}\n']
    with pytest.raises(IngestError, match=r"<sim>:line 6"):
        ingest_stream(store_engine, lambda: ChunkReader(chunks), Path("<sim>"), jobs=0)
    assert _counts(store_engine)["gpu_samples"] == 0


def _valid(**changes: Any) -> str:
    record = json.loads(dump_record(gpu_sample(0, 0)))
    record.update(changes)
    return json.dumps({key: value for key, value in record.items() if value is not ...})


BAD_LINES = [
    ('{"kind": "gpu_sample", "ts": ', None, "not valid JSON"),
    ("[1, 2]", None, "not a JSON object"),
    (_valid(gpu_uuid=...), "gpu_uuid", "Field required"),
    (_valid(sm_active=1.5), "sm_active", "less than or equal to 1"),
    (_valid(mem_used_bytes=-1), "mem_used_bytes", "greater than or equal to 0"),
    (_valid(ts="2026-03-02T12:00:00"), "ts", "timezone"),
    (_valid(colour="red"), "colour", "Extra inputs are not permitted"),
    (_valid(kind="gpu_smaple"), "kind", "gpu_sample"),
    (_valid(kind=...), "kind", "discriminator"),
    (_valid(gpu_uuid="GPU-\u0000"), "gpu_uuid", "contains a control, invisible or direction-changing"),
    (_valid(worker_id="node/\u202edecode"), "worker_id", "direction-changing character"),
    (_valid(pcie_tx_bytes=2**64), "pcie_tx_bytes", "less than or equal to 9223372036854775807"),
    (_valid(sm_active="0.5"), "sm_active", "valid number"),
    (_valid(gpu_index=True), "gpu_index", "valid integer"),
    (_valid(window_s=1e308), "window_s", "less than or equal to 86400"),
    (_valid(ts=1772452800), "ts", "not a number"),
    (_valid(ts="0001-01-01T00:00:00+05:00"), "ts", "outside the years 2000-2099"),
    (_valid(ts="9999-12-31T23:59:59-05:00"), "ts", "outside the years 2000-2099"),
    (_valid(ts="2100-01-01T00:00:00Z"), "ts", "outside the accepted window"),
]


@pytest.mark.parametrize(("line", "field", "message"), BAD_LINES, ids=[b[2] for b in BAD_LINES])
def test_each_kind_of_bad_line_is_named(line: str, field: str | None, message: str) -> None:
    errors = parse_block((dump_record(gpu_sample(1, 0)) + "\n" + line + "\n").encode(), 41, "epoch_us")
    assert isinstance(errors, list)
    assert errors[0].line == 42 and errors[0].field == field
    assert message in errors[0].message


def test_a_bad_line_late_in_a_file_stores_nothing_from_it(store_engine: Engine, tmp_path: Path) -> None:
    lines = _lines(60)
    lines[52] = _valid(dram_active=-0.1)
    path = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, path, jobs=0, block_bytes=1024)  # many blocks stored before the bad one
    assert caught.value.errors == [LineError(53, "dram_active", caught.value.errors[0].message)]
    assert str(caught.value).startswith(
        f"{path}:line 53: dram_active: Input should be greater than or equal to 0"
    )
    assert set(_counts(store_engine).values()) == {0}  # no sample, GPU, worker or node from that file


def test_parsing_in_worker_processes_gives_the_same_result(store_engine: Engine, tmp_path: Path) -> None:
    path = _write(tmp_path / "samples.jsonl", _lines(200))
    result = ingest_file(store_engine, path, jobs=1, block_bytes=4096)
    assert (result.records, result.stored) == (200, 200)
    lines = _lines(200)
    lines[150] = "not json"
    bad = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, bad, jobs=1, block_bytes=4096)
    assert [error.line for error in caught.value.errors] == [151]
    assert _counts(store_engine)["gpu_samples"] == 150


def test_errors_stop_at_the_limit_and_line_numbers_continue_across_blocks() -> None:
    block = ("oops\n" * 30).encode()
    errors = parse_block(block, 1001, "datetime")
    assert isinstance(errors, list) and len(errors) == 20 and errors[-1].line == 1020
    batch = parse_block(b"", 1, "datetime")
    assert isinstance(batch, RowBatch) and len(batch) == 0


def test_an_empty_file_stores_nothing_and_succeeds(store_engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert ingest_file(store_engine, path).records == 0


def test_overlapping_and_self_repeating_files_store_each_key_once(
    store_engine: Engine, tmp_path: Path
) -> None:
    lines = _lines(40)
    ingest_file(store_engine, _write(tmp_path / "first.jsonl", lines[:20]), jobs=0)
    overlap = ingest_file(store_engine, _write(tmp_path / "overlap.jsonl", lines[10:] + lines[30:32]), jobs=0)
    assert (overlap.records, overlap.stored, overlap.duplicates) == (32, 20, 12)
    counts = _counts(store_engine)
    assert counts["gpu_samples"] + counts["engine_samples"] == 40


def test_a_bad_value_in_the_latest_record_of_a_gpu_names_its_line() -> None:
    lines = [dump_record(gpu_sample(0, minute)) for minute in range(3)]
    lines.append(_valid(ts="2026-03-02T13:00:00Z", node="node\u0000"))
    errors = parse_block(("\n".join(lines) + "\n").encode(), 10, "datetime")
    message = "contains a control, invisible or direction-changing character (got 'node\\x00')"
    assert errors == [LineError(13, "node", message)]


def test_parsing_processes_follow_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    for cpus, jobs in ((8, 4), (4, 4), (2, 2), (1, 0)):
        monkeypatch.setattr("os.cpu_count", lambda cpus=cpus: cpus)
        assert default_jobs() == jobs


def test_a_runaway_line_is_refused_without_reading_it_whole(
    store_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fleet.ingest_blocks.MAX_LINE_BYTES", 4096)
    path = tmp_path / "runaway.jsonl"
    path.write_text("\n".join(_lines(3)) + "\n" + "x" * 10_000)
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, path, jobs=0, block_bytes=1024)
    assert caught.value.errors[0].line == 4 and "longer than" in caught.value.errors[0].message
    assert _counts(store_engine)["gpu_samples"] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parsing processes are forked on Linux only")
def test_parsing_processes_are_forked_unless_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork (the parser already imported) while ingest's process runs one thread; next to others, where a
    fork is unsafe, a fork server."""
    monkeypatch.setattr("threading.active_count", lambda: 1)
    assert ingest_blocks._worker_context().get_start_method() == "fork"
    monkeypatch.setattr("threading.active_count", lambda: 2)
    assert ingest_blocks._worker_context().get_start_method() == "forkserver"
