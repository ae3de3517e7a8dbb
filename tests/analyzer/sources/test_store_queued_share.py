"""How often requests waited in each engine bucket reaches the analyzer the same way from raw samples, from
the rollups (migration 0011) and from a mixed read, as the pure path computes it."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from analyzer.sources.store import read_input
from analyzer.telemetry.grid import aggregate_engine_samples
from fleet.contract import EngineSample
from fleet.store.engine import writing
from fleet.store.retention import refresh_rollups
from fleet.store.writer import write_samples
from tests.fleet.store_factories import T0, engine_sample, gpu_sample

HOUR = timedelta(hours=1)


def _records() -> list[Any]:
    """Worker 0: hour 0 queues in 4 of 6 windows, hour 1 in 1 of 6. Worker 1 reports no queue at all."""
    waiting = {0: [3, 0, 5, 2, 0, 7], 1: [0, 0, 0, 4, 0, 0]}
    records: list[Any] = []
    for hour, queue in waiting.items():
        for step, q in enumerate(queue):
            minute = 60 * hour + 10 * step
            records += [
                engine_sample(0, minute, requests_waiting=q),
                engine_sample(1, minute, requests_waiting=None),
                gpu_sample(0, minute),
            ]
    return records


def _shares(store_engine: Engine) -> dict[tuple[str, float], float]:
    with store_engine.connect() as connection:
        buckets = read_input(connection, T0, T0 + 2 * HOUR).engine_buckets
    return dict(
        zip(zip(buckets["worker_id"], buckets["ts"], strict=True), buckets["queued_share"], strict=True)
    )


def _pure(records: list[Any]) -> dict[tuple[str, float], float]:
    engine = [r for r in records if isinstance(r, EngineSample)]
    columns = {
        "ts": [r.ts.timestamp() for r in engine],
        "worker_id": [r.worker_id for r in engine],
        "role": [r.role.value for r in engine],
        "window_s": [r.window_s for r in engine],
        "prompt_tokens": [r.prompt_tokens for r in engine],
        "generation_tokens": [r.generation_tokens for r in engine],
        "requests_waiting": [r.requests_waiting for r in engine],
    }
    buckets = aggregate_engine_samples(columns)
    keys = zip(buckets["worker_id"], buckets["ts"], strict=True)
    return dict(zip(keys, (float(v) for v in buckets["queued_share"]), strict=True))


def _check(got: dict[tuple[str, float], float], want: dict[tuple[str, float], float]) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        if math.isnan(value):
            assert got[key] is None or math.isnan(got[key]), key  # unknown, never "no queue"
        else:
            assert got[key] == pytest.approx(value), key


def test_raw_rollup_and_mixed_reads_carry_the_share_of_windows_with_a_queue(store_engine: Engine) -> None:
    records = _records()
    with writing(store_engine) as connection:
        write_samples(connection, records)
    want = _pure(records)
    t0 = T0.timestamp()
    assert want[("worker-0", t0)] == pytest.approx(4 / 6)
    assert want[("worker-0", t0 + 3600)] == pytest.approx(1 / 6)
    assert math.isnan(want[("worker-1", t0)])
    _check(_shares(store_engine), want)  # raw samples only
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + HOUR)
    _check(_shares(store_engine), want)  # the first hour from its rollup, the second raw
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + 2 * HOUR)
        minutes = connection.execute(
            text("SELECT count(*), sum(queued_share) FROM engine_samples_1m WHERE queued_share IS NOT NULL")
        ).one()
    _check(_shares(store_engine), want)
    assert tuple(minutes) == (12, 5)  # per minute: worker 0's twelve windows, five of them queued
