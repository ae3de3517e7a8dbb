"""``/v1/workers/{id}/samples`` reads hourly rollups where per-minute ones are past their retention."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine

from fleet.contract import EngineSample, GpuSample
from fleet.store.engine import writing
from fleet.store.retention import apply_retention
from fleet.store.rollup_retention import RollupRetention
from fleet.store.writer import write_samples
from tests.fleet.store_factories import T0, engine_sample, gpu_sample
from tests.phasefit.service.conftest import ClientFactory, FakeClock

DAY, HOUR = timedelta(days=1), timedelta(hours=1)
TIERS = {"raw_retention_days": 1, "rollup_minute_retention_days": 2, "rollup_hour_retention_days": 0}


def _pruned_store(engine: Engine, clock: FakeClock) -> None:
    """Worker 0 and its GPU 0: two hours on day 0 and one on day 3, pruned at day 3 + 2 h with raw samples
    kept a day and per-minute rollups two: day 0 is left in the hourly rollups alone."""
    minutes = [*range(120), *range(3 * 24 * 60, 3 * 24 * 60 + 60)]
    records: list[GpuSample | EngineSample] = []
    for minute in minutes:
        records += [gpu_sample(0, minute), engine_sample(0, minute)]
    with writing(engine) as connection:
        write_samples(connection, records)
    clock.current = T0 + 3 * DAY + 2 * HOUR
    result = apply_retention(
        engine, now=clock.current, retention_days=1, rollup_retention=RollupRetention(2, 0)
    )
    assert result.rollups_expired is not None and result.rollups_expired.per_tier()["1m"] == 2 * 120


def test_old_part_of_a_range_comes_from_hourly_rollups_with_a_notice(
    make_client: ClientFactory, sqlite_engine: Engine, clock: FakeClock
) -> None:
    _pruned_store(sqlite_engine, clock)
    client = make_client(**TIERS)
    params = {"from": T0.isoformat(), "to": (T0 + 3 * DAY + HOUR).isoformat(), "step": "10m"}
    page = client.get("/v1/workers/worker-0/samples", params=params).json()
    assert page["source"] == "rollup-1m"
    assert page["notices"] == [
        "per-minute rollups kept 2 days: before 2026-03-03 14:00 UTC shown from hourly rollups "
        "(one point per hour)"
    ]
    assert [p["samples"] for p in page["engine"]] == [60, 60] + [10] * 6
    hours = [T0, T0 + HOUR]
    tens = [T0 + 3 * DAY + timedelta(minutes=10 * i) for i in range(6)]
    assert [p["ts"] for p in page["engine"]] == [t.isoformat().replace("+00:00", "Z") for t in hours + tens]
    assert page["engine"][0]["prompt_tokens"] == 60 * 1000


def test_a_range_wholly_past_the_per_minute_horizon_is_hourly(
    make_client: ClientFactory, sqlite_engine: Engine, clock: FakeClock
) -> None:
    _pruned_store(sqlite_engine, clock)
    client = make_client(**{**TIERS, "rollup_hour_retention_days": 2})
    params = {"from": (T0 - DAY).isoformat(), "to": (T0 + 2 * HOUR).isoformat(), "step": "5m"}
    page = client.get("/v1/workers/worker-0/samples", params=params).json()
    assert page["source"] == "rollup-1h"
    assert [p["samples"] for p in page["engine"]] == [60, 60]
    assert len(page["notices"]) == 2
    assert page["notices"][1] == "hourly rollups kept 2 days: nothing is kept before 2026-03-03 14:00 UTC"
