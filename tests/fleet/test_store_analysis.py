from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from fleet.store.analysis import latest_analysis, list_analysis_runs, put_analysis
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import ensure_schema
from fleet.store.schema import AnalysisRunRow

T0 = datetime(2026, 11, 23, tzinfo=UTC)


def _summary(lost: float) -> dict[str, object]:
    loss = {"tokens_per_s": {"value": lost, "low": lost * 0.8, "high": lost}}
    return {
        "from": "2026-11-23T00:00:00Z",
        "to": "2026-11-24T00:00:00Z",
        "version": 3,
        "fleet": {"lost": loss},
        "pools": [{"pool": "east/llama", "lost": loss, "ratio_drift": True, "traffic": {"x": 1}}],
    }


def test_latest_run_wins_and_keeps_every_field(store_url: str) -> None:
    engine = make_engine(store_url)
    ensure_schema(engine)
    with engine.connect() as connection:
        assert latest_analysis(connection) is None
    with writing(engine) as connection:
        day_before = T0 - timedelta(days=1)
        put_analysis(connection, created_at=T0, from_ts=day_before, to_ts=T0, summary=_summary(10.0))
        later = T0 + timedelta(hours=1)
        put_analysis(connection, created_at=later, from_ts=T0, to_ts=later, summary=_summary(25.0))
    with engine.connect() as connection:
        run = latest_analysis(connection)
        assert run is not None
        assert run.summary.fleet is not None and run.summary.fleet.lost.tokens_per_s.value == 25.0
        assert run.summary.fleet.lost.tokens_per_s.low == 20.0
        assert run.created_at == T0 + timedelta(hours=1)
        pool = run.summary.pools[0]
        assert pool.pool == "east/llama" and pool.ratio_drift
        stored = connection.execute(
            select(AnalysisRunRow.summary).where(AnalysisRunRow.id == run.id)
        ).scalar_one()
        assert stored["pools"][0]["traffic"] == {"x": 1}  # kept as the analyzer wrote it, views or not
        assert len(list_analysis_runs(connection)) == 2
        since = list_analysis_runs(connection, since=T0)
        assert [r.summary.fleet.lost.tokens_per_s.value for r in since if r.summary.fleet] == [25.0]
    engine.dispose()
