"""Closed day partitions (PostgreSQL): a BRIN index instead of the unique one, exactly-once all the same."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from fleet.contract import EngineSample, GpuSample
from fleet.store.closing import (
    close_partition,
    close_partitions,
    closing_horizon,
    day_number,
    days_between,
    lock_days_and_find_closed,
)
from fleet.store.engine import writing
from fleet.store.partitions import DAY, ensure_partitions, list_partitions, partition_sizes
from fleet.store.rows import batch_from_records
from fleet.store.writer import WriteCounts, write_sample_rows, write_samples
from tests.fleet.store_factories import POSTGRES_ONLY, T0, engine_sample, gpu_sample

MONDAY = datetime(2026, 3, 2, tzinfo=UTC)  # T0's day


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql)).scalar()


def _indexes(engine: Engine, partition: str) -> list[tuple[str, str]]:
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT i.relname, am.amname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "JOIN pg_am am ON am.oid = i.relam WHERE x.indrelid = CAST(:name AS regclass) ORDER BY 1"
            ),
            {"name": partition},
        ).all()
    return [(name, method) for name, method in rows]


def _day(records: int = 4, minute: float = 0) -> list[GpuSample | EngineSample]:
    return [gpu_sample(g, minute + m) for g in range(records) for m in range(3)] + [engine_sample(0, minute)]


# --- pure ----------------------------------------------------------------------------------------------


def test_the_horizon_keeps_today_and_the_days_before_it_open() -> None:
    evening = datetime(2026, 3, 4, 22, 0, tzinfo=UTC)
    assert closing_horizon(evening, 1) == datetime(2026, 3, 3, tzinfo=UTC)  # Monday closes, Tuesday stays
    assert closing_horizon(evening, 0) == datetime(2026, 3, 4, tzinfo=UTC)
    with pytest.raises(ValueError, match="close_after_days must be 0 or more"):
        closing_horizon(evening, -1)
    assert days_between(T0, T0 + timedelta(hours=13)) == [MONDAY, MONDAY + DAY]
    assert days_between(T0, T0) == [MONDAY]
    assert day_number(datetime(1970, 1, 2, 5, tzinfo=UTC)) == 1 and day_number(T0) == day_number(MONDAY)


# --- closing ---------------------------------------------------------------------------------------------


@POSTGRES_ONLY
def test_days_behind_the_horizon_trade_their_unique_index_for_a_brin_one(store_engine: Engine) -> None:
    ensure_partitions(store_engine, MONDAY, days_ahead=3)  # Monday to Thursday
    with writing(store_engine) as connection:
        write_samples(connection, _day())

    result = close_partitions(store_engine, datetime(2026, 3, 4, 9, tzinfo=UTC), close_after_days=1)
    assert sorted(p.name for p in result.closed) == [
        "raw_engine_samples_p20260302",
        "raw_gpu_samples_p20260302",
    ]
    assert result.deferred == []
    assert _indexes(store_engine, "raw_gpu_samples_p20260302") == [("raw_gpu_samples_p20260302_ts", "brin")]
    assert _indexes(store_engine, "raw_gpu_samples_p20260303") == [("raw_gpu_samples_p20260303_key", "btree")]
    assert _indexes(store_engine, "raw_gpu_samples_default") == [("raw_gpu_samples_default_key", "btree")]
    with store_engine.connect() as connection:
        states = {s.partition.name: s.open for s in partition_sizes(connection, "raw_gpu_samples")}
    assert states["raw_gpu_samples_p20260302"] is False and states["raw_gpu_samples_p20260303"] is True
    # again: nothing left to close; a day later, Tuesday's turn
    assert close_partitions(store_engine, datetime(2026, 3, 4, 23, tzinfo=UTC), 1).closed == []
    later = close_partitions(store_engine, datetime(2026, 3, 5, 0, 1, tzinfo=UTC), 1).closed
    assert {p.name for p in later} == {"raw_gpu_samples_p20260303", "raw_engine_samples_p20260303"}
    with store_engine.connect() as connection:
        monday = list_partitions(connection, "raw_gpu_samples")[0]
    with writing(store_engine) as connection:
        assert close_partition(connection, monday) is False
    assert _scalar(store_engine, "SELECT count(*) FROM gpu_samples") == 12  # nothing lost


@POSTGRES_ONLY
def test_closed_days_are_read_from_the_catalog_and_a_day_without_partition_follows_default(
    store_engine: Engine,
) -> None:
    ensure_partitions(store_engine, MONDAY, days_ahead=1)
    close_partitions(store_engine, MONDAY + 3 * DAY, close_after_days=2)  # closes Monday only
    days = [MONDAY, MONDAY + DAY, MONDAY + 5 * DAY]  # closed, open, no partition (DEFAULT, open)
    with writing(store_engine) as connection:
        closed = lock_days_and_find_closed(connection, days)
        assert closed == {"raw_gpu_samples": {MONDAY}, "raw_engine_samples": {MONDAY}}


@POSTGRES_ONLY
def test_writes_into_a_closed_day_stay_exactly_once(store_engine: Engine) -> None:
    ensure_partitions(store_engine, MONDAY, days_ahead=1)
    first = _day()
    with writing(store_engine) as connection:
        assert write_samples(connection, first) == WriteCounts(stored=13)
    close_partitions(store_engine, MONDAY + 2 * DAY, close_after_days=1)
    assert _indexes(store_engine, "raw_gpu_samples_p20260302")[0][1] == "brin"

    with writing(store_engine) as connection:  # the same records again: all duplicates
        assert write_samples(connection, first) == WriteCounts(duplicates=13)
    # stored, new, repeated within the batch, and a new one on the open day after: each counted once
    mixed = [*first[:5], gpu_sample(9, 1), gpu_sample(9, 1), gpu_sample(9, 13 * 60), engine_sample(3, 2)]
    with writing(store_engine) as connection:
        assert write_samples(connection, mixed) == WriteCounts(stored=3, duplicates=6)
    # a bulk load that assumes new data does not bypass the check on a closed day
    with writing(store_engine) as connection:
        batch = batch_from_records([*first, gpu_sample(10, 2)], "datetime")
        assert write_sample_rows(connection, batch, assume_new=True) == WriteCounts(stored=1, duplicates=13)
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_p20260302") == 12 + 2
    assert _scalar(store_engine, "SELECT count(*) FROM raw_gpu_samples_p20260303") == 1
    assert _scalar(store_engine, "SELECT count(*) FROM raw_engine_samples") == 2
    duplicated = (
        "SELECT count(*) FROM (SELECT 1 FROM raw_gpu_samples GROUP BY ts, gpu_key HAVING count(*) > 1) d"
    )
    assert _scalar(store_engine, duplicated) == 0


@POSTGRES_ONLY
def test_two_writers_of_the_same_batch_into_a_closed_day_store_it_once(store_engine: Engine) -> None:
    ensure_partitions(store_engine, MONDAY, days_ahead=0)
    close_partitions(store_engine, MONDAY + 2 * DAY, close_after_days=1)
    records = [gpu_sample(gpu, minute) for gpu in range(8) for minute in range(10)]
    results: dict[str, WriteCounts] = {}
    start = threading.Barrier(2)

    def write(name: str) -> None:
        start.wait(10)
        with writing(store_engine) as connection:
            results[name] = write_samples(connection, records)

    threads = [threading.Thread(target=write, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results.values(), key=lambda c: c.stored) == [
        WriteCounts(duplicates=80),
        WriteCounts(stored=80),
    ]
    assert _scalar(store_engine, "SELECT count(*) FROM gpu_samples") == 80


@POSTGRES_ONLY
def test_a_day_being_written_is_not_closed_under_the_writer_but_left_for_the_next_run(
    store_engine: Engine,
) -> None:
    ensure_partitions(store_engine, MONDAY, days_ahead=0)
    writer_in = threading.Event()
    release = threading.Event()

    def writer() -> None:
        with writing(store_engine) as connection:
            write_samples(connection, _day())
            writer_in.set()
            release.wait(10)  # holds Monday's lock until it commits

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert writer_in.wait(10)
        result = close_partitions(store_engine, MONDAY + 2 * DAY, 1, lock_timeout_s=0.2)
        assert result.closed == [] and {p.name for p in result.deferred} == {
            "raw_gpu_samples_p20260302",
            "raw_engine_samples_p20260302",
        }
    finally:
        release.set()
        thread.join(30)
    assert len(close_partitions(store_engine, MONDAY + 2 * DAY, 1).closed) == 2
    with writing(store_engine) as connection:
        assert write_samples(connection, _day()) == WriteCounts(duplicates=13)


def test_sqlite_has_nothing_to_close(tmp_path: Any) -> None:
    from fleet.store.engine import make_engine
    from fleet.store.migrate import upgrade

    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    assert close_partitions(engine, MONDAY + 9 * DAY, 0).closed == []
    engine.dispose()


@POSTGRES_ONLY
def test_first_and_last_samples_are_exact_across_closed_open_and_default_partitions(
    store_engine: Engine,
) -> None:
    from fleet.store.time_span import raw_time_range

    ensure_partitions(store_engine, MONDAY, days_ahead=1)  # Monday, Tuesday; Wednesday lands in DEFAULT
    minutes = [5 * 60 + 7, 9 * 60, 23 * 60 + 59, 24 * 60 + 1, 36 * 60, 48 * 60 + 30]  # from T0 (12:00)
    with writing(store_engine) as connection:
        write_samples(connection, [gpu_sample(0, m) for m in minutes])
    close_partitions(store_engine, MONDAY + 2 * DAY, close_after_days=1)  # Monday closes

    def plain(before: datetime | None) -> Any:
        where = "" if before is None else " WHERE ts < :before"
        with store_engine.connect() as connection:
            found = tuple(
                connection.execute(
                    text(f"SELECT min(ts), max(ts) FROM raw_gpu_samples{where}"), {"before": before}
                ).one()
            )
        return None if found == (None, None) else found

    for before in (
        None,
        T0 + timedelta(minutes=300),
        T0 + timedelta(minutes=5 * 60 + 8),
        T0 + DAY,
        T0 + 3 * DAY,
    ):
        with store_engine.connect() as connection:
            assert raw_time_range(connection, "raw_gpu_samples", before=before) == plain(before), before
    with store_engine.connect() as connection:
        assert raw_time_range(connection, "raw_gpu_samples", before=T0) is None
        assert raw_time_range(connection, "raw_engine_samples") is None
