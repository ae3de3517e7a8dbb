"""The lean raw store: integer keys, codes, 4-byte floats, exactly-once ingest; PostgreSQL day partitions."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import pytest
from sqlalchemy import Engine, select, text

from fleet.contract import (
    ActivityEvidence,
    EngineSample,
    GpuSample,
    GpuState,
    Role,
    RoleSource,
    TelemetrySource,
    activity_evidence,
)
from fleet.store import codes
from fleet.store.engine import writing
from fleet.store.lean import REAL_COLUMNS, lean_gpu_rows, stored_equal
from fleet.store.partitions import (
    DAY,
    create_partition,
    days_to_ensure,
    ensure_partitions,
    floor_day,
    list_partitions,
    partition_name,
)
from fleet.store.queries import engine_samples, gpu_samples, table_counts
from fleet.store.rows import RowValueError, batch_from_records
from fleet.store.schema import EngineSampleRow, GpuSampleRow
from fleet.store.writer import SMALL_BATCH_ROWS, WriteCounts, write_sample_rows, write_samples
from tests.fleet.store_factories import POSTGRES_ONLY, T0, engine_sample, gpu_sample


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql)).scalar_one()


# --- pure functions -----------------------------------------------------------------------------------


def test_the_days_to_partition_are_today_and_the_days_ahead_in_utc() -> None:
    late_evening = datetime(2026, 3, 2, 23, 30, tzinfo=UTC)
    assert days_to_ensure(late_evening, 2) == [datetime(2026, 3, d, tzinfo=UTC) for d in (2, 3, 4)]
    east = datetime(2026, 3, 3, 1, 0, tzinfo=UTC).astimezone(datetime.now(UTC).astimezone().tzinfo)
    assert days_to_ensure(east, 0) == [datetime(2026, 3, 3, tzinfo=UTC)]
    assert partition_name("raw_gpu_samples", late_evening) == "raw_gpu_samples_p20260302"
    with pytest.raises(ValueError, match="no time zone"):
        floor_day(datetime(2026, 3, 2))
    with pytest.raises(ValueError, match="days_ahead must be 0 or more"):
        days_to_ensure(late_evening, -1)


# --- keys, codes and 4-byte floats ---------------------------------------------------------------------


def test_gpus_and_workers_are_stored_as_integer_keys_and_read_back_by_name(store_engine: Engine) -> None:
    records: list[GpuSample | EngineSample] = [
        gpu_sample(gpu, minute) for gpu in range(3) for minute in range(2)
    ]
    records += [gpu_sample(7, 0, worker_id="worker-without-engine"), engine_sample(0, 0), engine_sample(0, 1)]
    with writing(store_engine) as connection:
        write_samples(connection, records)
    with writing(store_engine) as connection:  # a second batch reuses the keys
        write_samples(connection, [gpu_sample(0, 5), engine_sample(0, 5)])
    with store_engine.connect() as connection:
        keys: dict[str, int] = dict(connection.execute(text("SELECT gpu_uuid, id FROM gpu_keys")).all())
        workers: dict[str, int] = dict(
            connection.execute(text("SELECT worker_id, id FROM worker_keys")).all()
        )
        raw = connection.execute(text("SELECT gpu_key, worker_key FROM raw_gpu_samples")).all()
        columns = gpu_samples(connection, T0, T0 + timedelta(hours=1), worker_ids=["worker-without-engine"])
        engine = engine_samples(connection, T0, T0 + timedelta(hours=1), worker_ids=["worker-0"])
    assert sorted(keys) == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0007"]
    assert sorted(workers) == ["worker-0", "worker-1", "worker-without-engine"]
    assert {type(value) for row in raw for value in row} == {int}
    assert {row[0] for row in raw} == set(keys.values()) and len(raw) == 8
    assert columns["gpu_uuid"] == ["GPU-0007"] and columns["worker_id"] == ["worker-without-engine"]
    assert engine["worker_id"] == ["worker-0"] * 3 and engine["prompt_tokens"] == [1000] * 3


def test_every_enumeration_value_has_a_code_the_views_read_back(store_engine: Engine) -> None:
    gpus = [
        gpu_sample(i, 0, state=state, source=source, activity_evidence=evidence)
        for i, (state, source, evidence) in enumerate(
            (state, source, evidence)
            for state in GpuState
            for source in TelemetrySource
            for evidence in (*ActivityEvidence, None)
        )
    ]
    workers = [
        engine_sample(i, 0, role=role, role_source=source)
        for i, (role, source) in enumerate((role, source) for role in Role for source in RoleSource)
    ]
    with writing(store_engine) as connection:
        write_samples(connection, [*gpus, *workers])
    with store_engine.connect() as connection:
        stored_gpus = connection.execute(
            select(
                GpuSampleRow.gpu_uuid, GpuSampleRow.state, GpuSampleRow.source, GpuSampleRow.activity_evidence
            )
        ).all()
        stored_workers = connection.execute(
            select(EngineSampleRow.worker_id, EngineSampleRow.role, EngineSampleRow.role_source)
        ).all()
    evidence = {g.gpu_uuid: activity_evidence(g) for g in gpus}  # None: derived from the fields present
    assert set(stored_gpus) == {
        (g.gpu_uuid, g.state.value, g.source.value, getattr(evidence[g.gpu_uuid], "value", None))
        for g in gpus
    }
    assert {e for *_, e in stored_gpus} == {"profiling", "utilisation"}
    assert set(stored_workers) == {(w.worker_id, w.role.value, w.role_source.value) for w in workers}


class _Later(StrEnum):
    """Values a later contract might add before a migration gives them codes."""

    OVERHEATED = "overheated"
    ORACLE = "oracle"


def test_a_value_without_a_code_is_refused_by_name_before_anything_is_written() -> None:
    for record, field in (
        (GpuSample.model_construct(**{**dict(gpu_sample()), "state": _Later.OVERHEATED}), "state"),
        (
            EngineSample.model_construct(**{**dict(engine_sample()), "role_source": _Later.ORACLE}),
            "role_source",
        ),
    ):
        with pytest.raises(RowValueError, match="the store has no code for") as caught:
            batch_from_records([record], "epoch_us")
        assert caught.value.field == field
    [row] = batch_from_records([gpu_sample()], "epoch_us").gpu_rows  # the writer's own last check
    unknown = (*row[:15], "overheated", *row[16:])
    with pytest.raises(codes.UnknownCodeError, match=r"state: the store has no code for 'overheated'"):
        lean_gpu_rows([unknown], {"GPU-0000": 1}, {"worker-0": 1})


def test_ratios_are_stored_as_4_byte_floats_and_read_back_as_sent_to_7_digits(store_engine: Engine) -> None:
    """The contract's ratios, watts and clocks are measurements good to a few digits: a 4-byte float keeps 7
    significant digits, so a value sent with up to 6 reads back exactly, and any other within 1 part in
    10^7 (PostgreSQL; SQLite's REAL is 8 bytes and keeps every value)."""
    with writing(store_engine) as connection:
        write_samples(connection, [gpu_sample(0, 0, sm_active=0.1, power_w=512.25, tensor_active=1 / 3)])
    with store_engine.connect() as connection:
        [(sm, power, tensor)] = connection.execute(
            select(GpuSampleRow.sm_active, GpuSampleRow.power_w, GpuSampleRow.tensor_active)
        ).all()
    assert (sm, power) == (0.1, 512.25)
    assert tensor == pytest.approx(1 / 3, rel=1e-7)
    assert (tensor == 1 / 3) is (store_engine.dialect.name == "sqlite")


def test_a_re_sent_value_is_the_stored_one_when_it_rounds_to_the_same_4_byte_float() -> None:
    """What the service's re-send check needs: PostgreSQL reads 1/3 back as 0.33333334."""
    assert {"sm_active", "window_s", "power_w", "kv_cache_usage", "ttft_p99_s"} <= REAL_COLUMNS
    assert not REAL_COLUMNS & {"ts", "mem_used_bytes", "prompt_tokens", "state", "gpu_uuid"}
    assert stored_equal("postgresql", "sm_active", 0.33333334, 1 / 3)
    assert stored_equal("postgresql", "power_w", 333.33334, 333.33333)
    assert not stored_equal("postgresql", "sm_active", 0.33333334, 0.3334)
    # byte counts are 4-byte floats on PostgreSQL (2**60 + 1 is stored as 2**60), exact on SQLite
    assert stored_equal("postgresql", "mem_used_bytes", 2**60, 2**60 + 1)
    assert stored_equal("postgresql", "nvlink_tx_bytes", 123456790528, 123456789012)
    assert not stored_equal("postgresql", "pcie_rx_bytes", 123456790528, 123456800000)
    assert stored_equal("postgresql", "mem_used_bytes", 2**63 - 2**39, 2**63 - 1)  # the largest it holds
    assert not stored_equal("sqlite", "mem_used_bytes", 2**60, 2**60 + 1)
    assert not stored_equal("postgresql", "prompt_tokens", 2**60, 2**60 + 1)  # tokens stay exact
    assert not stored_equal("sqlite", "sm_active", 0.33333334, 1 / 3)  # SQLite's REAL is 8 bytes
    assert not stored_equal("postgresql", "power_w", 1e38, 1e39)  # 1e39 is no 4-byte float
    assert stored_equal("postgresql", "state", "ok", "ok") and stored_equal("sqlite", "worker_id", None, None)


# --- exactly once ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [3, SMALL_BATCH_ROWS])
def test_a_re_sent_batch_is_stored_once_and_draws_no_new_keys(store_engine: Engine, size: int) -> None:
    records = [gpu_sample(i % 50, i // 50) for i in range(size)] + [engine_sample(0, 0)]
    for _ in range(3):
        with writing(store_engine) as connection:
            counts = write_samples(connection, records)
    assert counts == WriteCounts(stored=0, duplicates=size + 1)
    with store_engine.connect() as connection:
        assert table_counts(connection)["gpu_samples"] == size
    # PostgreSQL draws a sequence value for every row an INSERT ... ON CONFLICT tries: re-sends try none
    assert _scalar(store_engine, "SELECT max(id) FROM gpu_keys") == min(size, 50)


@POSTGRES_ONLY
def test_two_writers_sending_the_same_batch_at_once_store_it_once(store_engine: Engine) -> None:
    records = [gpu_sample(gpu, minute) for gpu in range(8) for minute in range(10)]
    first_wrote = threading.Event()
    results: dict[str, WriteCounts] = {}

    def first() -> None:
        with writing(store_engine) as connection:
            results["first"] = write_samples(connection, records)
            first_wrote.set()
            threading.Event().wait(0.5)  # the second writer now waits on these uncommitted keys

    def second() -> None:
        first_wrote.wait(10)
        with writing(store_engine) as connection:
            results["second"] = write_samples(connection, records)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {"first": WriteCounts(stored=80), "second": WriteCounts(duplicates=80)}
    assert _scalar(store_engine, "SELECT count(*) FROM gpu_samples") == 80


# --- partitions ------------------------------------------------------------------------------------------


def test_partitions_are_created_ahead_once_and_none_on_sqlite(store_engine: Engine) -> None:
    created = ensure_partitions(store_engine, T0 + timedelta(hours=11), days_ahead=2)
    if store_engine.dialect.name == "sqlite":
        assert created == []
        return
    days = [floor_day(T0) + n * DAY for n in range(3)]
    assert [(p.table, p.start, p.end) for p in created] == [
        (table, day, day + DAY) for table in ("raw_gpu_samples", "raw_engine_samples") for day in days
    ]
    assert ensure_partitions(store_engine, T0, days_ahead=2) == []
    with store_engine.connect() as connection:
        listed = list_partitions(connection, "raw_gpu_samples")
    assert [p.name for p in listed] == [
        *(partition_name("raw_gpu_samples", d) for d in days),
        "raw_gpu_samples_default",
    ]


@POSTGRES_ONLY
def test_a_sample_of_a_day_without_partition_lands_in_default_then_moves_to_its_day(
    store_engine: Engine,
) -> None:
    records = [gpu_sample(gpu, minute) for gpu in range(2) for minute in range(3)] + [engine_sample(0, 0)]
    with writing(store_engine) as connection:
        assert write_samples(connection, records) == WriteCounts(stored=7)
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_default") == 6
    assert _scalar(store_engine, "SELECT count(*) FROM gpu_samples") == 6  # readable all along
    created = ensure_partitions(store_engine, T0, days_ahead=0)
    assert [p.name for p in created] == ["raw_gpu_samples_p20260302", "raw_engine_samples_p20260302"]
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_default") == 0
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_p20260302") == 6
    assert _scalar(store_engine, "SELECT count(*) FROM raw_engine_samples_p20260302") == 1
    with writing(store_engine) as connection:  # still exactly once after the move
        assert write_samples(connection, records) == WriteCounts(duplicates=7)
    with store_engine.connect() as connection:
        assert gpu_samples(connection, T0, T0 + DAY, columns=("ts",))["ts"][0] == T0.timestamp()


@POSTGRES_ONLY
def test_an_overlapping_hand_made_partition_is_refused_by_name(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        connection.execute(
            text(
                "CREATE TABLE raw_gpu_samples_hand PARTITION OF raw_gpu_samples "
                "FOR VALUES FROM ('2026-03-02 12:00+00') TO ('2026-03-03 12:00+00')"
            )
        )
    overlap = r"raw_gpu_samples_hand covers .* overlaps the day 2026-03-02"
    with pytest.raises(RuntimeError, match=overlap), writing(store_engine) as connection:
        create_partition(connection, "raw_gpu_samples", T0)


@POSTGRES_ONLY
def test_bulk_loads_of_new_data_go_straight_into_the_day_partitions(store_engine: Engine) -> None:
    ensure_partitions(store_engine, T0, days_ahead=1)
    records: list[GpuSample | EngineSample] = [
        gpu_sample(g, m * 60) for g in range(4) for m in range(30)
    ]  # 30 h
    with writing(store_engine) as connection:
        batch = batch_from_records(records, "datetime")
        assert write_sample_rows(connection, batch, assume_new=True) == WriteCounts(stored=120)
    today, tomorrow = (
        _scalar(store_engine, f"SELECT count(*) FROM raw_gpu_samples_p2026030{d}") for d in (2, 3)
    )
    assert (today, tomorrow, _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_default")) == (
        48,
        72,
        0,
    )
