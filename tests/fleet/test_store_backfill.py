"""Backfilled days (issue 31): samples of past days land in ``DEFAULT``, then get day partitions of their own,
exactly once, and are closed and expired like any other day (PostgreSQL)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from fleet.contract import EngineSample, GpuSample
from fleet.store.closing import close_partitions
from fleet.store.engine import writing
from fleet.store.partitions import (
    DAY,
    ensure_partitions,
    floor_day,
    list_partitions,
    partition_backfilled_days,
)
from fleet.store.retention import apply_retention
from fleet.store.writer import WriteCounts, write_samples
from tests.fleet.store_factories import POSTGRES_ONLY, T0, engine_sample, gpu_sample

NOW = T0 + 20 * DAY  # 2026-03-22 12:00
KEEP_FROM = floor_day(NOW - 14 * DAY)  # the default retention's cutoff: 2026-03-08
BACKFILLED = [floor_day(T0) + n * DAY for n in (10, 11, 12)]  # 2026-03-12 .. 14, inside the retention
MAX_BYTES_PER_GPU_SAMPLE = 120  # issue 31, item 4: a backfilled day at rest, indexes included


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql)).scalar_one()


def _minutes(day: datetime, hour: float = 0) -> float:
    """``gpu_sample``'s ``minute`` for ``hour`` o'clock on ``day``."""
    return (day + timedelta(hours=hour) - T0) / timedelta(minutes=1)


def _backfill() -> list[GpuSample | EngineSample]:
    """Three GPUs every 10 minutes of three days within the retention, one of a day before it, and an
    engine sample per day: 3 * 144 * 3 + 3 = 1299 GPU samples, 4 engine samples."""
    records: list[GpuSample | EngineSample] = [
        gpu_sample(gpu, _minutes(day) + 10 * step)
        for day in BACKFILLED
        for gpu in range(3)
        for step in range(144)
    ]
    old = floor_day(T0)  # before KEEP_FROM: retention deletes it, no partition is made for it
    records += [gpu_sample(gpu, _minutes(old, 6)) for gpu in range(3)]
    records += [engine_sample(0, _minutes(day, 1)) for day in (old, *BACKFILLED)]
    return records


def _counts(engine: Engine, table: str) -> dict[str, int]:
    with engine.connect() as connection:
        names = [p.name for p in list_partitions(connection, table)]
        counted = {n: connection.execute(text(f"SELECT count(*) FROM {n}")).scalar_one() for n in names}
    return {name: int(count) for name, count in counted.items()}


@POSTGRES_ONLY
def test_backfilled_days_leave_default_for_partitions_of_their_own_exactly_once(store_engine: Engine) -> None:
    records = _backfill()
    ensure_partitions(store_engine, NOW, days_ahead=1)
    with writing(store_engine) as connection:
        assert write_samples(connection, records) == WriteCounts(stored=1303)
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_default") == 1299
    assert ensure_partitions(store_engine, NOW, days_ahead=1) == []  # today and ahead only: the gap

    created = partition_backfilled_days(store_engine, KEEP_FROM)
    days = [f"{day:%Y%m%d}" for day in BACKFILLED]
    assert [p.name for p in created] == [
        *(f"raw_gpu_samples_p{d}" for d in days),
        *(f"raw_engine_samples_p{d}" for d in days),
    ]
    gpu = _counts(store_engine, "raw_gpu_samples")
    assert {name: gpu[name] for name in (f"raw_gpu_samples_p{d}" for d in days)} == dict.fromkeys(
        (f"raw_gpu_samples_p{d}" for d in days), 432
    )
    assert gpu["raw_gpu_samples_default"] == 3  # the day past the retention: left for the prune to delete
    assert sum(gpu.values()) == 1299
    engine_counts = _counts(store_engine, "raw_engine_samples")
    assert engine_counts["raw_engine_samples_default"] == 1 and sum(engine_counts.values()) == 4
    assert partition_backfilled_days(store_engine, KEEP_FROM) == []  # once
    with writing(store_engine) as connection:  # still exactly once: a re-sent backfill is all duplicates
        assert write_samples(connection, records) == WriteCounts(duplicates=1303)
    assert _scalar(store_engine, "SELECT count(*) FROM gpu_samples") == 1299

    closed = close_partitions(store_engine, NOW, close_after_days=0).closed
    assert {p.name for p in created} <= {p.name for p in closed}
    with writing(store_engine) as connection:  # a closed backfilled day is exactly-once too
        assert write_samples(connection, records) == WriteCounts(duplicates=1303)

    # a week on, retention (14 days) drops the backfilled days' partitions like any other day's
    pruned = apply_retention(store_engine, now=BACKFILLED[-1] + 15 * DAY, retention_days=14)
    assert {*pruned.dropped_partitions} == {p.name for p in created}
    assert pruned.deleted == {"gpu_samples": 1299, "engine_samples": 4}
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_default") == 0


@POSTGRES_ONLY
def test_moved_rows_are_sorted_by_time_and_default_gives_its_space_back(store_engine: Engine) -> None:
    """A backfill file is often GPU by GPU: the move writes the day in time order (what its BRIN index
    needs once closed), and vacuums ``DEFAULT`` so its emptied pages go back to the file system."""
    day = BACKFILLED[0]
    for gpu in range(4):  # a file per GPU
        with writing(store_engine) as connection:
            write_samples(connection, [gpu_sample(gpu, _minutes(day) + m) for m in range(0, 1440, 5)])
    assert _scalar(store_engine, "SELECT pg_relation_size('raw_gpu_samples_default')") > 0
    with writing(store_engine) as connection:  # the planner knows the day is all of DEFAULT: a plain scan
        connection.execute(text("ANALYZE raw_gpu_samples_default"))
    partition_backfilled_days(store_engine, KEEP_FROM)
    name = f"raw_gpu_samples_p{day:%Y%m%d}"
    with store_engine.connect() as connection:
        stamps = connection.execute(text(f"SELECT ts FROM {name} ORDER BY ctid")).scalars().all()
    assert len(stamps) == 4 * 288 and stamps == sorted(stamps)
    assert _scalar(store_engine, "SELECT pg_relation_size('raw_gpu_samples_default')") == 0
    estimate = "SELECT reltuples FROM pg_class WHERE relname = 'raw_gpu_samples_default'"
    assert _scalar(store_engine, estimate) == 0  # what `db partitions` shows


@POSTGRES_ONLY
def test_a_backfilled_closed_day_takes_at_most_120_bytes_per_gpu_sample(store_engine: Engine) -> None:
    """Issue 31, item 4, with every GPU column set (no NULLs: the widest row): 64 GPUs, 864 windows (100 s)
    of one past day, 55,296 samples, sent GPU by GPU, partitioned and closed."""
    day = BACKFILLED[1]
    fields = {
        "sm_clock_mhz": 1755.0, "gr_engine_active": 0.61, "mem_copy_util": 0.2, "nvlink_tx_bytes": 2**40,
        "nvlink_rx_bytes": 2**40 + 7, "pcie_tx_bytes": 3 * 2**30, "pcie_rx_bytes": 5 * 2**30,
    }  # fmt: skip
    gpus, windows = 64, 864
    for gpu in range(gpus):
        records: list[GpuSample | EngineSample] = [
            gpu_sample(gpu, _minutes(day) + w * 100 / 60, window_s=100.0, power_w=400.0 + w % 97, **fields)
            for w in range(windows)
        ]
        with writing(store_engine) as connection:
            write_samples(connection, records)
    started = time.perf_counter()
    partition_backfilled_days(store_engine, KEEP_FROM)
    moved_s = time.perf_counter() - started
    assert [p.name for p in close_partitions(store_engine, NOW, close_after_days=0).closed] == [
        f"raw_gpu_samples_p{day:%Y%m%d}"
    ]
    name = f"raw_gpu_samples_p{day:%Y%m%d}"
    size = _scalar(store_engine, f"SELECT pg_total_relation_size('{name}')")
    rows = _scalar(store_engine, f"SELECT count(*) FROM {name}")
    assert rows == gpus * windows
    per_sample = size / rows
    print(f"backfilled closed day: {size:,} bytes / {rows:,} GPU samples = {per_sample:.1f} bytes each")
    print(f"moved out of DEFAULT (and DEFAULT vacuumed) in {moved_s:.2f} s")
    assert per_sample <= MAX_BYTES_PER_GPU_SAMPLE


def test_sqlite_has_no_partitions_to_give_backfilled_days(tmp_path: Any) -> None:
    from fleet.store.engine import make_engine
    from fleet.store.migrate import upgrade

    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    with writing(engine) as connection:
        write_samples(connection, _backfill())
    assert partition_backfilled_days(engine, KEEP_FROM) == []
    assert _scalar(engine, "SELECT count(*) FROM gpu_samples") == 1299
    engine.dispose()


def test_the_day_to_keep_from_must_be_a_utc_midnight(store_engine: Engine) -> None:
    with pytest.raises(ValueError, match="no time zone"):
        partition_backfilled_days(store_engine, datetime(2026, 3, 8))


@POSTGRES_ONLY
def test_a_day_still_being_written_into_default_is_left_to_the_next_run(store_engine: Engine) -> None:
    """A backfill's transaction holds ``DEFAULT``: the move does not wait behind it (and make every writer
    of ``DEFAULT`` wait behind the move), it leaves the day to the next run."""
    day = BACKFILLED[0]
    with writing(store_engine) as connection:
        write_samples(connection, [gpu_sample(0, _minutes(day, 1))])
    with writing(store_engine) as backfill:
        write_samples(backfill, [gpu_sample(1, _minutes(day, 2))])  # not committed yet
        started = time.perf_counter()
        waiting: list[str] = []
        assert partition_backfilled_days(store_engine, KEEP_FROM, lock_timeout_s=0.2, deferred=waiting) == []
        assert time.perf_counter() - started < 5
        assert waiting == [f"raw_gpu_samples_p{day:%Y%m%d}"]  # reported, so the CLI can say so
    assert [p.name for p in partition_backfilled_days(store_engine, KEEP_FROM)] == [
        f"raw_gpu_samples_p{day:%Y%m%d}"
    ]
    assert _counts(store_engine, "raw_gpu_samples")[f"raw_gpu_samples_p{day:%Y%m%d}"] == 2


@POSTGRES_ONLY
def test_a_day_far_ahead_gets_no_partition(store_engine: Engine) -> None:
    """A collector whose clock says 2036 must not leave a 2036 partition that retention keeps for years."""
    ahead = floor_day(NOW) + 3650 * DAY
    with writing(store_engine) as connection:
        write_samples(
            connection, [gpu_sample(0, _minutes(BACKFILLED[0], 1)), gpu_sample(0, _minutes(ahead, 1))]
        )
    created = partition_backfilled_days(store_engine, KEEP_FROM, until=floor_day(NOW) + 8 * DAY)
    assert [p.name for p in created] == [f"raw_gpu_samples_p{BACKFILLED[0]:%Y%m%d}"]
    assert _counts(store_engine, "raw_gpu_samples")["raw_gpu_samples_default"] == 1


@pytest.mark.parametrize("timeout", [0.0, 0.0004, -1.0])
def test_a_lock_timeout_that_would_wait_forever_is_refused(store_engine: Engine, timeout: float) -> None:
    with pytest.raises(ValueError, match=r"at least 0\.001 s"):
        partition_backfilled_days(store_engine, KEEP_FROM, lock_timeout_s=timeout)
