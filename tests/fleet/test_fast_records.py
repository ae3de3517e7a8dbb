"""The fast JSONL path builds exactly the batch the pydantic path builds, or declines; never more lenient."""

from __future__ import annotations

import gc
import json
import random
import typing
from dataclasses import astuple
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import msgspec
import orjson
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from benchmarks.ingest_bench import samples
from fleet import fast_records, histograms
from fleet.catalog import load_catalog
from fleet.contract import (
    RECORD_ADAPTER,
    EngineSample,
    GpuSample,
    Name,
    Ratio,
    Record,
    activity_evidence,
    dump_record,
    parse_record,
)
from fleet.fast_records import KINDS, UNMIRRORED, NotMirroredError, fast_block, mirror
from fleet.ingest_blocks import _validated_block, parse_block
from fleet.store.rows import ENGINE_SAMPLE_COLUMNS, GPU_SAMPLE_COLUMNS, RowBatch, TimeEncoding
from fleetsim.scenario import load_scenario
from fleetsim.source import jsonl_batches
from tests.fleet.store_factories import engine_sample, gpu_sample

ENCODINGS: tuple[TimeEncoding, ...] = ("epoch_us", "datetime")
MODELS = typing.get_args(typing.get_args(Record)[0])


def _exact(value: Any) -> Any:
    """A value with its type and its repr (``-0.0`` is not ``0.0``, ``Role.DECODE`` is not ``"decode"``)."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, [_exact(item) for item in value])
    return (type(value).__name__, repr(value))


def _shape(batch: RowBatch) -> Any:
    return (
        batch.time_encoding,
        [_exact(row) for row in batch.gpu_rows],
        [_exact(row) for row in batch.engine_rows],
        [(key, _exact(astuple(gpu))) for key, gpu in batch.gpus.items()],
        [(key, _exact(astuple(worker))) for key, worker in batch.workers.items()],
        [(node, _exact(span)) for node, span in batch.nodes.items()],
    )


def _agree(block: bytes, encoding: TimeEncoding, first_line: int = 1) -> RowBatch | None:
    """Both paths on ``block``: the fast one's batch (None when it declined), having checked it is the
    pydantic path's batch to the type and repr of every value, and that it declined what pydantic refused."""
    fast = fast_block(block, first_line, encoding)
    slow = _validated_block(block, first_line, encoding)
    if fast is not None:
        assert isinstance(slow, RowBatch), (block[:300], slow)
        assert fast == slow
        assert _shape(fast) == _shape(slow)
    if not isinstance(slow, RowBatch):
        assert fast is None, (block[:300], slow)
    return fast


def _lines(records: list[GpuSample | EngineSample]) -> bytes:
    return b"".join(dump_record(record).encode() + b"\n" for record in records)


# --- (a) realistic data: the fast path is taken and builds the same batch ----------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("scenario", ["mixed", "mig", "telemetry-degraded", "no-profiling"])
def test_simulated_fleets_take_the_fast_path_and_build_the_same_batch(
    scenario: str, encoding: TimeEncoding
) -> None:
    data = b"".join(jsonl_batches(load_scenario(scenario), load_catalog(), seed=3, days=0.05, window_s=60.0))
    assert b'"engine_sample"' in data and b'"gpu_sample"' in data
    cut = data.index(b"\n", len(data) // 2) + 1
    for block, first_line in ((data[:cut], 1), (data[cut:], 1 + data[:cut].count(b"\n"))):
        batch = _agree(block, encoding, first_line)
        assert batch is not None and batch.gpu_rows and batch.engine_rows


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_benchmark_records_take_the_fast_path_and_build_the_same_batch(encoding: TimeEncoding) -> None:
    data = b"".join(orjson.dumps(record) + b"\n" for record in samples(6_000, 512))
    batch = _agree(data, encoding)
    assert batch is not None and len(batch.gpu_rows) == 6_000 and len(batch.gpus) == 512


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_mixed_kinds_out_of_order_windows_and_ties_keep_the_latest_window_rule(
    encoding: TimeEncoding,
) -> None:
    """Windows out of order: a GPU's attributes come from its latest window, on both paths alike."""
    records: list[GpuSample | EngineSample] = []
    for minute in (5, 1, 9, 3, 0):
        for gpu in range(6):
            records.append(
                gpu_sample(gpu, minute, node=f"node-{minute}-{len(records) % 3}", gpu_name=f"g{minute}")
            )
        records.append(engine_sample(gpu % 3, minute, model=f"m-{len(records)}", deployment="d"))
    random.Random(7).shuffle(records)
    assert _agree(_lines(records), encoding) is not None


@pytest.mark.parametrize("encoding", ["epoch_us", "datetime"])
def test_a_repeated_sample_key_goes_the_pydantic_way(encoding: TimeEncoding) -> None:
    """A sample key twice in a block: the fast path declines it; pydantic keeps identical repeats (the writer
    counts them as duplicates) and refuses a repeat with other values, naming the second line and field."""
    same = [gpu_sample(0, 1), gpu_sample(1, 1), gpu_sample(0, 1)]
    assert fast_block(_lines(same), 1, encoding) is None
    assert isinstance(_validated_block(_lines(same), 1, encoding), RowBatch)
    other = [gpu_sample(0, 1), gpu_sample(1, 1), gpu_sample(0, 1, node="node-elsewhere")]
    assert fast_block(_lines(other), 1, encoding) is None
    refused = _validated_block(_lines(other), 1, encoding)
    assert isinstance(refused, list) and (refused[0].line, refused[0].field) == (3, "node")


def test_blank_lines_a_byte_order_mark_and_crlf_endings_are_read_as_the_pydantic_path_reads_them() -> None:
    lines = [dump_record(gpu_sample(i % 3, i)) for i in range(6)] + [dump_record(engine_sample(0, 1))]
    for text, first_line in (
        ("\ufeff" + "\r\n".join(lines) + "\r\n", 1),
        ("\n\n" + "\n  \n".join(lines) + "\n\t\n", 1),
        ("\r\n".join(lines), 7),
        ("  \ufeff" + "\n".join(lines), 1),
        ("\n".join(lines) + "\n\x0c\v\n", 1),  # bytes.strip() whitespace: a blank line to both paths
    ):
        assert _agree(text.encode(), "epoch_us", first_line) is not None, text[:40]
    for text, first_line in (
        ("\ufeff" + "\n".join(lines), 2),  # a mark on a later block's first line is not a mark
        ("\n\ufeff" + "\n".join(lines), 1),  # nor on line 2
        ("\ufeff\n" + "\n".join(lines), 1),  # a line of nothing but the mark
        ("\ufeff \n" + "\n".join(lines), 1),
        ("\n".join(lines) + "\n\x0c{}\n", 1),
    ):
        assert _agree(text.encode(), "epoch_us", first_line) is None, text[:40]
    assert _agree(b"", "datetime") is not None


def test_parse_block_takes_the_fast_path_and_restores_the_garbage_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block = _lines([gpu_sample(i, i) for i in range(5)] + [engine_sample(1, 2)])
    expected = _validated_block(block, 1, "datetime")
    assert gc.isenabled()
    with monkeypatch.context() as patch:
        patch.setattr("fleet.ingest_blocks._validated_block", lambda *_: pytest.fail("pydantic path taken"))
        assert parse_block(block, 1, "datetime") == expected
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.setattr("fleet.ingest_blocks.fast_block", lambda *_: None)
        assert parse_block(block, 1, "datetime") == expected
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_columns_added_to_a_batch_holding_records_fold_as_records_added_one_by_one() -> None:
    records = [gpu_sample(i % 4, minute, node=f"n{minute}") for minute in (3, 1, 4, 1, 5) for i in range(8)]
    one_by_one, columns = RowBatch("epoch_us"), RowBatch("epoch_us")
    for record in records:
        one_by_one.add(record)
    for record in records[:20]:
        columns.add(record)
    rest = records[20:]
    values = {name: [getattr(r, name) for r in rest] for name in GPU_SAMPLE_COLUMNS}
    values.update(state=[r.state.value for r in rest], source=[r.source.value for r in rest])
    values["activity_evidence"] = [None if (e := activity_evidence(r)) is None else e.value for r in rest]
    columns.add_columns("gpu_sample", values, [r.ts for r in rest], lambda i: dict(rest[i].__dict__))
    assert _shape(one_by_one.finish()) == _shape(columns.finish())


# --- (b) edge values, field by field and at random: never more lenient than pydantic ---------------------

GPU_LINE: dict[str, Any] = {
    "kind": "gpu_sample", "ts": "2026-03-02T12:00:00Z", "window_s": 60.0, "node": "node-0",
    "gpu_uuid": "GPU-0001", "gpu_index": 3, "gpu_name": "NVIDIA H100 80GB HBM3", "worker_id": "worker-0",
    "sm_active": 0.5, "tensor_active": 0.4, "dram_active": 0.3, "gpu_util": 0.9, "mem_used_bytes": 64 * 2**30,
    "power_w": 500.5, "sm_clock_mhz": 1980.0, "nvlink_tx_bytes": 1, "nvlink_rx_bytes": 2, "pcie_tx_bytes": 3,
    "pcie_rx_bytes": 4, "state": "ok", "source": "dcgm", "parent_gpu_uuid": "GPU-parent",
    "mig_profile": "1g.10gb", "cluster": "prod", "gr_engine_active": 0.2, "mem_copy_util": 0.1,
    "activity_evidence": "utilisation",
}  # fmt: skip
ENGINE_LINE: dict[str, Any] = {
    "kind": "engine_sample", "ts": "2026-03-02T12:00:30+01:00", "window_s": 30, "worker_id": "worker-0",
    "node": "node-0", "engine": "vllm", "role": "decode", "role_source": "pod-label", "model": "llama",
    "precision": "fp8", "tp": 2, "gpu_uuids": ["GPU-0001", "GPU-0002"], "gpu_join": "pod-resources",
    "prompt_tokens": 10, "generation_tokens": 20, "requests_running": 3, "requests_waiting": 0,
    "kv_cache_usage": 0.25, "preemptions": 1, "ttft_p50_s": 0.1, "ttft_p99_s": 0.9, "tpot_p50_s": 0.01,
    "tpot_p99_s": 0.05, "cluster": "prod", "deployment": "ns/llama", "kv_capacity_tokens": 100_000,
    "max_running_requests": 256,
}  # fmt: skip
NUMBERS = [
    "null", "true", "false", '"0.5"', '"5"', "5.0", "5", "0", "-0", "-0.0", "-1", "0.5", "1", "1.0", "1e0",
    "1E2", "1e400", "-1e400", "1e-400", "4.9e-324", "0.30000000000000004", "0.1234567890123456789012345",
    "1024", "1025", "86400", "86400.00000000001", "1e15", "1000000000000000.1", "1000000000000001",
    "2147483647", "2147483648", "9223372036854775807", "9223372036854775808", "18446744073709551616",
    "-9223372036854775809", "[]", "{}", "[1]", "NaN", "Infinity", "01", "1.", ".5", "+1", "0x10",
]  # fmt: skip
TEXTS = [
    '"a"', '""', '" "', json.dumps("a" * 253), json.dumps("a" * 254), json.dumps("é" * 253),
    json.dumps("a" * 64), json.dumps("a" * 65), '"\\u0000"', '"a\\u0000b"', '"\\u200b"', '"a\\u202eb"',
    '"\\ud800"', '"a\\udc00b"',
    '"\\ud83d\\ude00"', '"😀"', '"é"', '"\\u00e9"', '"名前"', '" padded "', '"\\t"', '"a\\nb"', '"\\u007f"',
    '"\\u0085"', '"\\ufeff"', '"\\u00ad"', '"\\u2066"', '"a/b.c:d_e"', '"\\"quoted\\""', '"back\\\\slash"',
    '"ok"', '"OK"', '"lost"', '"degraded"', '"sim"', '"dcgm"', '"profiling"', '"utilisation"', '"decode"',
    '"prefill"', '"mixed"', '"unknown"', '"pod-resources"', '"declared"', '"engine"', '"none"',
    '"gpu_sample"', '"engine_sample"',
]  # fmt: skip
TIMES = [
    "2026-03-02T12:00:00Z", "2026-03-02 12:00:00Z", "2026-03-02t12:00:00z", "2026-03-02T12:00:00.5Z",
    "2026-03-02T12:00:00.123456Z", "2026-03-02T12:00:00.1234567Z", "2026-03-02T12:00:00+05",
    "2026-03-02T12:00:00+0530", "2026-03-02T12:00:00+05:30", "2026-03-02T12:00:00-00:00",
    "2026-03-02T12:00:00+00:00", "2026-03-02T12:00:00", "2026-03-02T12:00Z", "2026-03-02", "20260302T120000Z",
    "1999-12-31T23:59:59Z", "1999-12-31T23:30:00-01:00", "2000-01-01T00:00:00Z", "2000-01-01T00:30:00+01:00",
    "2099-12-31T23:59:59.999999Z", "2100-01-01T00:00:00Z", "2099-12-31T23:00:00-02:00",
    "2026-02-30T00:00:00Z", "2026-03-02T24:00:00Z", "2026-03-02T12:00:60Z", "2026-03-02T12:00:00+24:00",
    "2026-03-02T12:00:00.Z",
    "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "now", "",
]  # fmt: skip
LISTS = [
    "[]", '["a"]', '["a", "a"]', json.dumps(["a"] * 1024), json.dumps(["a"] * 1025), '[""]', '["a\\u0000"]',
    '["\\u202e"]', '"a"', "[1]", "[null]", "null", '[["a"]]', json.dumps([f"GPU-{i}" for i in range(40)]),
]  # fmt: skip
ALL_VALUES = NUMBERS + TEXTS + [json.dumps(t) for t in TIMES] + LISTS


def _line(pairs: list[tuple[str, str]]) -> str:
    """A JSON object from (key, raw JSON text) pairs, keys repeated as given."""
    return "{" + ", ".join(f"{json.dumps(key)}: {raw}" for key, raw in pairs) + "}"


def _pairs(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(key, json.dumps(value, ensure_ascii=False)) for key, value in record.items()]


def _context() -> list[str]:
    """Valid lines around the edited one, so its batch folds into other records' GPUs and workers (an
    earlier window of the same GPU: the same sample key twice is refused or a duplicate, not an edit)."""
    return [
        _line(_pairs({**GPU_LINE, "ts": "2026-03-02T11:58:00Z"})),
        _line(_pairs({**ENGINE_LINE, "ts": "2026-03-02T11:59:00Z"})),
        dump_record(gpu_sample(1, 3)),
        dump_record(engine_sample(0, -5)),
    ]


def _check(edited: str, encoding: TimeEncoding) -> tuple[bool, bool]:
    """(pydantic accepts, fast path accepts) for the edited line among valid ones, both paths agreeing."""
    block = "\n".join([*_context()[:2], edited, *_context()[2:]]).encode() + b"\n"
    fast = _agree(block, encoding)
    slow = isinstance(_validated_block(block, 1, encoding), RowBatch)
    return slow, fast is not None


def _edits(base: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """Every field replaced by every edge value, removed, set to null, repeated; unknown and escaped keys."""
    pairs = _pairs(base)
    edits: list[list[tuple[str, str]]] = []
    for index, (key, raw) in enumerate(pairs):
        for value in ALL_VALUES:
            edits.append([*pairs[:index], (key, value), *pairs[index + 1 :]])
        edits.append(pairs[:index] + pairs[index + 1 :])  # missing
        edits.append([*pairs, (key, raw)])  # repeated, same value
        edits.append([*pairs[:index], (key, '"\\u0000"'), *pairs[index + 1 :], (key, raw)])  # bad, then good
        edits.append([*pairs, (key, "-1")])  # good, then bad
    other = "engine_sample" if base["kind"] == "gpu_sample" else "gpu_sample"
    edits += [
        [*pairs, ("colour", '"red"')],
        [*pairs, ("kind", json.dumps(other))],
        [("kind", json.dumps(other)), *pairs],
        [("\\u006bind" if key == "kind" else key, raw) for key, raw in pairs],
        [("no\\u0064e" if key == "node" else key, raw) for key, raw in pairs],
    ]
    return edits


HISTOGRAM = {"le": [0.01, 0.025, 0.05], "counts": [2, 9, 10], "count": 10}
HISTOGRAM_EDITS = [
    ("null", True), (json.dumps(HISTOGRAM), True), ('{"le": [], "counts": [], "count": 0}', True),
    ('{"le": [0.05, 0.01], "counts": [1, 2], "count": 2}', False),  # bounds fall
    ('{"le": [0.01, 0.05], "counts": [2, 1], "count": 2}', False),  # cumulative counts fall
    ('{"le": [0.01], "counts": [2], "count": 1}', False),  # fewer in all than below the bound
    ('{"le": [0.01], "counts": [2, 3], "count": 3}', False),  # lengths differ
    ('{"le": [0], "counts": [0], "count": 0}', False), ('{"le": [0.01], "counts": [-1], "count": 0}', False),
    ('{"le": [0.01], "counts": [1], "count": 1, "sum": 0.004}', False),  # an unknown key
    ('{"le": [0.01], "counts": [1]}', False), ('{"le": ["0.01"], "counts": [1], "count": 1}', False),
    ("{}", False), ("[]", False), ('"x"', False), ("1", False),
    ('{"le": [0.01], "le": [0.02], "counts": [1], "count": 1}', False),  # a repeated key inside
]  # fmt: skip


@pytest.mark.parametrize("field", ["ttft_histogram", "tpot_histogram", "e2e_histogram"])
def test_a_histogram_is_validated_by_the_contract_on_both_paths_and_stored_re_binned(
    field: str,
) -> None:
    for number, (raw, valid) in enumerate(HISTOGRAM_EDITS):
        line = _line([*_pairs(ENGINE_LINE), (field, raw)])
        slow, fast = _check(line, ENCODINGS[number % 2])
        assert slow is valid, raw
        assert fast is valid, raw  # each held histogram validated by pydantic inside the fast path
    held = _line([*_pairs(ENGINE_LINE), (field, json.dumps(HISTOGRAM))])
    block = "\n".join([*_context()[:2], held]).encode()
    batch = _agree(block, "datetime")
    assert isinstance(batch, RowBatch)  # taken fast, the same batch as pydantic's
    column = ENGINE_SAMPLE_COLUMNS.index(field)
    (stored,) = [row[column] for row in batch.engine_rows if row[column] is not None]
    back = histograms.decode(stored)  # re-binned onto the shared grid, as the store keeps it
    assert back is not None and back.sum() == pytest.approx(10.0)
    assert histograms.quantile(0.5, back) == pytest.approx(0.01 + 0.015 * (5 - 2) / 7)  # within (10, 25] ms


@pytest.mark.parametrize("base", [GPU_LINE, ENGINE_LINE], ids=["gpu_sample", "engine_sample"])
def test_every_field_edited_to_every_edge_value_is_never_taken_where_pydantic_refuses(
    base: dict[str, Any],
) -> None:
    accepted = taken = 0
    for number, pairs in enumerate(_edits(base)):
        slow, fast = _check(_line(pairs), ENCODINGS[number % 2])
        accepted += slow
        taken += fast
    # Not vacuous: many edits are valid (-0.0, 253 characters, +05:30, non-ASCII names...) and taken fast.
    assert taken > 150 and taken >= 0.9 * accepted, (taken, accepted)


def test_whole_lines_pydantic_refuses_are_never_taken() -> None:
    good = _line(_pairs(GPU_LINE))
    for edited in (
        good + " x", good + good, good + ",", "[" + good + "]", good[:-1], '"' + good + '"', "null", "1",
        "{}",
        good.replace(": ", ":\x0c"), good.replace('"node-0"', '"node\x01"'), good.replace('"ok"', '"o\tk"'),
    ):  # fmt: skip
        assert _check(edited, "epoch_us") == (False, False), edited
    invalid_utf8 = b"\n".join([good.encode().replace(b"node-0", b"node-\xff"), good.encode()])
    assert _agree(invalid_utf8, "epoch_us") is None


def _random_value(rng: random.Random) -> str:
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice(ALL_VALUES)
    if pick == 1:  # many digits, exponents: msgspec and pydantic must round to the same float
        digits = rng.randint(1, 30)
        return rng.choice(
            [f"{rng.random():.{digits}f}", repr(rng.uniform(0, 2)), f"{rng.random()}e{rng.randint(-9, 3)}"]
        )
    if pick == 2:
        return str(
            rng.choice(
                [
                    rng.randint(-3, 3),
                    rng.randint(0, 2**65),
                    2**63 - rng.randint(-2, 2),
                    1024 + rng.randint(-2, 2),
                ]
            )
        )
    if pick == 3:
        alphabet = "aZ09-_./:é名😀 \u0000\u0009\u007f\u0085\u00ad\u061c\u180e\u200b\u200e\u2028\u202e"
        alphabet += "\u2066\ufeff\ufffa\U000e0001"
        return json.dumps(
            "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 2, 5, 64, 65, 253, 254])))
        )
    if pick == 4:
        when = datetime(1999, 12, 31, 20, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**10))
        offset = rng.choice(["Z", "+00:00", "-05:00", "+05:30", "+0530", "+05", "", "z", "+14:00", "-12:00"])
        text = when.strftime(rng.choice(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f"]))
        return json.dumps(text + offset)
    return json.dumps(rng.sample(["GPU-1", "GPU-2", "", "a\u200b", "x" * 254], rng.randint(0, 3)))


def test_random_edits_are_never_taken_where_pydantic_refuses() -> None:
    rng = random.Random(20260105)
    accepted = taken = 0
    for number in range(1_500):
        base = rng.choice([GPU_LINE, ENGINE_LINE])
        pairs = _pairs(base)
        for _ in range(rng.randint(1, 3)):
            index = rng.randrange(len(pairs))
            action = rng.random()
            if action < 0.08:
                del pairs[index]
            elif action < 0.14:
                pairs.append((pairs[index][0], _random_value(rng)))
            else:
                pairs[index] = (pairs[index][0], _random_value(rng))
        slow, fast = _check(_line(pairs), ENCODINGS[number % 2])
        accepted += slow
        taken += fast
    assert taken > 100 and taken >= 0.9 * accepted, (taken, accepted)


CAPS = [
    ("1", 1), ("256", 256), (str(2**31 - 1), 2**31 - 1), ("null", None), ("0", ...), ("-0", ...), ("-1", ...),
    ("256.0", ...), ("2.56e2", ...), ("256.5", ...), ("true", ...), ("false", ...), ('"256"', ...),
    (str(2**31), ...), ("[256]", ...),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "cap"), CAPS, ids=[raw for raw, _ in CAPS])
def test_a_concurrency_cap_is_a_whole_count_of_at_least_one_on_both_paths(raw: str, cap: Any) -> None:
    """What the contract takes as ``max_running_requests`` (JSON integers 1..2**31 - 1, or null) both ingest
    paths take and store on the worker; a 0, a negative, a float, a bool or a string neither takes."""
    edited = _line([*_pairs(ENGINE_LINE)[:-1], ("max_running_requests", raw)])
    accepted = cap is not ...
    for encoding in ENCODINGS:
        assert _check(edited, encoding) == (accepted, accepted), (raw, encoding)
        fast = _agree(edited.encode() + b"\n", encoding)
        assert (fast is not None) is accepted
        if fast is not None:
            assert fast.workers["worker-0"].max_running_requests == cap
    if accepted:
        record = parse_record(edited)
        assert isinstance(record, EngineSample) and record.max_running_requests == cap
    else:
        with pytest.raises(ValidationError, match="max_running_requests"):
            parse_record(edited)
    missing = _line(_pairs({k: v for k, v in ENGINE_LINE.items() if k != "max_running_requests"}))
    fast = _agree(missing.encode() + b"\n", "epoch_us")
    assert fast is not None and fast.workers["worker-0"].max_running_requests is None  # not said: None


# --- (c) the Structs mirror the contract: every field, default and bound ------------------------------------


def _properties(schema: dict[str, Any]) -> tuple[dict[str, tuple[dict[str, Any], bool, Any]], set[str]]:
    """Field -> (its schema without null, nullable, default or ...), and the required fields."""
    defs = schema.get("$defs", {})

    def resolve(part: dict[str, Any]) -> dict[str, Any]:
        return defs[part["$ref"].rsplit("/", 1)[1]] if "$ref" in part else part

    schema = resolve(schema)
    found = {}
    for name, prop in schema["properties"].items():
        variants = prop.get("anyOf", [prop])
        inner = [resolve(v) for v in variants if v != {"type": "null"}]
        assert len(inner) == 1, (name, prop)
        bare = {key: value for key, value in inner[0].items() if key not in ("title", "default")}
        found[name] = (bare, len(inner) < len(variants), prop.get("default", ...))
    return found, set(schema.get("required", []))


NUMERIC_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_structs_mirror_every_field_default_and_bound_of_the_contract(model: type[BaseModel]) -> None:
    assert UNMIRRORED is None
    (kind,) = (k for k in KINDS if k.tag == model.model_fields["kind"].default)
    theirs, their_required = _properties(model.model_json_schema())
    ours, our_required = _properties(msgspec.json.schema(kind.struct))
    texts = {text.name: text for text in kind.texts}
    assert set(ours) == set(theirs) and our_required == their_required | {"kind"}
    for name, (their, nullable, default) in theirs.items():
        if name == "kind":
            continue
        our, our_nullable, our_default = ours[name]
        if name in dict(
            kind.nested
        ):  # a nested record: held as its raw JSON (null too), pydantic validates it
            assert our == {} and nullable and their.get("type") == "object" and default is None, name
            continue
        assert our_nullable == nullable, name
        assert default is ... or our_default == default, name
        if their.get("type") in ("integer", "number"):
            assert set(their) <= NUMERIC_KEYS, f"{name}: a constraint the fast path does not check"
            assert their == our, name
            assert name not in texts
        elif their.get("type") == "array":
            assert {k: their.get(k) for k in ("minItems", "maxItems")} == {
                k: our.get(k) for k in ("minItems", "maxItems")
            }, name
            assert texts[name].shape == "list"
        else:  # text, an enumeration or a timestamp: pydantic validates each distinct value
            assert our == {"type": "string"} and name in texts, name


def test_a_new_field_or_bound_is_mirrored_and_an_unknown_constraint_or_validator_is_refused() -> None:
    class Wider(GpuSample):
        fan_ratio: Ratio | None = None
        slots: Annotated[int, Field(ge=2, lt=9)] = 4
        labels: Annotated[list[Name], Field(min_length=1)] = Field(default_factory=lambda: ["x"])
        tags: list[Name] | None = None

    (wider,) = mirror([Wider])
    assert {"fan_ratio", "slots", "labels", "tags"} <= set(wider.fields)
    schema = msgspec.json.schema(wider.struct)["$defs"]["Wider"]["properties"]
    assert schema["slots"] == {"type": "integer", "minimum": 2, "exclusiveMaximum": 9, "default": 4}

    class Multiple(GpuSample):
        step: Annotated[int, Field(multiple_of=5)] = 0

    class Validated(GpuSample):
        @model_validator(mode="after")
        def _never(self) -> Validated:
            return self

    class Stripped(GpuSample):
        model_config = ConfigDict(str_strip_whitespace=True)

    class Aliased(GpuSample):
        other: int = Field(0, alias="Other")

    class Loose(GpuSample):
        anything: Any = None

    for model in (Multiple, Validated, Stripped, Aliased, Loose):
        with pytest.raises(NotMirroredError):
            mirror([model])


def test_the_fast_path_declines_when_the_contract_cannot_be_mirrored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_records, "KINDS", ())
    assert fast_block(_lines([gpu_sample()]), 1, "epoch_us") is None
    assert RECORD_ADAPTER.validate_json(dump_record(gpu_sample()))  # the contract itself is untouched
