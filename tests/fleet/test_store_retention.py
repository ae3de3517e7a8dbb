"""Rollups per minute and per hour, computed before raw samples past the retention are deleted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine

from fleet.contract import EngineSample, GpuSample, GpuState
from fleet.store.engine import writing
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
    assert result.cutoff == T0 + HOUR and result.rolled_up_until == floor_hour(now)
    assert result.deleted == {"gpu_samples": 120, "engine_samples": 120}
    assert result.rollup_rows["gpu_samples_1h"] == 2
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpu_samples"], counts["engine_samples"]) == (120, 120)
    assert (counts["gpu_samples_1h"], counts["gpu_samples_1m"], counts["engine_samples_1m"]) == (2, 120, 120)


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
