"""The truth's goodput under a TTFT target: the prefill load whose simulated TTFT p90 meets it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fleet.catalog import Catalog
from fleetsim.fleet_sim import FleetSimulation, PoolChunk
from fleetsim.pool import PREFILL, PoolModel, QueueState, latencies
from fleetsim.scenario import Scenario, load_scenario
from fleetsim.truth import compute_truth
from fleetsim.ttft_goodput import ttft_bounded, ttft_bounded_prefill

SCENARIO = "ttft-target"


def _chunk(scenario: Scenario, catalog: Catalog) -> tuple[PoolModel, PoolChunk]:
    sim = FleetSimulation(scenario, catalog, 0, window_s=scenario.window_s, start=scenario.start)
    up = sim.life.worker_up(sim.window_start(0, 30))
    return sim.models[0], sim.pool_chunk(0, 0, 0, 30, up)


def _with_target(target: float | None) -> Scenario:
    scenario = load_scenario(SCENARIO)
    pool = scenario.pools[0].model_copy(update={"ttft_target_s": target})
    return scenario.model_copy(update={"pools": [pool]})


def test_no_target_leaves_the_capacities_as_they_are(catalog: Catalog) -> None:
    model, chunk = _chunk(_with_target(None), catalog)
    assert ttft_bounded(model, chunk.traffic, chunk.capacities) is chunk.capacities


def test_the_bound_grows_with_the_target_and_a_loose_one_binds_nothing(catalog: Catalog) -> None:
    model, chunk = _chunk(load_scenario(SCENARIO), catalog)
    capacity = chunk.capacities.prefill
    bounds = [ttft_bounded_prefill(model, chunk.traffic, capacity, t) for t in (0.05, 0.8, 0.9, 1.0, 100.0)]
    assert np.all(bounds[0] == 0)  # a prompt alone misses it
    assert np.all(bounds[1] > 0) and np.all(bounds[1] < bounds[2]) and np.all(bounds[2] < bounds[3])
    assert np.all(bounds[3] <= capacity) and np.array_equal(bounds[4], capacity)
    bounded = ttft_bounded(model, chunk.traffic, chunk.capacities)
    assert np.array_equal(bounded.prefill, bounds[2]) and bounded.decode is chunk.capacities.decode


def test_at_the_bound_the_engines_ttft_p90_is_the_target(catalog: Catalog) -> None:
    """Offered exactly the bounded load, the simulated prefill engines report a TTFT p90 at the target:
    checked through the simulator's own flow and latencies, not the bisection's arithmetic."""
    scenario = load_scenario(SCENARIO)
    target = scenario.pools[0].ttft_target_s
    assert target is not None
    model, chunk = _chunk(scenario, catalog)
    is_p = model.roles == PREFILL
    bound = ttft_bounded_prefill(model, chunk.traffic, chunk.capacities.prefill, target)
    p90s = []
    for scale in (1.0, 1.1):
        prompts = (bound * is_p).sum(axis=1) * scenario.window_s * scale
        arrivals = replace(chunk.traffic.arrivals, prompt_tokens=prompts)
        traffic = replace(chunk.traffic, arrivals=arrivals)
        flow = model.flow(traffic, chunk.capacities, chunk.up, QueueState(), window_s=scenario.window_s)
        p90s.append(latencies(model, flow, traffic).ttft_p90[:, is_p])
    assert np.median(p90s[0]) == pytest.approx(target, rel=0.02)
    assert np.median(p90s[1]) > target * 1.02


def test_the_truth_counts_goodput_under_the_target(catalog: Catalog) -> None:
    raw = compute_truth(_with_target(None), catalog, 0, 1.0, window_s=120)
    goodput = compute_truth(load_scenario(SCENARIO), catalog, 0, 1.0, window_s=120)
    assert 0 < goodput["current_tokens_per_s"] < 0.9 * raw["current_tokens_per_s"]
    assert 0 < goodput["best_tokens_per_s"] < raw["best_tokens_per_s"]
    assert goodput["lost_output_tokens_per_s"] > 0
