"""benchmarks/analyzer_accuracy.py --targets: each simulated pool's TPOT target reaches its analyzer pool."""

from __future__ import annotations

import pytest

from analyzer.pipeline import analyze, input_from_samples
from benchmarks.analyzer_accuracy import operator_params, scored_scenario
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from fleetsim.scenario import load_scenario

CATALOG = load_catalog()


@pytest.mark.parametrize("name", ["demo", "gke-two-pools", "eks-inverted"])
def test_every_pool_gets_the_target_its_engines_batch_to(name: str) -> None:
    run = simulate(name, CATALOG, days=0.25, window_s=300.0, truth=False)
    params = operator_params(name, targets=True)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG, params)
    targets = {spec.tpot_target_s for spec in load_scenario(name).pools}
    pools = result.summary["pools"]
    assert pools and all(p["targets"]["source"] == "settings" for p in pools)
    assert {p["targets"]["tpot_p90_s"] for p in pools} == targets
    assert all(a["share"] is not None for p in pools for a in p["targets"]["attainment"])  # measured


def test_the_operators_kv_link_reaches_the_analyzer_where_the_scenario_states_it() -> None:
    assert operator_params("kv-fabric").findings.kv_fabric.link_bytes_per_s == 1e9  # its 40 GbE front end
    assert operator_params("demo").findings.kv_fabric.link_bytes_per_s is None  # not stated: not known
    assert operator_params("demo").targets == ()  # targets only when asked


def test_a_stated_ttft_target_reaches_the_analyzer_with_the_tpot_one() -> None:
    (placed,) = operator_params("ttft-target", targets=True).targets
    spec = load_scenario("ttft-target").pools[0]
    assert (placed.rule.ttft_p90_s, placed.rule.tpot_p90_s) == (spec.ttft_target_s, spec.tpot_target_s)
    assert spec.ttft_target_s is not None
    assert all(p.rule.ttft_p90_s is None for p in operator_params("demo", targets=True).targets)


def test_without_targets_the_truth_counts_raw_throughput_as_the_analyzer_does() -> None:
    # A TTFT target changes only the truth (the engines admit every request): told no target, the analyzer
    # counts raw throughput, so the scored truth must too; told the targets, both count goodput.
    raw, stated = scored_scenario("ttft-target"), scored_scenario("ttft-target", targets=True)
    assert raw.pools[0].ttft_target_s is None and stated.pools[0].ttft_target_s == 0.9
    assert scored_scenario("demo") == load_scenario("demo")
    runs = [simulate(s, CATALOG, days=0.25, window_s=300.0, physics="perturbed") for s in (raw, stated)]
    assert runs[0].gpu_columns.keys() == runs[1].gpu_columns.keys()
    assert all(
        list(runs[0].engine_columns[k]) == list(runs[1].engine_columns[k]) for k in runs[0].engine_columns
    )
    current = [run.truth["segments"][0]["current_tokens_per_s"] for run in runs]
    assert current[0] > 2 * current[1]  # raw prefill throughput, against the load that meets 0.9 s
