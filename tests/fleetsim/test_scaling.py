"""A built-in scenario scaled up for benchmarks keeps its shape and its events."""

from __future__ import annotations

from fleetsim.scaling import scaled
from fleetsim.scenario import Scenario, load_scenario


def test_a_scaled_scenario_has_factor_times_the_nodes_and_traffic_and_is_valid() -> None:
    demo, big = load_scenario("demo"), scaled("demo", 4)
    assert big.name == "demo-x4"
    assert [g.count for g in big.nodes] == [4 * g.count for g in demo.nodes]
    assert [p.traffic.rate_rps for p in big.pools] == [4 * p.traffic.rate_rps for p in demo.pools]
    assert len(big.life.gpu_lost) == len(demo.life.gpu_lost)
    Scenario.model_validate(big.model_dump())  # still a valid scenario (node names widened consistently)
