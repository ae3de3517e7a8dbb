"""Pool state from the fleet's evidence: its queues decide, the model only where no queue is reported."""

from __future__ import annotations

import math
from dataclasses import replace

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.analysis import served_its_demand
from analyzer.pools.split_search import place
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from tests.analyzer.pools.test_split_search import _group, _roles

CATALOG = load_catalog()


def _placement(peak: float) -> object:
    groups = [
        _group("H100-SXM", range(0, 4), 13_000.0, 6_500.0),
        _group("H200-SXM", range(4, 8), 13_000.0, 9_000.0),
    ]
    roles = [_roles(range(0, 4), 4), _roles(range(4, 8), 0)]
    return place(groups, roles, isl=1300.0, osl=180.0, demand_tokens_per_s=1.0, peak_demand_tokens_per_s=peak)


def test_the_queue_decides_where_it_is_reported() -> None:
    above_capacity = _placement(1e9)  # the model: peak demand beyond capacity
    within_capacity = _placement(1.0)
    assert not above_capacity.demand_limited and within_capacity.demand_limited  # type: ignore[attr-defined]
    assert served_its_demand(above_capacity, 0.0)  # type: ignore[arg-type]  # nothing waited: it served
    assert not served_its_demand(within_capacity, 3.0)  # type: ignore[arg-type]  # a queue most of the time
    assert served_its_demand(within_capacity, math.nan)  # type: ignore[arg-type]  # no queue: the model's
    assert not served_its_demand(replace(within_capacity, demand_limited=False), math.nan)  # type: ignore[type-var]


def test_an_over_demanded_pool_is_supply_limited_and_a_diurnal_one_is_not() -> None:
    for scenario, expected in (("over-demand", False), ("demo", True)):
        run = simulate(scenario, CATALOG, days=1.0, window_s=300.0, seed=0, truth=False)
        result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
        (pool,) = result.typed_summary.pools
        assert [s.demand_limited for s in pool.segments] == [expected] * len(pool.segments), scenario
