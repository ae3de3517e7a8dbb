"""Rollups per minute and per hour, computed before raw samples past the retention are deleted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

from fleet.contract import EngineSample, GpuSample, GpuState
from fleet.store.engine import writing
from fleet.store.partitions import ensure_partitions, floor_day
from fleet.store.queries import engine_rollups, gpu_rollups, table_counts
from fleet.store.retention import apply_retention, floor_hour, refresh_rollups
from fleet.store.writer import write_samples
from tests.fleet.store_factories import T0, engine_sample, gpu_sample

HOUR = timedelta(hours=1)


def _fill(engine: Engine) -> None:
    """GPU 0: two samples per minute for two hours (the second of each minute lost); worker 0 likewise."""
    records: list[GpuSample | EngineSample] = []
    for minute in range(120):
        records += [
            gpu_sample(0, minute, sm_active=0.2, dram_active=None, mem_used_bytes=minute),
            gpu_sample(0, minute + 0.5, sm_active=0.6, dram_active=None, state=GpuState.LOST),
            engine_sample(0, minute, prompt_tokens=10, generation_tokens=minute, kv_cache_usage=0.5),
            engine_sample(0, minute + 0.5, prompt_tokens=30, generation_tokens=1, kv_cache_usage=None),
        ]
    with writing(engine) as connection:
        write_samples(connection, records)


def test_rollups_average_ratios_sum_tokens_and_count_samples(store_engine: Engine) -> None:
    _fill(store_engine)
    with writing(store_engine) as connection:
        written = refresh_rollups(connection, T0, T0 + 2 * HOUR)
    assert written == {
        "gpu_samples_1m": 120,
        "gpu_samples_1h": 2,
        "engine_samples_1m": 120,
        "engine_samples_1h": 2,
    }
    with store_engine.connect() as connection:
        minute = gpu_rollups(connection, "1m", T0 + timedelta(minutes=5), T0 + timedelta(minutes=6))
        hour = gpu_rollups(connection, "1h", T0, T0 + 2 * HOUR, gpu_uuids=["GPU-0000"])
        engine_hour = engine_rollups(connection, "1h", T0, T0 + HOUR, worker_ids=["worker-0"])
    assert minute["ts"] == [(T0 + timedelta(minutes=5)).timestamp()]
    assert (minute["samples"], minute["lost_samples"], minute["window_s_sum"]) == ([2], [1], [120.0])
    assert minute["sm_active_avg"] == pytest.approx([0.4]) and minute["dram_active_avg"] == [None]
    assert minute["mem_used_bytes_max"] == [60 * 2**30]
    assert hour["samples"] == [120, 120] and hour["worker_id"] == ["worker-0", "worker-0"]
    assert hour["ts"] == [T0.timestamp(), (T0 + HOUR).timestamp()]
    assert engine_hour["prompt_tokens_sum"] == [60 * 40]
    assert engine_hour["generation_tokens_sum"] == [sum(range(60)) + 60]
    assert engine_hour["kv_cache_usage_avg"] == pytest.approx([0.5]) and engine_hour[
        "kv_cache_usage_max"
    ] == [0.5]
    assert engine_hour["role"] == ["decode"]


def test_recomputing_a_window_replaces_its_buckets(store_engine: Engine) -> None:
    _fill(store_engine)
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + 2 * HOUR)
        refresh_rollups(connection, T0, T0 + 2 * HOUR)
        with pytest.raises(ValueError, match="on the hour"):
            refresh_rollups(connection, T0 + timedelta(minutes=1), T0 + HOUR)
    with store_engine.connect() as connection:
        assert table_counts(connection)["gpu_samples_1m"] == 120


def test_hourly_rollups_alone_leave_the_per_minute_tables_empty(store_engine: Engine) -> None:
    _fill(store_engine)
    with writing(store_engine) as connection:
        written = refresh_rollups(connection, T0, T0 + 2 * HOUR, resolutions=("1h",))
        with pytest.raises(ValueError, match=r"unknown rollup resolution\(s\) \['5m'\]"):
            refresh_rollups(connection, T0, T0 + HOUR, resolutions=("1h", "5m"))
    assert written == {"gpu_samples_1h": 2, "engine_samples_1h": 2}
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpu_samples_1m"], counts["engine_samples_1m"], counts["gpu_samples_1h"]) == (0, 0, 2)


def test_prune_rolls_up_then_deletes_only_raw_samples_past_the_retention(store_engine: Engine) -> None:
    _fill(store_engine)
    now = T0 + timedelta(days=1, hours=1, minutes=20)  # cutoff with 1 day: T0 + 1 h (rounded down)
    result = apply_retention(store_engine, now=now, retention_days=1)
    assert result.rolled_up_until == floor_hour(now) and result.rollup_rows["gpu_samples_1h"] == 2
    if store_engine.dialect.name == "sqlite":
        assert result.cutoff == T0 + HOUR
        assert result.deleted == {"gpu_samples": 120, "engine_samples": 120}
        kept = (120, 120)
    else:  # whole days go on PostgreSQL: the cutoff is that day's midnight, nothing is older
        assert result.cutoff == floor_day(T0)
        assert result.deleted == {"gpu_samples": 0, "engine_samples": 0}
        kept = (240, 240)
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpu_samples"], counts["engine_samples"]) == kept
    assert (counts["gpu_samples_1h"], counts["gpu_samples_1m"], counts["engine_samples_1m"]) == (2, 120, 120)


def test_raw_rows_go_only_once_the_hourly_rollups_count_them(store_engine: Engine) -> None:
    """A sample that arrives after its hour was rolled up, and past the look-back, is rolled up again before
    its day is dropped (PostgreSQL) or its rows deleted (SQLite): raw samples never go un-rolled-up."""
    ensure_partitions(store_engine, T0, days_ahead=0)
    _fill(store_engine)
    apply_retention(store_engine, now=T0 + 3 * HOUR, retention_days=30, lookback=timedelta(0))
    with writing(store_engine) as connection:  # replayed late, into the first hour
        write_samples(connection, [gpu_sample(5, 1), engine_sample(5, 1)])
    with store_engine.connect() as connection:
        assert gpu_rollups(connection, "1h", T0, T0 + HOUR, gpu_uuids=["GPU-0005"])["samples"] == []
    later = T0 + timedelta(days=2)
    result = apply_retention(store_engine, now=later, retention_days=1, lookback=timedelta(0))
    assert result.deleted == {"gpu_samples": 241, "engine_samples": 241}
    # the look-back recomputed the second hour; the check found the first one short and rolled it up again
    assert result.rollup_rows["gpu_samples_1h"] == 1 + 2
    assert result.rollup_rows["engine_samples_1m"] == 60 + 61
    if store_engine.dialect.name == "postgresql":
        assert result.dropped_partitions == ("raw_gpu_samples_p20260302", "raw_engine_samples_p20260302")
    with store_engine.connect() as connection:
        gpu = gpu_rollups(connection, "1h", T0, T0 + 2 * HOUR)
        engine = engine_rollups(connection, "1h", T0, T0 + 2 * HOUR, worker_ids=["worker-5"])
        counts = table_counts(connection)
    assert sum(gpu["samples"]) == 241 and engine["samples"] == [1]
    assert (counts["gpu_samples"], counts["engine_samples"]) == (0, 0)


def test_prune_recomputes_only_the_look_back_unless_full(store_engine: Engine) -> None:
    _fill(store_engine)
    now = T0 + 3 * HOUR
    apply_retention(store_engine, now=now, retention_days=30, lookback=timedelta(0))
    with writing(store_engine) as connection:  # a late sample for the first hour, replayed from a spool
        write_samples(connection, [gpu_sample(5, 1)])
    partial = apply_retention(store_engine, now=now, retention_days=30, lookback=timedelta(0))
    with store_engine.connect() as connection:
        missed = gpu_rollups(connection, "1h", T0, T0 + HOUR, gpu_uuids=["GPU-0005"])
    full = apply_retention(store_engine, now=now, retention_days=30, full=True)
    with store_engine.connect() as connection:
        counted = gpu_rollups(connection, "1h", T0, T0 + HOUR, gpu_uuids=["GPU-0005"])
    assert partial.rollup_rows["gpu_samples_1h"] == 1 and missed["samples"] == []
    assert full.rollup_rows["gpu_samples_1h"] == 3 and counted["samples"] == [1]


def test_prune_on_an_empty_store_and_bad_retention(store_engine: Engine) -> None:
    result = apply_retention(store_engine, now=T0, retention_days=14)
    assert result.rollup_rows == {} and result.deleted == {"gpu_samples": 0, "engine_samples": 0}
    with pytest.raises(ValueError, match="at least 1"):
        apply_retention(store_engine, now=T0, retention_days=0)


@pytest.mark.parametrize("store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_samples_of_days_without_a_partition_are_rolled_up_and_deleted_from_default(
    store_engine: Engine,
) -> None:
    _fill(store_engine)  # no partition for T0's day: everything is in DEFAULT
    ensure_partitions(store_engine, T0 + timedelta(days=1), days_ahead=0)  # the next day has one, empty
    result = apply_retention(store_engine, now=T0 + timedelta(days=3), retention_days=1)
    assert result.deleted == {"gpu_samples": 240, "engine_samples": 240} and result.dropped_partitions == (
        "raw_gpu_samples_p20260303",
        "raw_engine_samples_p20260303",
    )
    with store_engine.connect() as connection:
        hourly = gpu_rollups(connection, "1h", T0, T0 + 2 * HOUR)
        assert connection.execute(text("SELECT count(*) FROM raw_gpu_samples_default")).scalar_one() == 0
    assert hourly["samples"] == [120, 120]
