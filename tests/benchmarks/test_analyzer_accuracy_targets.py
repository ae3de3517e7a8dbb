"""benchmarks/analyzer_accuracy.py --targets: each simulated pool's TPOT target reaches its analyzer pool."""

from __future__ import annotations

import pytest

from analyzer.pipeline import analyze, input_from_samples
from benchmarks.analyzer_accuracy import scenario_targets
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from fleetsim.scenario import load_scenario

CATALOG = load_catalog()


@pytest.mark.parametrize("name", ["demo", "gke-two-pools", "eks-inverted"])
def test_every_pool_gets_the_target_its_engines_batch_to(name: str) -> None:
    run = simulate(name, CATALOG, days=0.25, window_s=300.0, truth=False)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG, scenario_targets(name))
    targets = {spec.tpot_target_s for spec in load_scenario(name).pools}
    pools = result.summary["pools"]
    assert pools and all(p["targets"]["source"] == "settings" for p in pools)
    assert {p["targets"]["tpot_p90_s"] for p in pools} == targets
    assert all(a["share"] is not None for p in pools for a in p["targets"]["attainment"])  # measured
