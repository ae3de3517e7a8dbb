"""Revision 0010: the windows' latency histograms, raw and in the engine rollups, nullable byte strings."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text

from fleet import histograms
from fleet.store import migrate
from fleet.store.columns import to_epoch_us
from fleet.store.engine import make_engine

HISTOGRAMS = ("ttft_histogram", "tpot_histogram", "e2e_histogram")
TABLES = ("raw_engine_samples", "engine_samples_1m", "engine_samples_1h")
DAY0 = datetime(2026, 3, 2, 23, 59, tzinfo=UTC)


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


def _view(engine: Engine, columns: str) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        statement = text(f"SELECT {columns} FROM engine_samples ORDER BY ts")
        return [
            tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
            for row in connection.execute(statement)
        ]


def _columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_0010_adds_the_histograms_unknown_for_stored_samples_and_its_downgrade_drops_only_them(
    engine: Engine,
) -> None:
    migrate.upgrade(engine, "0009")
    at = DAY0 if engine.dialect.name == "postgresql" else to_epoch_us(DAY0)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO worker_keys (id, worker_id) VALUES (1, 'worker-a')"))
        connection.execute(
            text(
                "INSERT INTO raw_engine_samples (ts, worker_key, window_s, prompt_tokens, generation_tokens, "
                "ttft_p50_s, ttft_p90_s, role, role_source) VALUES (:at, 1, 60, 10, 20, 0.25, 0.5, 1, 0)"
            ),
            {"at": at},
        )
    kept = "worker_id, role, prompt_tokens, ttft_p50_s, ttft_p90_s"
    before = _view(engine, kept)
    assert before == [("worker-a", "decode", 10, 0.25, 0.5)]
    assert not any(set(HISTOGRAMS) & _columns(engine, table) for table in TABLES)

    migrate.upgrade(engine, "0010")
    assert migrate.current_revision(engine) == "0010"
    names = ", ".join(HISTOGRAMS)
    assert _view(engine, f"{kept}, {names}") == [(*before[0], None, None, None)]  # unknown, never empty
    assert all(set(HISTOGRAMS) <= _columns(engine, table) for table in TABLES)
    counts = histograms.rebin([0.1, 0.2, 0.4], [1, 5, 9], 10)
    encoded = histograms.encode(counts)
    with engine.begin() as connection:
        connection.execute(text("UPDATE raw_engine_samples SET tpot_histogram = :h"), {"h": encoded})
    ((held,),) = _view(engine, "tpot_histogram")
    assert held == encoded
    decoded = histograms.decode(held)
    assert decoded is not None and float(decoded.sum()) == pytest.approx(10.0)

    migrate.downgrade(engine, "0009")
    assert not any(set(HISTOGRAMS) & _columns(engine, table) for table in TABLES)
    assert _view(engine, kept) == before
    assert [c["name"] for c in inspect(engine).get_columns("engine_samples")][-3:] == [
        "ttft_p90_s",
        "tpot_p90_s",
        "e2e_p90_s",
    ]
    migrate.upgrade(engine)  # and up again: the histograms the downgrade dropped are unknown
    assert _view(engine, names) == [(None, None, None)]
