"""Revision 0011: the engine rollups' queued share, nullable (buckets rolled up before it read as unknown)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, inspect, text

from fleet.store import migrate
from fleet.store.engine import make_engine

ROLLUPS = ("engine_samples_1m", "engine_samples_1h")


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


def _has_share(engine: Engine, table: str) -> bool:
    return "queued_share" in {c["name"] for c in inspect(engine).get_columns(table)}


def test_0011_adds_the_share_unknown_for_rolled_up_buckets_and_its_downgrade_drops_only_it(
    engine: Engine,
) -> None:
    migrate.upgrade(engine, "0010")
    insert = text(
        "INSERT INTO engine_samples_1h (worker_id, bucket, samples, window_s_sum, prompt_tokens_sum, "
        "generation_tokens_sum, requests_waiting_avg) VALUES ('worker-a', :at, 6, 360, 10, 20, 2.5)"
    )
    with engine.begin() as connection:
        connection.execute(insert, {"at": "2026-03-02 10:00:00"})
    assert not any(_has_share(engine, table) for table in ROLLUPS)

    migrate.upgrade(engine, "0011")
    assert all(_has_share(engine, table) for table in ROLLUPS)
    read = text("SELECT worker_id, requests_waiting_avg, queued_share FROM engine_samples_1h")
    with engine.connect() as connection:
        assert [tuple(row) for row in connection.execute(read)] == [("worker-a", 2.5, None)]

    migrate.downgrade(engine, "0010")
    assert not any(_has_share(engine, table) for table in ROLLUPS)
    with engine.connect() as connection:
        kept = connection.execute(text("SELECT worker_id, requests_waiting_avg FROM engine_samples_1h"))
        assert [tuple(row) for row in kept] == [("worker-a", 2.5)]
