"""fleet.store.latest_records: a block's GPU and worker records built from its columns, as RowBatch folds
them record by record (fleet.fast_records' batches are checked against pydantic's in test_fast_records)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from fleet.contract import EngineSample, GpuSample
from fleet.store import latest_records
from fleet.store.latest_records import LatestOf
from fleet.store.rows import RowBatch, RowValueError
from tests.fleet.store_factories import engine_sample, gpu_sample


def _columns(records: list[GpuSample] | list[EngineSample]) -> dict[str, list[Any]]:
    """Every field as a column, as the fast parser hands them over: enumerations as their text."""
    names = [name for name in type(records[0]).model_fields if name != "kind"]
    return {
        name: [getattr(value, "_value_", value) for value in (getattr(r, name) for r in records)]
        for name in names
    }


def _one_by_one(records: list[GpuSample] | list[EngineSample]) -> RowBatch:
    batch = RowBatch("epoch_us")
    for record in records:
        batch.add(record)
    return batch.finish()


def _by_columns(records: list[GpuSample] | list[EngineSample], batch: RowBatch | None = None) -> RowBatch:
    batch = batch if batch is not None else RowBatch("epoch_us")
    kind = "gpu_sample" if isinstance(records[0], GpuSample) else "engine_sample"
    columns = _columns(records)
    batch.add_columns(kind, columns, columns["ts"], lambda i: dict(records[i].__dict__))  # type: ignore[arg-type]
    return batch.finish()


def _shuffled_gpus() -> list[GpuSample]:
    """Windows out of order, ties, a GPU moving node and changing name between windows."""
    records = [
        gpu_sample(gpu, minute, node=f"node-{minute % 3}-{gpu % 2}", gpu_name=f"g{minute}")
        for minute in (5, 1, 9, 3, 0, 9)
        for gpu in range(6)
    ]
    random.Random(3).shuffle(records)
    return records


def test_gpu_records_and_node_spans_are_those_the_records_fold_into() -> None:
    records = _shuffled_gpus()
    expected, built = _one_by_one(records), _by_columns(records)
    assert built.gpus == expected.gpus and list(built.gpus) == list(expected.gpus)
    assert built.nodes == expected.nodes and list(built.nodes) == list(expected.nodes)


def test_worker_records_are_those_the_records_fold_into() -> None:
    records = [
        engine_sample(worker, minute, model=f"m-{minute}", role="prefill" if minute > 4 else "decode")
        for minute in (5, 1, 9, 3)
        for worker in range(4)
    ]
    random.Random(5).shuffle(records)
    expected, built = _one_by_one(records), _by_columns(records)
    assert built.workers == expected.workers and built.nodes == expected.nodes


def test_a_batch_holding_records_still_folds_record_by_record() -> None:
    records = _shuffled_gpus()
    batch = RowBatch("epoch_us")
    batch.add(records[0])
    assert _by_columns(records[1:], batch).gpus == _one_by_one(records).gpus


def _block(columns: dict[str, list[Any]], gpu: bool) -> LatestOf:
    """One key's records in window order: its latest is the last, its first window the first."""
    keys = columns["gpu_uuid" if gpu else "worker_id"]
    return LatestOf(keys, {keys[0]: len(keys) - 1}, {keys[0]: columns["ts"][0]}, columns["ts"], columns)


@pytest.mark.parametrize(
    ("gpu", "field", "value"),
    [(True, "node", "node\x00"), (True, "gpu_name", "H100\x00"), (False, "deployment", "d\x00")],
)
def test_a_nul_character_at_the_latest_record_is_refused(gpu: bool, field: str, value: str) -> None:
    records = [gpu_sample(0, 1), gpu_sample(0, 2)] if gpu else [engine_sample(0, 1), engine_sample(0, 2)]
    columns = _columns(records)
    columns[field][1] = value
    with pytest.raises(RowValueError, match=f"{field}: contains a NUL character"):
        latest_records.build(gpu, _block(columns, gpu))


def test_a_nul_in_an_earlier_window_is_the_latest_records_business_only() -> None:
    """As when folding: only the latest record's attributes are kept, so only they are checked."""
    records = [gpu_sample(0, 1), gpu_sample(0, 2)]
    columns = _columns(records)
    columns["node"][0] = "node\x00"
    built = latest_records.build(True, _block(columns, True))
    assert built is not None and built[0][records[0].gpu_uuid].node == records[1].node


def test_a_gpu_index_beyond_32_bits_is_refused_through_the_batch() -> None:
    records = [gpu_sample(0, 1)]
    columns = _columns(records)
    columns["gpu_index"][0] = 2**31
    with pytest.raises(RowValueError, match="gpu_index: 2147483648 does not fit a 32-bit integer"):
        RowBatch("epoch_us").add_columns("gpu_sample", columns, columns["ts"], lambda i: {})


def test_columns_without_the_attributes_are_left_to_the_record_by_record_fold() -> None:
    columns = _columns([gpu_sample(0, 1)])
    del columns["gpu_name"]
    assert latest_records.build(True, _block(columns, True)) is None
