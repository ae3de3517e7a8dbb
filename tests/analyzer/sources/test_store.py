from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.sources.store import read_input, store_summary, write_result
from fleet.catalog import load_catalog
from fleet.contract import EngineSample, FindingStatus, GpuSample
from fleet.ingest import catalog_sku_resolver
from fleet.store.analysis import latest_analysis
from fleet.store.engine import writing
from fleet.store.findings import list_findings
from fleet.store.queries import rolled_up_until
from fleet.store.retention import refresh_rollups
from fleet.store.schema import FindingRow
from fleet.store.writer import write_samples
from tests.analyzer.synthetic import H100, H100_1G, H200, START, UTILISATION, Fleet, Worker, workers

CATALOG = load_catalog()
T0 = datetime.fromtimestamp(START, tz=UTC)


def _records(columns: dict[str, Any], kind: type[GpuSample] | type[EngineSample]) -> list[Any]:
    names = [k for k in columns if k != "ts"]
    out = []
    for i, ts in enumerate(columns["ts"]):
        values = {k: columns[k][i] for k in names}
        out.append(kind(ts=datetime.fromtimestamp(float(ts), tz=UTC), **values))
    return out


def _store(engine: Engine, fleet: Fleet) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu, eng = fleet.columns()
    with writing(engine) as connection:
        write_samples(
            connection,
            _records(gpu, GpuSample) + _records(eng, EngineSample),
            sku_resolver=catalog_sku_resolver(),
        )
    return gpu, eng


def _fleet(**kwargs: Any) -> Fleet:
    return Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=10,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
        **kwargs,
    )


def _read(engine: Engine, hours: float = 10.0) -> AnalysisResult:
    with engine.connect() as connection:
        data = read_input(connection, T0, T0 + timedelta(hours=hours))
    return analyze(data, CATALOG)


def _same(a: AnalysisResult, b: AnalysisResult) -> None:
    assert [(f.kind, f.worker_id, f.pool, f.status, f.first_seen, f.last_seen) for f in a.findings] == [
        (f.kind, f.worker_id, f.pool, f.status, f.first_seen, f.last_seen) for f in b.findings
    ]
    for x, y in zip(a.findings, b.findings, strict=True):  # sums in another order differ in the last bits
        # PostgreSQL keeps ratios and gauges as 4-byte floats: the store path agrees to 7 digits, not 9.
        assert x.lost_tokens_per_s == pytest.approx(y.lost_tokens_per_s, rel=1e-6)
        assert x.lost_tokens_per_s_low == pytest.approx(y.lost_tokens_per_s_low, rel=1e-6)
        assert x.lost_tokens_per_s_high == pytest.approx(y.lost_tokens_per_s_high, rel=1e-6)
    lost = (a.summary["fleet"]["lost"]["tokens_per_s"], b.summary["fleet"]["lost"]["tokens_per_s"])
    assert lost[0]["value"] == pytest.approx(lost[1]["value"], rel=1e-6)
    for key in ("capacity_tokens_per_s", "demand_tokens_per_s", "misplaced_workers"):
        assert a.summary["fleet"][key] == pytest.approx(b.summary["fleet"][key], rel=1e-6), key


def test_raw_rollup_and_mixed_reads_agree_with_the_pure_path(store_engine: Engine) -> None:
    gpu, eng = _store(store_engine, _fleet())
    end = T0.timestamp() + 10 * 3600
    pure = analyze(input_from_samples(gpu, eng, start=T0.timestamp(), end=end), CATALOG)
    assert pure.findings, "the fleet is inverted: there is something to find"
    raw = _read(store_engine)
    _same(raw, pure)
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + timedelta(hours=4))  # rolled up to 04:00, raw after
        assert rolled_up_until(connection) == T0 + timedelta(hours=4)
    _same(_read(store_engine), pure)
    with writing(store_engine) as connection:
        refresh_rollups(connection, T0, T0 + timedelta(hours=11))
    _same(_read(store_engine), pure)


def test_findings_are_deduplicated_across_runs_and_resolved_when_gone(store_engine: Engine) -> None:
    _store(store_engine, _fleet())
    result = _read(store_engine)
    now = T0 + timedelta(hours=10)
    with writing(store_engine) as connection:
        first = write_result(connection, result, now=now)
    assert first.inserted == len(result.findings) and first.updated == 0 and first.resolved == 0
    with writing(store_engine) as connection:
        again = write_result(connection, result, now=now + timedelta(hours=1))
        assert again.inserted == 0 and again.updated == len(result.findings)
        rows = connection.execute(select(func.count()).select_from(FindingRow)).scalar_one()
    assert rows == len(result.findings)
    # A later run that no longer sees the problem resolves every finding it had opened.
    fixed = analyze(
        input_from_samples(
            *Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=4).columns()
        ),
        CATALOG,
    )
    assert not [f for f in fixed.findings if f.worker_id]
    with writing(store_engine) as connection:
        last = write_result(connection, fixed, now=now + timedelta(hours=2))
        stored = list_findings(connection)
    assert last.resolved == len(result.findings)
    earlier = {(f.kind, f.worker_id, f.pool) for f in result.findings}
    assert all(
        s.finding.status is FindingStatus.RESOLVED
        for s in stored
        if (s.finding.kind, s.finding.worker_id, s.finding.pool) in earlier
    )


def test_read_input_refuses_naive_or_empty_ranges(store_engine: Engine) -> None:
    with store_engine.connect() as connection, pytest.raises(ValueError, match="timezone-aware"):
        read_input(connection, datetime(2024, 6, 3), datetime(2024, 6, 4))
    with store_engine.connect() as connection, pytest.raises(ValueError, match="empty analysis range"):
        read_input(connection, T0, T0)


def test_only_workers_seen_in_the_range_are_read(store_engine: Engine) -> None:
    _store(store_engine, _fleet())
    with store_engine.connect() as connection:
        later = read_input(connection, T0 + timedelta(days=2), T0 + timedelta(days=3))
    assert later.inventory.workers == ()
    assert len(later.gpu_buckets["ts"]) == 0


def test_the_summary_is_stored_where_the_store_keeps_analysis_runs(store_engine: Engine) -> None:
    _store(store_engine, _fleet())
    result = _read(store_engine)
    with writing(store_engine) as connection:
        run_id = store_summary(connection, result.summary, now=T0 + timedelta(hours=10))
    with store_engine.connect() as connection:
        latest = latest_analysis(connection)
    assert latest is not None and latest.id == run_id
    assert latest.summary.fleet is not None
    fleet = result.typed_summary.fleet
    assert latest.summary.fleet.lost.tokens_per_s.value == fleet.lost.tokens_per_s.value
    assert latest.from_ts == T0
    (pool,) = latest.summary.pools
    assert pool.pool == result.summary["pools"][0]["pool"]
    assert pool.lost.tokens_per_s.value == result.typed_summary.pools[0].lost.tokens_per_s.value
    assert (
        pool.recommended_prefill_decode_ratio
        == result.summary["pools"][0]["recommended_prefill_decode_ratio"]
    )


def _weak_fleet_with_slices() -> Fleet:
    slices = [
        Worker(
            f"node02/prefill-mig-{k}",
            H100_1G,
            "prefill",
            tp=1,
            parent_gpu="GPU-node02",
            mig_profile="1g.10gb",
        )
        for k in (1, 2)
    ]
    return Fleet(
        [*workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]), *slices],
        hours=6,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
        counters=UTILISATION,
    )


def test_busy_time_counters_and_mig_instances_come_through_every_read(store_engine: Engine) -> None:
    gpu, eng = _store(store_engine, _weak_fleet_with_slices())
    pure = input_from_samples(gpu, eng, start=T0.timestamp(), end=T0.timestamp() + 6 * 3600)

    def buckets(columns: Any) -> dict[tuple[str, float], tuple[float, float]]:
        """(GPU, bucket) -> the busy-time means; NaN where unknown (the store says None, numpy NaN)."""
        return {
            (u, float(t)): (float("nan") if g is None else float(g), float("nan") if m is None else float(m))
            for u, t, g, m in zip(
                columns["gpu_uuid"],
                columns["ts"],
                columns["gr_engine_active_avg"],
                columns["mem_copy_util_avg"],
                strict=True,
            )
        }

    expected = buckets(pure.gpu_buckets)
    assert any(g > 0 for g, _ in expected.values())  # the instances' own activity
    assert any(m > 0 for _, m in expected.values())
    for rolled_to in (None, 3, 7):  # raw only, rolled up to 03:00 and raw after, all rolled up
        if rolled_to is not None:
            with writing(store_engine) as connection:
                refresh_rollups(connection, T0, T0 + timedelta(hours=rolled_to))
        with store_engine.connect() as connection:
            data = read_input(connection, T0, T0 + timedelta(hours=7))  # the last window ends at 06:00
        got = buckets(data.gpu_buckets)
        assert got.keys() == expected.keys()
        for key, (g, m) in expected.items():
            assert got[key][0] == pytest.approx(g, nan_ok=True), key
            assert got[key][1] == pytest.approx(m, nan_ok=True), key
    slices = {g.gpu_uuid: g for g in data.inventory.gpus if g.mig_profile}
    assert len(slices) == 2
    assert {(g.parent_gpu_uuid, g.mig_profile, g.sku) for g in slices.values()} == {
        ("GPU-node02", "1g.10gb", "H100-SXM/1g.10gb")  # the store resolves the instance's own SKU
    }
    summary = analyze(data, CATALOG).summary["fleet"]
    assert (summary["mig_instances"], summary["mig_parent_gpus"], summary["physical_gpus"]) == (2, 1, 9)
    assert summary["judged_by_evidence"].get("utilisation", 0) >= 2  # the decode workers' memory busy
