"""Pool state from the fleet's evidence: its queues and the phases seen at their limit, never the model."""

from __future__ import annotations

import math
from pathlib import Path

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.pool_state import PoolState, pool_state
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from fleetsim.scenario import builtin_scenarios

CATALOG = load_catalog()


def test_the_queues_decide_never_the_model() -> None:
    demand = pool_state(0.4, 0.0, (None, None))
    assert demand.state is PoolState.DEMAND_LIMITED and "served what arrived" in demand.evidence
    # Requests wait and the decode phase is seen at its limit, or the queues grow: supply-limited.
    assert pool_state(3.0, 0.0, (None, 9_000.0)).state is PoolState.SUPPLY_LIMITED
    growing = pool_state(3.0, 0.2, (None, None))
    assert growing.state is PoolState.SUPPLY_LIMITED and "growing by 0.20 requests/s" in growing.evidence
    # Requests wait but no phase is at its limit and nothing grows: not the GPUs; unknown, never healthy.
    held = pool_state(3.0, 0.0, (None, None))
    assert held.state is PoolState.UNKNOWN and "admission" in held.evidence
    # No queue reported: unknown, whatever the model would say.
    assert pool_state(math.nan, math.nan, (1.0, 1.0)).state is PoolState.UNKNOWN
    # A colocated pool has no phases of its own: its workers, seen at their limit with work waiting.
    colocated = pool_state(3.0, 0.0, (None, None), colocated_at_limit=True)
    assert colocated.state is PoolState.SUPPLY_LIMITED
    assert "colocated workers seen saturated" in colocated.evidence


def test_an_over_demanded_pool_is_supply_limited_and_a_diurnal_one_is_not() -> None:
    for scenario, expected in (("over-demand", False), ("demo", True)):
        run = simulate(scenario, CATALOG, days=1.0, window_s=300.0, seed=0, truth=False)
        result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
        (pool,) = result.typed_summary.pools
        assert [s.demand_limited for s in pool.segments] == [expected] * len(pool.segments), scenario


def test_a_backlog_scales_with_the_pool() -> None:
    """Sixteen engines holding a request or so each between iterations are not a backlog; two each are."""
    slack = pool_state(12.8, 0.1, (5_000.0, None), workers=16)
    assert slack.state is PoolState.DEMAND_LIMITED and "0.80 per serving worker" in slack.evidence
    assert pool_state(32.0, 0.1, (5_000.0, None), workers=16).state is PoolState.SUPPLY_LIMITED
    # One worker: a single waiting request is already a queue, as before.
    assert pool_state(1.0, 0.0, (None, 900.0), workers=1).state is PoolState.SUPPLY_LIMITED
    assert pool_state(12.8, 0.1, (5_000.0, None), workers=16, backlog_per_worker=0.5).state is (
        PoolState.SUPPLY_LIMITED
    )


def test_a_colocated_pool_has_a_state_from_its_queues_though_no_placement(tmp_path: Path) -> None:
    """``mixed`` (every worker serves both phases) as shipped, and offered almost three times as much."""
    shipped = Path(builtin_scenarios()["mixed"]).read_text()
    for rate, demand_limited in ((55, True), (150, False)):
        path = tmp_path / f"mixed-{rate}.yaml"
        path.write_text(shipped.replace("rate_rps: 55", f"rate_rps: {rate}"))
        run = simulate(str(path), CATALOG, days=1.0, window_s=300.0, seed=0)
        assert [s["demand_limited"] for s in run.truth["segments"]] == [demand_limited]
        result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
        (pool,) = result.typed_summary.pools
        assert pool.serving == "colocated"
        assert [s.demand_limited for s in pool.segments] == [demand_limited] * len(pool.segments)
        if not demand_limited:
            assert "colocated workers seen saturated" in pool.segments[0].pool_state_evidence
