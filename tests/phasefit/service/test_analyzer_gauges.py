"""The gauges read a stored run by the summary's own field names (analyzer.results.summary), tolerantly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from analyzer.pipeline import analyze, input_from_samples
from analyzer.results.summary import (
    FleetTotals,
    LatencyTargets,
    Loss,
    LostCapacity,
    PoolSummary,
    TargetAttainment,
)
from analyzer.results.summary import Summary as StrictSummary
from fleet.catalog import load_catalog
from fleet.store.analysis import AnalysisRun, latest_analysis, put_analysis
from fleet.store.engine import writing
from fleet.store.stored_summary import (
    StoredAttainment,
    StoredFleet,
    StoredLoss,
    StoredLostCapacity,
    StoredPool,
    StoredSummary,
    StoredTargets,
)
from phasefit.service.analyzer_gauges import conclude
from tests.analyzer.synthetic import H100, H200, Fleet, workers

NOW = datetime(2026, 3, 2, 13, 0, tzinfo=UTC)


def _stored(engine: Engine, summary: dict[str, Any]) -> AnalysisRun:
    with writing(engine) as connection:
        put_analysis(connection, created_at=NOW, from_ts=NOW - timedelta(hours=1), to_ts=NOW, summary=summary)
    with engine.connect() as connection:
        run = latest_analysis(connection)
    assert run is not None
    return run


def test_the_views_name_only_fields_the_summary_has() -> None:
    """The gauges read through the dashboard's tolerant views: one declaration of a stored run."""
    assert set(StoredPool.model_fields) <= set(PoolSummary.model_fields)
    assert set(StoredFleet.model_fields) <= set(FleetTotals.model_fields)
    assert set(StoredSummary.model_fields) <= set(StrictSummary.model_fields)
    assert set(StoredLostCapacity.model_fields) == set(LostCapacity.model_fields)
    assert set(StoredLoss.model_fields) == set(Loss.model_fields)


def test_a_current_summary_reads_as_its_typed_figures(sqlite_engine: Engine) -> None:
    fleet = Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=8,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
    )
    result = analyze(input_from_samples(*fleet.columns()), load_catalog())
    typed = result.typed_summary
    conclusions = conclude([], {}, _stored(sqlite_engine, result.summary))
    lost = typed.fleet.lost
    assert lost.output_tokens_per_s.value and lost.requests_per_s.value  # a loss to read
    assert conclusions.fleet_lost_output == lost.output_tokens_per_s.value
    assert conclusions.fleet_lost_requests == lost.requests_per_s.value
    assert conclusions.fleet_lost == lost.tokens_per_s.value
    assert conclusions.judged_workers == typed.fleet.judged_workers
    assert conclusions.unjudged_workers == {k: float(v) for k, v in typed.fleet.unjudged_reasons.items()}
    for pool in typed.pools:
        assert conclusions.pool_lost_output.get(pool.pool) == pool.lost.output_tokens_per_s.value
        assert conclusions.pool_lost_requests.get(pool.pool) == pool.lost.requests_per_s.value
        assert conclusions.pool_capacity.get(pool.pool) == pool.capacity_tokens_per_s


def test_a_version_2_run_reads_as_its_flat_figures(sqlite_engine: Engine) -> None:
    flat = {"lost_output_tokens_per_s": 12.0, "lost_requests_per_s": 0.5, "lost_tokens_per_s": 30.0}
    run = _stored(sqlite_engine, {"version": 2, "pools": [{"pool": "c/m", **flat}], "fleet": flat})
    c = conclude([], {}, run)
    assert (c.fleet_lost_output, c.fleet_lost_requests, c.fleet_lost) == (12.0, 0.5, 30.0)
    assert (c.pool_lost_output, c.pool_lost_requests, c.pool_lost) == (
        {"c/m": 12.0},
        {"c/m": 0.5},
        {"c/m": 30.0},
    )


def test_figures_that_are_not_numbers_read_as_unknown(sqlite_engine: Engine) -> None:
    flat = {"pool": "c/m", "model": None, "lost_output_tokens_per_s": "12", "lost_requests_per_s": True}
    nested = {"pool": "c/n", "lost": {"output_tokens_per_s": {"value": "12"}, "requests_per_s": "junk"}}
    fleet = {
        "judged_workers": True,
        "lost": {"output_tokens_per_s": 5},
        "unjudged_reasons": {"a": "2", "b": 1},
    }
    summary = _stored(sqlite_engine, {"pools": [flat, nested], "fleet": fleet})
    conclusions = conclude([], {}, summary)
    assert conclusions.pool_lost_output == {} and conclusions.pool_lost_requests == {}
    assert conclusions.fleet_lost_output is None and conclusions.judged_workers is None
    assert conclusions.unjudged_workers == {"b": 1.0}
    assert _stored(sqlite_engine, {"fleet": ["not", "a", "mapping"]}).summary.fleet is None
    assert conclude([], {}, None).fleet_lost_output is None


def test_the_latest_scored_change_of_each_pool_is_its_ratio(sqlite_engine: Engine) -> None:
    def change(at: str, ratio: object) -> dict[str, object]:
        return {"at": at, "verdict": "paid off in part", "realized_to_predicted": ratio}

    pools = [
        {
            "pool": "c/a",
            "changes": [change("2026-03-01T00:00:00Z", 0.6), change("2026-03-02T00:00:00Z", 0.9)],
        },
        {"pool": "c/b", "changes": [change("2026-03-01T00:00:00Z", None)]},  # not scored: no series
        {"pool": "c/c", "changes": "junk"},
    ]
    summary = _stored(sqlite_engine, {"pools": pools, "model": {"changes_scored": 2}})
    conclusions = conclude([], {}, summary)
    assert conclusions.change_ratio == {"c/a": 0.9} and conclusions.changes_scored == 2.0
    assert conclude([], {}, None).changes_scored is None


def test_each_latency_target_and_its_measured_attainment_is_a_gauge(sqlite_engine: Engine) -> None:
    def target(metric: str, target_s: object, share: object, pool_p90_s: object = None) -> dict[str, object]:
        return {
            "metric": metric, "target_s": target_s, "share": share, "p90_s": 0.1, "worker_buckets": 3,
            "pool_p90_s": pool_p90_s,
        }  # fmt: skip

    pools = [
        {"pool": "c/a", "targets": {"source": "settings", "attainment": [target("tpot", 0.05, 0.62, 0.047)]}},
        # Unknown attainment: the target has a series, the attainment none (never 0).
        {"pool": "c/b", "targets": {"attainment": [target("ttft", 1.0, None), target("e2e", "x", "y")]}},
        {"pool": "c/c", "targets": "junk"},
    ]
    c = conclude([], {}, _stored(sqlite_engine, {"pools": pools}))
    assert c.pool_target == {("c/a", "tpot"): 0.05, ("c/b", "ttft"): 1.0}
    assert c.pool_attainment == {("c/a", "tpot"): 0.62}
    assert c.pool_latency_p90 == {("c/a", "tpot"): 0.047}  # from merged buckets; none sent: no series
    assert StoredTargets.model_fields.keys() <= LatencyTargets.model_fields.keys()
    assert StoredAttainment.model_fields.keys() <= TargetAttainment.model_fields.keys()
