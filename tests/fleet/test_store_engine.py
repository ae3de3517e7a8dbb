"""Engines, write transactions and the UTC timestamp column."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, insert, select, text

from fleet.store.columns import from_epoch_us, to_epoch_us
from fleet.store.engine import is_sqlite, make_engine, writing
from fleet.store.schema import NodeRow, table_of


def test_sqlite_engine_creates_the_folder_and_sets_wal_foreign_keys_and_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'a' / 'b' / 'store.db'}", busy_timeout_ms=1234)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1234
    assert (tmp_path / "a" / "b" / "store.db").exists()
    engine.dispose()


def test_epoch_microseconds_are_exact_and_refuse_naive_datetimes() -> None:
    moment = datetime(2026, 3, 2, 12, 0, 0, 123456, tzinfo=UTC)
    assert to_epoch_us(moment) == 1772452800123456
    assert from_epoch_us(to_epoch_us(moment)) == moment
    assert to_epoch_us(moment.astimezone(timezone(timedelta(hours=-5)))) == to_epoch_us(moment)
    with pytest.raises(ValueError, match="naive"):
        to_epoch_us(datetime(2026, 3, 2, 12, 0))


def test_timestamps_round_trip_as_utc_and_sort_by_instant(store_engine: Engine) -> None:
    eastern = timezone(timedelta(hours=-5))
    later_local = datetime(2026, 3, 2, 8, 0, tzinfo=eastern)  # 13:00 UTC
    earlier_utc = datetime(2026, 3, 2, 12, 30, tzinfo=UTC)
    with writing(store_engine) as connection:
        connection.execute(
            insert(table_of(NodeRow)),
            [
                {"name": "late", "first_seen": later_local, "last_seen": later_local},
                {"name": "early", "first_seen": earlier_utc, "last_seen": earlier_utc},
            ],
        )
    with store_engine.connect() as connection:
        rows = connection.execute(select(NodeRow.name, NodeRow.first_seen).order_by(NodeRow.first_seen)).all()
    assert [name for name, _ in rows] == ["early", "late"]
    assert rows[1][1] == later_local and rows[1][1].tzinfo == UTC
    with pytest.raises(Exception, match="naive"), writing(store_engine) as connection:
        naive = datetime(2026, 3, 2, 12, 0)
        connection.execute(insert(table_of(NodeRow)).values(name="naive", first_seen=naive, last_seen=naive))


def test_a_failed_write_transaction_leaves_nothing(store_engine: Engine) -> None:
    moment = datetime(2026, 3, 2, tzinfo=UTC)
    with pytest.raises(RuntimeError), writing(store_engine) as connection:
        connection.execute(insert(table_of(NodeRow)).values(name="n", first_seen=moment, last_seen=moment))
        raise RuntimeError("crash mid-batch")
    with store_engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(table_of(NodeRow))).scalar_one() == 0


def test_sqlite_write_transactions_take_the_write_lock_up_front(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}", busy_timeout_ms=50)
    other = make_engine(f"sqlite:///{tmp_path / 'store.db'}", busy_timeout_ms=50)
    assert is_sqlite(engine)
    with writing(engine) as connection:
        connection.execute(text("CREATE TABLE t (x INTEGER)"))
    with writing(engine), pytest.raises(Exception, match="locked"), writing(other):
        pass  # BEGIN IMMEDIATE in the second writer waits the busy timeout, then gives up
    engine.dispose()
    other.dispose()
