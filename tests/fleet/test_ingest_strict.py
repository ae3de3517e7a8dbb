"""File ingest is as strict as HTTP (issue 29, item 6): a line repeating a key, a sample key re-sent with
other values (stored before, or earlier in the same file) and a window too short to divide by are refused,
naming the line or key and the field, on the msgspec fast path and on the pydantic path; nothing of a
refused file is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from fleet import ingest_blocks as ingest_module
from fleet.contract import MIN_WINDOW_S, dump_record
from fleet.fast_records import fast_block
from fleet.ingest import IngestError, ingest_file, parse_block
from fleet.store.queries import table_counts
from fleet.store.schema import Base
from tests.fleet.store_factories import engine_sample, gpu_sample


@pytest.fixture(params=["fast", "pydantic"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test on the msgspec fast path, and again with it declining every block (pydantic)."""
    if request.param == "pydantic":
        monkeypatch.setattr(ingest_module, "fast_block", lambda *_args: None)
    yield request.param


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _stored(engine: Engine) -> int:
    with engine.connect() as connection:
        counts = table_counts(connection)
    return counts["gpu_samples"] + counts["engine_samples"]


def _repeat(line: str, key: str, value: object, *, loose: bool = False) -> str:
    """``line`` (one JSON object) with ``key`` sent once more, with ``value``, at its end."""
    record = json.loads(line)
    body = json.dumps(record) if loose else json.dumps(record, separators=(",", ":"))
    extra = (
        f", {json.dumps(key)}: {json.dumps(value)}" if loose else f",{json.dumps(key)}:{json.dumps(value)}"
    )
    return body[:-1] + extra + "}"


REPEATS = [
    ("sm_active", 0.9, False),
    ("sm_active", 0.9, True),
    ("mig_profile", None, False),  # null twice: still a repeat
    ("kind", "gpu_sample", False),
    ("ts", "2026-03-02T12:00:00Z", True),
]


@pytest.mark.parametrize(("key", "value", "loose"), REPEATS, ids=[f"{k}-{loose}" for k, _, loose in REPEATS])
def test_a_line_repeating_a_key_is_refused_naming_line_and_key(
    store_engine: Engine, tmp_path: Path, path_kind: str, key: str, value: object, loose: bool
) -> None:
    lines = [dump_record(gpu_sample(i % 3, i, sm_active=0.1, mig_profile=None)) for i in range(6)]
    lines[4] = _repeat(lines[4], key, value, loose=loose)
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "repeats.jsonl", lines), jobs=0)
    (error,) = caught.value.errors
    assert (error.line, error.field) == (5, key)
    assert "more than once" in error.message
    assert _stored(store_engine) == 0


@pytest.mark.parametrize(("key", "value", "loose"), REPEATS, ids=[f"{k}-{loose}" for k, _, loose in REPEATS])
def test_the_fast_path_declines_every_repeat(key: str, value: object, loose: bool) -> None:
    line = dump_record(gpu_sample(1, 0, sm_active=0.1, mig_profile=None))
    assert fast_block((line + "\n").encode(), 1, "epoch_us") is not None
    assert fast_block((_repeat(line, key, value, loose=loose) + "\n").encode(), 1, "epoch_us") is None


def test_an_escaped_quote_goes_the_pydantic_way_and_is_stored(store_engine: Engine, tmp_path: Path) -> None:
    line = dump_record(gpu_sample(1, 0, worker_id='worker "a"'))
    assert '\\"' in line and fast_block((line + "\n").encode(), 1, "epoch_us") is None
    assert ingest_file(store_engine, _write(tmp_path / "quoted.jsonl", [line]), jobs=0).stored == 1


def test_the_fast_path_declines_a_repeat_and_keeps_the_rest() -> None:
    lines = [dump_record(gpu_sample(1, 0)), dump_record(engine_sample(1, 0))]
    assert fast_block(("\n".join(lines) + "\n").encode(), 1, "epoch_us") is not None
    loose = [json.dumps(json.loads(line)) for line in lines]  # ", " and ": " separators
    assert fast_block(("\n".join(loose) + "\n").encode(), 1, "epoch_us") is not None
    repeated = [lines[0], _repeat(lines[1], "prompt_tokens", 5)]
    assert fast_block(("\n".join(repeated) + "\n").encode(), 1, "epoch_us") is None
    errors = parse_block(("\n".join(repeated) + "\n").encode(), 7, "epoch_us")
    assert isinstance(errors, list) and (errors[0].line, errors[0].field) == (8, "prompt_tokens")


def test_a_stored_key_sent_with_other_values_is_refused_naming_key_and_fields(
    store_engine: Engine, tmp_path: Path, path_kind: str
) -> None:
    first = [dump_record(gpu_sample(0, 0, sm_active=0.1)), dump_record(engine_sample(0, 0))]
    ingest_file(store_engine, _write(tmp_path / "first.jsonl", first), jobs=0)
    changed = [
        dump_record(gpu_sample(1, 5)),  # new: not stored either, the file is refused whole
        dump_record(gpu_sample(0, 0, sm_active=0.9, power_w=123.0)),
    ]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "changed.jsonl", changed), jobs=0)
    (error,) = caught.value.errors
    assert error.field == "sm_active"
    assert "GPU-0000" in error.message and "sm_active" in error.message and "power_w" in error.message
    assert _stored(store_engine) == 2
    # The same values again are duplicates, as before.
    again = ingest_file(store_engine, _write(tmp_path / "again.jsonl", first), jobs=0)
    assert (again.stored, again.duplicates) == (0, 2)


def test_a_stored_key_sent_with_another_gpu_name_leaves_the_gpu_as_it_was(
    store_engine: Engine, tmp_path: Path, path_kind: str
) -> None:
    ingest_file(store_engine, _write(tmp_path / "first.jsonl", [dump_record(gpu_sample(0, 0))]), jobs=0)
    renamed = [dump_record(gpu_sample(0, 0, gpu_name="NVIDIA Renamed"))]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "renamed.jsonl", renamed), jobs=0)
    assert caught.value.errors[0].field == "gpu_name"
    assert "NVIDIA Renamed" in caught.value.errors[0].message
    gpus = Base.metadata.tables["gpus"]
    with store_engine.connect() as connection:
        (name,) = connection.execute(select(gpus.c.gpu_name)).one()
    assert name != "NVIDIA Renamed"


@pytest.mark.parametrize("block_bytes", [1 << 20, 200], ids=["one-block", "across-blocks"])
def test_a_key_repeated_in_one_file_with_other_values_is_refused(
    store_engine: Engine, tmp_path: Path, path_kind: str, block_bytes: int
) -> None:
    lines = [dump_record(gpu_sample(0, 0, sm_active=0.1)), dump_record(engine_sample(0, 1))]
    lines += [dump_record(gpu_sample(0, 0, sm_active=0.2))]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "self.jsonl", lines), jobs=0, block_bytes=block_bytes)
    assert caught.value.errors[0].field == "sm_active"
    assert _stored(store_engine) == 0


@pytest.mark.parametrize("block_bytes", [1 << 20, 200], ids=["one-block", "across-blocks"])
@pytest.mark.parametrize(
    ("field", "value"), [("gpu_index", 5), ("gpu_name", "NVIDIA Other"), ("node", "node-9")]
)
def test_a_new_gpus_key_repeated_with_other_attributes_is_refused(
    store_engine: Engine, tmp_path: Path, path_kind: str, block_bytes: int, field: str, value: object
) -> None:
    """The same sample key twice in one file, the sample values equal, an attribute of a GPU the store has
    never seen different: refused naming the field and both values, nothing stored."""
    lines = [dump_record(gpu_sample(0, 0)), dump_record(engine_sample(0, 0))]
    lines += [dump_record(gpu_sample(0, 0, **{field: value}))]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "attrs.jsonl", lines), jobs=0, block_bytes=block_bytes)
    error = caught.value.errors[0]
    assert error.field == field and "came twice with other values" in error.message
    assert repr(value) in error.message
    assert _stored(store_engine) == 0


def test_a_key_repeated_in_one_file_with_the_same_values_is_a_duplicate(
    store_engine: Engine, tmp_path: Path, path_kind: str
) -> None:
    lines = [dump_record(gpu_sample(0, 0)), dump_record(engine_sample(0, 0))] * 2
    result = ingest_file(store_engine, _write(tmp_path / "twice.jsonl", lines), jobs=0)
    assert (result.stored, result.duplicates) == (2, 2)


@pytest.mark.parametrize("window", [5e-324, 1e-9, MIN_WINDOW_S / 2])
def test_a_window_too_short_to_divide_by_is_refused(
    store_engine: Engine, tmp_path: Path, path_kind: str, window: float
) -> None:
    line = json.loads(dump_record(gpu_sample(0, 0)))
    line["window_s"] = window
    lines = [dump_record(gpu_sample(1, 0)), json.dumps(line)]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "short.jsonl", lines), jobs=0)
    (error,) = caught.value.errors
    assert (error.line, error.field) == (2, "window_s")
    assert "greater than or equal to 0.001" in error.message
    assert _stored(store_engine) == 0


def test_the_shortest_window_is_accepted(store_engine: Engine, tmp_path: Path, path_kind: str) -> None:
    lines = [dump_record(gpu_sample(0, 0, window_s=MIN_WINDOW_S))]
    assert ingest_file(store_engine, _write(tmp_path / "ms.jsonl", lines), jobs=0).stored == 1


# --- a key repeated at a window earlier than its GPU's or worker's latest ---------------------------------

EARLIER = [
    ("gpu", "gpu_index", 5),
    ("gpu", "gpu_name", "NVIDIA Other"),
    ("gpu", "node", "node-9"),
    ("gpu", "mig_profile", "1g.10gb"),
    ("worker", "model", "other/model"),
    ("worker", "gpu_uuids", ["GPU-0007"]),
    ("worker", "tp", 8),
]


def _sample(kind: str, minute: float, **fields: object) -> str:
    return dump_record(
        gpu_sample(0, minute, **fields) if kind == "gpu" else engine_sample(0, minute, **fields)
    )


@pytest.mark.parametrize("order", ["in-order", "latest-first"])
@pytest.mark.parametrize("block_bytes", [1 << 20, 200], ids=["one-block", "across-blocks"])
@pytest.mark.parametrize(("kind", "field", "value"), EARLIER, ids=[f"{k}-{f}" for k, f, _ in EARLIER])
def test_a_key_repeated_at_an_earlier_window_with_other_attributes_is_refused(
    store_engine: Engine,
    tmp_path: Path,
    path_kind: str,
    block_bytes: int,
    kind: str,
    field: str,
    value: object,
    order: str,
) -> None:
    """The repeat's window (minute 0) is older than the GPU's or worker's latest (minute 1): the latest
    record alone would not show it. Refused naming the line, the key and the field; nothing stored."""
    minutes = [0, 1] if order == "in-order" else [1, 0]
    lines = [_sample(kind, minute) for minute in minutes]
    lines += [dump_record(gpu_sample(3, 0)), _sample(kind, 0, **{field: value})]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "earlier.jsonl", lines), jobs=0, block_bytes=block_bytes)
    (error,) = caught.value.errors
    assert (error.line, error.field) == (4, field)
    assert "came twice with other values" in error.message
    assert ("GPU-0000" if kind == "gpu" else "worker-0") in error.message
    assert repr(value) in error.message
    assert _stored(store_engine) == 0


@pytest.mark.parametrize("block_bytes", [1 << 20, 200], ids=["one-block", "across-blocks"])
def test_an_earlier_window_repeated_exactly_is_a_duplicate(
    store_engine: Engine, tmp_path: Path, path_kind: str, block_bytes: int
) -> None:
    """Identical repeats stay idempotent, also of a GPU and a worker whose attributes change in the file
    (the case the file is read again for): each key's two records agree."""
    lines = [
        dump_record(gpu_sample(0, 0, node="node-a")),
        dump_record(engine_sample(0, 0, model="m-a")),
        dump_record(gpu_sample(0, 1, node="node-b")),
        dump_record(engine_sample(0, 1, model="m-b")),
    ]
    lines += [lines[0], lines[1], lines[2], dump_record(gpu_sample(1, 0))]
    path = _write(tmp_path / "again.jsonl", lines)
    result = ingest_file(store_engine, path, jobs=0, block_bytes=block_bytes)
    assert (result.stored, result.duplicates) == (5, 3)
    again = ingest_file(store_engine, path, jobs=0, block_bytes=block_bytes)
    assert (again.stored, again.duplicates) == (0, 8)


def test_a_stored_key_at_an_earlier_window_with_other_attributes_leaves_the_gpu_as_it_was(
    store_engine: Engine, tmp_path: Path, path_kind: str
) -> None:
    """The store keeps a GPU's attributes of its latest window only (as HTTP does), so a stored key of an
    earlier window is compared on its sample values; its attributes do not rewrite the GPU either."""
    first = [dump_record(gpu_sample(0, 0)), dump_record(gpu_sample(0, 1))]
    ingest_file(store_engine, _write(tmp_path / "first.jsonl", first), jobs=0)
    renamed = [dump_record(gpu_sample(0, 0, gpu_name="NVIDIA Renamed"))]
    result = ingest_file(store_engine, _write(tmp_path / "renamed.jsonl", renamed), jobs=0)
    assert (result.stored, result.duplicates) == (0, 1)
    gpus = Base.metadata.tables["gpus"]
    with store_engine.connect() as connection:
        (name,) = connection.execute(select(gpus.c.gpu_name)).one()
    assert name != "NVIDIA Renamed"


def test_the_fast_path_fingerprints_attributes_as_the_pydantic_path_does() -> None:
    lines = [
        dump_record(gpu_sample(0, 0, node="node-a")),
        dump_record(gpu_sample(0, 1, node="node-b")),
        dump_record(gpu_sample(1, 0)),
        dump_record(engine_sample(0, 0, gpu_uuids=["GPU-0000"])),
        dump_record(engine_sample(0, 1, gpu_uuids=["GPU-0001"], gpu_join="pod-resources")),
        dump_record(engine_sample(1, 0, gpu_join="pod-resources")),
    ]
    block = ("\n".join(lines) + "\n").encode()
    fast = fast_block(block, 1, "epoch_us")
    assert fast is not None and fast.changed() == {(True, "GPU-0000"), (False, "worker-0")}
    assert fast == ingest_module._validated_block(block, 1, "epoch_us")


def test_an_earlier_window_repeat_is_refused_with_parsing_processes(
    store_engine: Engine, tmp_path: Path
) -> None:
    lines = [dump_record(gpu_sample(0, 0)), dump_record(gpu_sample(0, 1))]
    lines += [dump_record(gpu_sample(1, minute)) for minute in range(4)]
    lines += [dump_record(gpu_sample(0, 0, gpu_name="NVIDIA Other"))]
    with pytest.raises(IngestError) as caught:
        ingest_file(store_engine, _write(tmp_path / "jobs.jsonl", lines), jobs=2, block_bytes=1000)
    (error,) = caught.value.errors
    assert (error.line, error.field) == (7, "gpu_name")
    assert _stored(store_engine) == 0
