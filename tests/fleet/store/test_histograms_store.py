"""Latency histograms in the store: stored as sent (re-binned, encoded), once, and summed into rollups."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, text

from fleet import histograms
from fleet.contract import EngineSample, LatencyHistogram, dump_record
from fleet.ingest import IngestError, ingest_file
from fleet.store import histogram_rollups
from fleet.store.closing import close_partitions
from fleet.store.engine import writing
from fleet.store.lean import RAW_ENGINE_COLUMNS, stored_equal
from fleet.store.partitions import DAY, ensure_partitions
from fleet.store.queries import engine_rollups, engine_samples
from fleet.store.retention import apply_retention, refresh_rollups
from fleet.store.rows import HISTOGRAM_COLUMNS, stored_histogram
from fleet.store.writer import SMALL_BATCH_ROWS, WriteCounts, write_samples
from tests.fleet.store_factories import POSTGRES_ONLY, T0, engine_sample

HOUR = timedelta(hours=1)
TTFT_LE = [0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2]  # a made-up engine's bounds, off the shared grid
TPOT_LE = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1]  # on it


def histogram(le: list[float], seed: int, *, empty_from: int | None = None) -> dict[str, Any]:
    """A window's histogram as the contract carries it (cumulative counts), 6-10 buckets holding counts."""
    rng = np.random.default_rng(seed)
    per_bucket = rng.integers(0, 40, size=len(le)).astype(float)
    if empty_from is not None:
        per_bucket[empty_from:] = 0.0
    counts = np.cumsum(per_bucket)
    return {"le": le, "counts": counts.tolist(), "count": float(counts[-1] + rng.integers(0, 3))}


def with_histograms(worker: int, minute: float, seed: int, *, tpot: bool = True) -> EngineSample:
    fields: dict[str, Any] = {"ttft_histogram": histogram(TTFT_LE, seed), "e2e_histogram": None}
    if tpot:
        fields["tpot_histogram"] = histogram(TPOT_LE, seed + 1, empty_from=4)
    return engine_sample(worker, minute, **fields)


def rebinned(sent: LatencyHistogram | None) -> histograms.FloatArray | None:
    return None if sent is None else histograms.rebin(sent.le, sent.counts, sent.count)


def assert_close(got: histograms.FloatArray | None, want: histograms.FloatArray | None) -> None:
    """Equal to 1e-3 relative (the store keeps 4-byte floats), both None, or neither."""
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got.shape == (histograms.SIZE,)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * max(float(want.sum()), 1.0))


def stored(engine: Engine, worker_id: str) -> dict[str, list[Any]]:
    with engine.connect() as connection:
        return engine_samples(connection, T0 - DAY, T0 + 2 * DAY, worker_ids=[worker_id])


def test_the_raw_table_holds_the_histograms_after_the_other_columns() -> None:
    assert RAW_ENGINE_COLUMNS[-3:] == HISTOGRAM_COLUMNS


def test_a_binary_value_read_back_as_a_memoryview_is_the_value_sent() -> None:
    sent = stored_histogram(LatencyHistogram.model_validate(histogram(TTFT_LE, 1)))
    assert sent is not None
    for dialect in ("sqlite", "postgresql"):
        assert stored_equal(dialect, "ttft_histogram", memoryview(sent), sent)
        assert stored_equal(dialect, "ttft_histogram", sent, bytes(sent))
        assert not stored_equal(dialect, "ttft_histogram", memoryview(sent), sent[:-1] + b"\x00")
        assert not stored_equal(dialect, "ttft_histogram", None, sent)


@pytest.mark.parametrize("count", [3, SMALL_BATCH_ROWS + 10])  # PostgreSQL: one unnest INSERT, then COPY
def test_written_histograms_are_stored_as_sent_and_a_resend_stores_nothing_twice(
    store_engine: Engine, count: int
) -> None:
    records = [
        with_histograms(i % 7, i / 7, seed=i, tpot=i % 3 != 0) if i % 5 else engine_sample(i % 7, i / 7)
        for i in range(count)
    ]
    with writing(store_engine) as connection:
        assert write_samples(connection, records) == WriteCounts(stored=count)
    with writing(store_engine) as connection:
        assert write_samples(connection, records) == WriteCounts(duplicates=count)
    for worker in (0, 1):
        read = stored(store_engine, f"worker-{worker}")
        sent = [r for r in records if r.worker_id == f"worker-{worker}"]
        assert len(read["ts"]) == len(sent)
        for name in HISTOGRAM_COLUMNS:
            for value, record in zip(read[name], sent, strict=True):
                assert_close(histograms.decode(value), rebinned(getattr(record, name)))
    with store_engine.connect() as connection:
        held = connection.execute(
            text("SELECT count(*) FROM raw_engine_samples WHERE ttft_histogram IS NOT NULL")
        ).scalar_one()
    assert held == sum(1 for r in records if r.ttft_histogram is not None)


def test_ingested_histograms_are_stored_once_and_another_histogram_for_a_stored_key_is_refused(
    store_engine: Engine, tmp_path: Path
) -> None:
    records = [with_histograms(w, m, seed=10 * w + m) for w in range(3) for m in range(4)]
    records.append(engine_sample(3, 0))  # no histogram: unknown
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(dump_record(r) + "\n" for r in records))
    line = json.loads(dump_record(records[0]))
    assert line["ttft_histogram"]["le"] == TTFT_LE  # as the contract carries it

    first = ingest_file(store_engine, path, jobs=0)
    again = ingest_file(store_engine, path, jobs=0)
    assert (first.engine_samples, first.stored, first.duplicates) == (13, 13, 0)
    assert (again.stored, again.duplicates) == (0, 13)
    read = stored(store_engine, "worker-1")
    for name in HISTOGRAM_COLUMNS:
        sent = [getattr(r, name) for r in records if r.worker_id == "worker-1"]
        for value, histogram_sent in zip(read[name], sent, strict=True):
            assert_close(histograms.decode(value), rebinned(histogram_sent))
    assert stored(store_engine, "worker-3")["ttft_histogram"] == [None]

    line["ttft_histogram"] = histogram(TTFT_LE, 999)  # the same key, another histogram
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps(line) + "\n")
    with pytest.raises(IngestError, match="ttft_histogram"):
        ingest_file(store_engine, changed, jobs=0)


def _fill(engine: Engine) -> list[EngineSample]:
    """Two hours: worker 0 every 20 s with histograms (TPOT in every third window only), worker 1 every
    minute without any; worker 2 with histograms in its first hour only."""
    records: list[EngineSample] = []
    for step in range(360):
        minute = step / 3
        records.append(with_histograms(0, minute, seed=step, tpot=step % 3 == 0))
        if step % 3 == 0:
            records.append(engine_sample(1, minute))
            records.append(
                with_histograms(2, minute, seed=1000 + step) if minute < 60 else engine_sample(2, minute)
            )
    with writing(engine) as connection:
        write_samples(connection, records)
    return records


def _expected(records: list[EngineSample], worker: str, since: Any, width: timedelta, name: str) -> Any:
    return histograms.merged(
        rebinned(getattr(r, name)) for r in records if r.worker_id == worker and since <= r.ts < since + width
    )


def test_rollups_hold_the_bucket_wise_sum_of_their_windows_histograms(
    store_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _fill(store_engine)
    monkeypatch.setattr(histogram_rollups, "CHUNK_ROWS", 7)  # several fetches and updates per hour
    with writing(store_engine) as connection:
        written = refresh_rollups(connection, T0, T0 + 2 * HOUR)
    assert written["engine_samples_1m"] == 3 * 120 and written["engine_samples_1h"] == 3 * 2
    with store_engine.connect() as connection:
        minutes = engine_rollups(connection, "1m", T0, T0 + 2 * HOUR)
        hours = engine_rollups(connection, "1h", T0, T0 + 2 * HOUR)
    for read, width in ((minutes, timedelta(minutes=1)), (hours, HOUR)):
        for i, (worker, ts) in enumerate(zip(read["worker_id"], read["ts"], strict=True)):
            since = T0 + timedelta(seconds=ts - T0.timestamp())
            for name in HISTOGRAM_COLUMNS:
                assert_close(histograms.decode(read[name][i]), _expected(records, worker, since, width, name))
    by_worker = {w: [i for i, x in enumerate(hours["worker_id"]) if x == w] for w in ("worker-0", "worker-1")}
    assert all(hours["e2e_histogram"][i] is None for i in range(len(hours["ts"])))  # never sent: unknown
    assert all(hours["ttft_histogram"][i] is None for i in by_worker["worker-1"])
    assert all(hours["ttft_histogram"][i] is not None for i in by_worker["worker-0"])
    worker_2 = [hours["ttft_histogram"][i] for i, x in enumerate(hours["worker_id"]) if x == "worker-2"]
    assert worker_2[0] is not None and worker_2[1] is None  # a bucket without a histogram stays NULL
    # the sum is the sum: an hour holds 180 windows of worker 0's TTFT, all counted
    total = sum(
        r.ttft_histogram.count
        for r in records
        if r.ttft_histogram is not None and r.worker_id == "worker-0" and r.ts < T0 + HOUR
    )
    decoded = histograms.decode(hours["ttft_histogram"][by_worker["worker-0"][0]])
    assert decoded is not None and float(decoded.sum()) == pytest.approx(total, rel=1e-6)

    with writing(store_engine) as connection:  # recomputed: the same sums, not added twice
        refresh_rollups(connection, T0, T0 + 2 * HOUR)
    with store_engine.connect() as connection:
        assert (
            engine_rollups(connection, "1h", T0, T0 + 2 * HOUR)["ttft_histogram"] == hours["ttft_histogram"]
        )


def test_a_prune_rolls_up_histograms_before_the_raw_rows_go(store_engine: Engine) -> None:
    records = _fill(store_engine)
    result = apply_retention(store_engine, now=T0 + 20 * DAY, retention_days=14)
    assert result.deleted["engine_samples"] == len(records)
    with store_engine.connect() as connection:
        hours = engine_rollups(connection, "1h", T0, T0 + 2 * HOUR, worker_ids=["worker-0"])
    for i, ts in enumerate(hours["ts"]):
        since = T0 + timedelta(seconds=ts - T0.timestamp())
        for name in HISTOGRAM_COLUMNS:
            assert_close(histograms.decode(hours[name][i]), _expected(records, "worker-0", since, HOUR, name))


@POSTGRES_ONLY
def test_histograms_written_into_a_closed_day_are_stored_once(store_engine: Engine) -> None:
    ensure_partitions(store_engine, T0, days_ahead=1)
    records = [with_histograms(w, m, seed=m) for w in range(2) for m in range(3)]
    with writing(store_engine) as connection:
        assert write_samples(connection, records[:3]) == WriteCounts(stored=3)
    close_partitions(store_engine, T0 + 2 * DAY, close_after_days=1)
    with writing(store_engine) as connection:  # stored ones again, and new ones, into the closed day
        assert write_samples(connection, records) == WriteCounts(stored=3, duplicates=3)
    for record in records:
        (value,) = stored(store_engine, record.worker_id)["ttft_histogram"][
            record.ts.minute : record.ts.minute + 1
        ]
        assert_close(histograms.decode(value), rebinned(record.ttft_histogram))
