"""The batch write path: idempotent on natural keys, dimensions upserted, bulk paths on both stores."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select, text

from fleet.contract import EngineSample, GpuSample, GpuState
from fleet.store.engine import writing
from fleet.store.keys import KnownKeys, resolve_keys
from fleet.store.queries import table_counts
from fleet.store.rows import INT64_MAX, RowValueError, TimeEncoding, batch_from_records
from fleet.store.schema import EngineSampleRow, GpuRow, GpuSampleRow, NodeRow, WorkerRow
from fleet.store.writer import (
    SMALL_BATCH_ROWS,
    DuplicateKeyError,
    WriteCounts,
    write_batch,
    write_sample_rows,
    write_samples,
)
from tests.fleet.store_factories import T0, engine_sample, gpu_sample


def _rows(engine: Engine, statement: Any) -> list[Any]:
    with engine.connect() as connection:
        return list(connection.execute(statement).all())


def test_the_same_records_twice_store_one_row_each(store_engine: Engine) -> None:
    records = [gpu_sample(gpu, minute) for gpu in range(4) for minute in range(3)] + [
        engine_sample(worker, minute) for worker in range(2) for minute in range(3)
    ]
    with writing(store_engine) as connection:
        first = write_samples(connection, records)
    with writing(store_engine) as connection:
        again = write_samples(connection, records)
    assert first == WriteCounts(stored=18, duplicates=0)
    assert again == WriteCounts(stored=0, duplicates=18)
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert counts | {"gpu_samples": 12, "engine_samples": 6, "gpus": 4, "workers": 2} == counts


def test_a_repeated_key_within_one_batch_counts_as_a_duplicate_and_the_first_value_stays(
    store_engine: Engine,
) -> None:
    with writing(store_engine) as connection:
        counts = write_samples(connection, [gpu_sample(0, 0, sm_active=0.1), gpu_sample(0, 0, sm_active=0.9)])
    assert counts == WriteCounts(stored=1, duplicates=1)
    assert _rows(store_engine, select(GpuSampleRow.sm_active)) == [(0.1,)]


def test_a_sample_row_holds_what_the_record_said(store_engine: Engine) -> None:
    record = gpu_sample(
        3, 7, gpu_util=None, nvlink_tx_bytes=INT64_MAX, state=GpuState.DEGRADED, worker_id=None
    )
    with writing(store_engine) as connection:
        write_samples(connection, [record, engine_sample(1, 2, kv_cache_usage=None, ttft_p99_s=1.5)])
    gpu_row = _rows(store_engine, select(GpuSampleRow))[0]
    assert (gpu_row.gpu_uuid, gpu_row.ts, gpu_row.worker_id, gpu_row.gpu_util) == (
        "GPU-0003", record.ts, None, None,
    )  # fmt: skip
    # byte counts: exact on SQLite, 4-byte floats on PostgreSQL (2**63 - 1 as the largest one below 2**63)
    largest = INT64_MAX if store_engine.dialect.name == "sqlite" else 2**63 - 2**39
    assert (gpu_row.nvlink_tx_bytes, gpu_row.state, gpu_row.source, gpu_row.sm_active) == (
        largest, "degraded", "sim", 0.5,
    )  # fmt: skip
    engine_row = _rows(store_engine, select(EngineSampleRow))[0]
    assert (engine_row.worker_id, engine_row.role, engine_row.prompt_tokens, engine_row.kv_cache_usage) == (
        "worker-1", "decode", 1000, None,
    )  # fmt: skip
    assert engine_row.ttft_p99_s == 1.5


def test_gpus_and_workers_keep_the_latest_attributes_and_widen_first_and_last_seen(
    store_engine: Engine,
) -> None:
    resolved: list[str] = []

    def resolver(gpu_name: str, mig_profile: str | None) -> str | None:
        resolved.append(gpu_name)
        return "H200-SXM" if gpu_name == "NVIDIA H200" else None

    with writing(store_engine) as connection:
        write_samples(connection, [gpu_sample(1, 10, worker_id="w-new"), gpu_sample(1, 5, worker_id="w-mid")],
                      sku_resolver=resolver)  # fmt: skip
    with writing(store_engine) as connection:  # an older window arriving late changes no attribute
        write_samples(connection, [gpu_sample(1, 0, worker_id="w-old", node="elsewhere"),
                                   engine_sample(0, 3, role="prefill"), engine_sample(0, 1, role="decode")],
                      sku_resolver=resolver)  # fmt: skip
    gpu = _rows(store_engine, select(GpuRow))[0]
    assert (gpu.worker_id, gpu.node, gpu.sku, gpu.gpu_name) == ("w-new", "node-0", "H200-SXM", "NVIDIA H200")
    assert (gpu.first_seen, gpu.last_seen) == (T0, gpu_sample(0, 10).ts)
    assert resolved == ["NVIDIA H200", "NVIDIA H200"]  # once per GPU name per batch
    worker = _rows(store_engine, select(WorkerRow))[0]
    assert (worker.role, worker.tp, worker.gpu_uuids, worker.model) == (
        "prefill", 2, ["GPU-0000", "GPU-0001"], "meta-llama/Llama-3.1-70B-Instruct",
    )  # fmt: skip
    nodes = {row.name: (row.first_seen, row.last_seen) for row in _rows(store_engine, select(NodeRow))}
    assert nodes["elsewhere"] == (T0, T0)
    assert nodes["node-0"] == (gpu_sample(0, 1).ts, gpu_sample(0, 10).ts)


def test_large_batches_take_the_bulk_path_and_stay_idempotent(store_engine: Engine) -> None:
    records = [gpu_sample(gpu, minute) for minute in range(3) for gpu in range(SMALL_BATCH_ROWS // 2)]
    with writing(store_engine) as connection:
        first = write_samples(connection, records[: len(records) // 2])
        second = write_samples(connection, records)  # half of it already stored, in the same transaction
    assert first.stored == len(records) // 2
    assert second == WriteCounts(stored=len(records) - len(records) // 2, duplicates=len(records) // 2)
    with store_engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM gpu_samples")).scalar_one() == len(records)
        assert (
            connection.execute(text("SELECT count(DISTINCT gpu_uuid) FROM gpus")).scalar_one()
            == SMALL_BATCH_ROWS // 2
        )


def _unchecked(record: Any, **changes: Any) -> Any:
    """A record with values the contract refuses, built past it (model_construct), as a buggy producer in
    this process could: the row builder is the store's last line of defence."""
    return type(record).model_construct(**{**record.__dict__, **changes})


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (_unchecked(gpu_sample(0, 0), pcie_rx_bytes=INT64_MAX + 1), "pcie_rx_bytes"),
        (_unchecked(gpu_sample(0, 0), gpu_uuid="GPU-\x00"), "gpu_uuid"),
        (gpu_sample(0, 0, gpu_index=2**31), "gpu_index"),
        (_unchecked(engine_sample(0, 0), model="llama\x00"), "model"),
        (_unchecked(engine_sample(0, 0), gpu_uuids=["GPU-\x00"]), "gpu_uuids"),
        (_unchecked(gpu_sample(0, 0), worker_id="w\x00"), "worker_id"),
        (_unchecked(engine_sample(0, 0), generation_tokens=2**64), "generation_tokens"),
    ],
)
def test_values_the_store_cannot_hold_are_refused_before_writing(record: Any, field: str) -> None:
    with pytest.raises(RowValueError) as caught:
        batch_from_records([record], "epoch_us")
    assert caught.value.field == field


def test_a_batch_encoded_for_the_other_dialect_is_refused(store_engine: Engine) -> None:
    other: TimeEncoding = "datetime" if store_engine.dialect.name == "sqlite" else "epoch_us"
    with pytest.raises(ValueError, match="encoded"), writing(store_engine) as connection:
        write_batch(connection, batch_from_records([gpu_sample()], other))


def test_assuming_new_data_bulk_loads_and_refuses_a_stored_key(store_engine: Engine) -> None:
    encoding = time_encoding_for_engine(store_engine)
    batch = batch_from_records([gpu_sample(gpu, 0) for gpu in range(3)], encoding)
    with writing(store_engine) as connection:
        assert write_sample_rows(connection, batch, assume_new=True) == WriteCounts(stored=3)
    if store_engine.dialect.name == "sqlite":  # one path there: a stored key is just a duplicate
        with writing(store_engine) as connection:
            assert write_sample_rows(connection, batch, assume_new=True) == WriteCounts(duplicates=3)
        return
    with pytest.raises(DuplicateKeyError), writing(store_engine) as connection:
        write_sample_rows(
            connection, batch_from_records([gpu_sample(7, 0), gpu_sample(0, 0)], encoding), assume_new=True
        )
    with store_engine.connect() as connection:
        assert table_counts(connection)["gpu_samples"] == 3


def time_encoding_for_engine(engine: Engine) -> TimeEncoding:
    return "epoch_us" if engine.dialect.name == "sqlite" else "datetime"


def test_a_ratio_below_the_smallest_4_byte_float_is_stored_positive_and_its_resend_is_a_duplicate(
    store_engine: Engine,
) -> None:
    """The contract allows 1e-300 for a ratio; PostgreSQL's REAL refuses it as underflow (schemathesis)."""
    from fleet.store.lean import FLOAT32_MIN, stored_equal

    records = [gpu_sample(0, 0, sm_active=1e-300), engine_sample(0, 0, kv_cache_usage=1e-300)]
    with writing(store_engine) as connection:
        assert write_samples(connection, records) == WriteCounts(stored=2, duplicates=0)
    with writing(store_engine) as connection:
        assert write_samples(connection, records) == WriteCounts(stored=0, duplicates=2)
    ((stored,),) = _rows(store_engine, select(GpuSampleRow.sm_active))
    assert 0.0 < stored <= FLOAT32_MIN * 1.0000001
    assert stored_equal(store_engine.dialect.name, "sm_active", stored, 1e-300)


def test_dimensions_merged_block_by_block_equal_one_batch_of_every_record() -> None:
    """What JSONL ingest relies on: merging blocks (any order, overlapping windows, a later block with an
    earlier first window, a record added after merges) gives the GPUs, workers and nodes of one batch."""
    records: list[GpuSample | EngineSample] = [
        gpu_sample(g, m, power_w=float(100 + m)) for g in range(3) for m in (5, 1, 9, 3)
    ] + [engine_sample(w, m, prompt_tokens=m) for w in range(2) for m in (7, 2, 7, 4)]
    blocks = [records[i::3] for i in range(3)]
    merged = batch_from_records(blocks[0], "datetime")
    for block in blocks[1:]:
        merged.merge(batch_from_records(block, "datetime"), rows=False)
    late = gpu_sample(1, 11, power_w=1.0)
    merged.add(late)
    whole = batch_from_records([*records, late], "datetime")
    merged.finish()
    assert (merged.gpus, merged.workers, merged.nodes) == (whole.gpus, whole.workers, whole.nodes)


def test_keys_known_in_the_transaction_are_not_looked_up_again_and_new_ones_are_learned(
    store_engine: Engine,
) -> None:
    """A file's blocks name the same GPUs and workers: the keys resolved for one block serve the next ones
    (issue 31), and a name first seen in a later block is resolved and learned."""
    first = batch_from_records([gpu_sample(gpu, 0) for gpu in range(3)], _encoding(store_engine))
    later = batch_from_records([gpu_sample(gpu, 1) for gpu in range(4)], _encoding(store_engine))
    known = KnownKeys()
    with writing(store_engine) as connection:
        write_sample_rows(connection, first, known_keys=known)
        assert len(known.gpus) == 3 and len(known.workers) == 2
        learned = dict(known.gpus)
        write_sample_rows(connection, later, known_keys=known)
    assert len(known.gpus) == 4 and known.gpus.items() >= learned.items()
    with store_engine.connect() as connection:
        stored: dict[str, int] = dict(connection.execute(text("SELECT gpu_uuid, id FROM gpu_keys")).all())
    assert stored == known.gpus
    # Known names cost no query: a key the transaction holds is used as it is.
    with writing(store_engine) as connection:
        gpus, _ = resolve_keys(connection, ["not stored"], [], KnownKeys(gpus={"not stored": 7}))
    assert gpus == {"not stored": 7}


def _encoding(engine: Engine) -> TimeEncoding:
    return "epoch_us" if engine.dialect.name == "sqlite" else "datetime"
