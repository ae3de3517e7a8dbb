"""The store reader hands the analyzer each engine bucket's latency histograms, summed over the bucket, from
raw samples and from hourly rollups alike."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine

from analyzer.sources.store import ENGINE_READ_COLUMNS, read_input
from analyzer.telemetry.grid import ENGINE_BUCKET_COLUMNS
from analyzer.telemetry.latency_cells import as_counts
from fleet import histograms
from fleet.contract import EngineSample, GpuSample, LatencyHistogram
from fleet.store.engine import writing
from fleet.store.queries import rolled_up_until
from fleet.store.retention import refresh_rollups
from fleet.store.rows import HISTOGRAM_COLUMNS
from fleet.store.writer import write_samples
from tests.fleet.store_factories import T0, engine_sample, gpu_sample

HOUR = timedelta(hours=1)
LE = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


def _histogram(seed: int) -> dict[str, Any]:
    per_bucket = np.random.default_rng(seed).integers(0, 50, size=len(LE)).astype(float)
    counts = np.cumsum(per_bucket)
    return {"le": LE, "counts": counts.tolist(), "count": float(counts[-1]) + 2.0}


def _records() -> list[GpuSample | EngineSample]:
    """Three hours, a window every 10 minutes: worker 0 with TTFT and TPOT histograms, worker 1 with TTFT
    only, worker 2 with none; a GPU sample beside each (the reader uses rollups only where both exist)."""
    records: list[GpuSample | EngineSample] = []
    for step in range(18):
        minute = 10 * step
        records += [
            engine_sample(0, minute, ttft_histogram=_histogram(step), tpot_histogram=_histogram(100 + step)),
            engine_sample(1, minute, ttft_histogram=_histogram(200 + step)),
            engine_sample(2, minute),
            gpu_sample(0, minute),
        ]
    return records


def _expected(records: list[Any], worker: str, start: datetime, name: str) -> Any:
    sent: list[LatencyHistogram | None] = [
        getattr(r, name)
        for r in records
        if isinstance(r, EngineSample) and r.worker_id == worker and start <= r.ts < start + HOUR
    ]
    return histograms.merged(None if h is None else histograms.rebin(h.le, h.counts, h.count) for h in sent)


def _check(store_engine: Engine, records: list[Any]) -> None:
    with store_engine.connect() as connection:
        data = read_input(connection, T0, T0 + 3 * HOUR)
    buckets = data.engine_buckets
    assert tuple(buckets) == ENGINE_READ_COLUMNS == (*ENGINE_BUCKET_COLUMNS, *HISTOGRAM_COLUMNS)
    assert {len(values) for values in buckets.values()} == {9}  # 3 workers x 3 hours
    for i, (worker, ts) in enumerate(zip(buckets["worker_id"], buckets["ts"], strict=True)):
        start = T0 + timedelta(seconds=float(ts) - T0.timestamp())
        for name in HISTOGRAM_COLUMNS:
            got, want = buckets[name][i], _expected(records, worker, start, name)
            assert (got is None) == (want is None), (worker, start, name)
            if want is not None:
                counts = as_counts(got)  # stored bytes or summed counts: what the grid takes
                assert counts is not None and counts.shape == (histograms.SIZE,)
                np.testing.assert_allclose(counts, want, rtol=1e-3, atol=1e-3)
    held = {
        (w, n): buckets[n][i] is not None
        for i, w in enumerate(buckets["worker_id"])
        for n in HISTOGRAM_COLUMNS
    }
    assert held[("worker-0", "tpot_histogram")] and not held[("worker-1", "tpot_histogram")]
    assert not any(held[("worker-2", name)] for name in HISTOGRAM_COLUMNS)


def test_raw_rollup_and_mixed_reads_carry_the_buckets_summed_histograms(store_engine: Engine) -> None:
    records = _records()
    with writing(store_engine) as connection:
        write_samples(connection, records)
    _check(store_engine, records)  # raw samples only
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + 2 * HOUR)
        assert rolled_up_until(connection) == T0 + 2 * HOUR
    _check(store_engine, records)  # two hours from rollups, the third from raw samples
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + 3 * HOUR)
    _check(store_engine, records)


def test_a_read_without_histograms_has_the_columns_all_unknown(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        write_samples(connection, [engine_sample(0, 0), engine_sample(0, 70)])
    with store_engine.connect() as connection:
        buckets = read_input(connection, T0, T0 + 2 * HOUR).engine_buckets
    assert [buckets[name] for name in HISTOGRAM_COLUMNS] == [[None, None]] * 3
    with store_engine.connect() as connection:
        empty = read_input(connection, T0 + 5 * HOUR, T0 + 6 * HOUR).engine_buckets
    assert all(empty[name] == [] for name in HISTOGRAM_COLUMNS)


def test_raw_reads_at_a_finer_bucket_sum_each_bucket_apart(store_engine: Engine) -> None:
    records = [engine_sample(0, m, ttft_histogram=_histogram(m)) for m in range(0, 30, 5)]
    with writing(store_engine) as connection:
        write_samples(connection, records)
    with store_engine.connect() as connection:
        buckets = read_input(connection, T0, T0 + HOUR, bucket_s=900.0).engine_buckets
    order = sorted(range(2), key=buckets["ts"].__getitem__)  # the GROUP BY's rows come in any order
    assert [buckets["ts"][i] for i in order] == [T0.timestamp(), T0.timestamp() + 900.0]
    for i, part in zip(order, (records[:3], records[3:]), strict=True):
        want = histograms.merged(
            histograms.rebin(r.ttft_histogram.le, r.ttft_histogram.counts, r.ttft_histogram.count)
            for r in part
            if r.ttft_histogram is not None
        )
        assert want is not None
        np.testing.assert_allclose(as_counts(buckets["ttft_histogram"][i]), want, rtol=1e-3)
