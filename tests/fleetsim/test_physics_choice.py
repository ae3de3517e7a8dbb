"""The examiner's choice of physics: the default is the model, a perturbed draw is recorded and changes
the fleet, and every truth names its physics."""

from __future__ import annotations

import pytest

from fleet.catalog import Catalog
from fleetsim.fleet_sim import FleetSimulation
from fleetsim.measured import MeasuredStepModel
from fleetsim.physics_choice import Perturbation, Physics, draw_seed, resolve_physics
from fleetsim.scenario import load_scenario
from fleetsim.truth import compute_truth


def test_the_draw_is_in_its_ranges_and_keyed_by_scenario_not_traffic_seed() -> None:
    draws = [Perturbation.draw(draw_seed(name)) for name in ("balanced", "inverted", "moe", "demo")]
    for d in draws:
        assert 0.75 <= d.prefill_efficiency <= 1.25 and 0.75 <= d.decode_efficiency <= 1.25
        assert 0.85 <= d.h200_decode_advantage <= 1.15
        assert 128 <= d.max_running_requests <= 1024
        assert 0.80 <= d.hbm_utilization <= 0.95
    assert len({repr(d) for d in draws}) == len(draws)
    assert Perturbation.draw(draw_seed("balanced")) == Perturbation.draw(draw_seed("balanced"))
    assert Perturbation.draw(draw_seed("balanced", 1)) != Perturbation.draw(draw_seed("balanced"))


def test_an_unknown_physics_names_the_choices() -> None:
    with pytest.raises(ValueError, match="model, measured, perturbed"):
        resolve_physics("roofline")


def test_perturbed_changes_the_fleet_and_the_truth_records_the_draw(catalog: Catalog) -> None:
    scenario = load_scenario("balanced")
    physics = resolve_physics("perturbed", draw_seed("balanced"))
    assert physics.perturbation is not None
    plain = FleetSimulation(scenario, catalog, 0)
    perturbed = FleetSimulation(scenario, catalog, 0, physics=physics)
    assert perturbed.models[0].step.engine.max_batch == physics.perturbation.max_running_requests
    assert (perturbed.models[0].step.bw_rate != plain.models[0].step.bw_rate).any()
    truth = compute_truth(scenario, catalog, 0, 0.1, window_s=60, physics=physics)
    assert truth["physics"]["name"] == "perturbed"
    assert truth["physics"]["draw"]["max_running_requests"] == physics.perturbation.max_running_requests
    assert set(truth["physics"]["sources"]["sim-west/llama-70b"].values()) == {"perturbed model formulas"}


def test_the_default_truth_says_it_ran_on_the_model(catalog: Catalog) -> None:
    truth = compute_truth(load_scenario("balanced"), catalog, 0, 0.05, window_s=60)
    assert truth["physics"]["name"] == "model"
    assert "draw" not in truth["physics"]
    assert Physics().name == "model"


@pytest.mark.parametrize(
    ("scenario", "pool", "table"),
    [
        ("demo", "sim-east/llama-70b", "vllm/llama-3.1-70b.csv"),
        ("llama-405b-tp8", None, "llama-3.1-405b.csv"),
        ("qwen3-moe-ep8", "sim-moe/qwen3-235b", "qwen3-235b-a22b.csv"),
    ],
)
def test_measured_runs_on_the_committed_tables(
    catalog: Catalog, scenario: str, pool: str | None, table: str
) -> None:
    physics = resolve_physics("measured")
    truth = compute_truth(load_scenario(scenario), catalog, 0, 0.05, window_s=60, physics=physics)
    assert truth["physics"]["name"] == "measured"
    sources = truth["physics"]["sources"][pool] if pool else next(iter(truth["physics"]["sources"].values()))
    assert set(sources) == {"H100-SXM", "H200-SXM"}
    assert all(s.startswith("measured: ") and table in s for s in sources.values()), sources
    assert {t["aiconfigurator_version"][:6] for t in truth["physics"]["tables"]} == {"0.12.0"}


def test_measured_physics_changes_what_a_worker_sustains(catalog: Catalog) -> None:
    scenario = load_scenario("demo")
    plain = FleetSimulation(scenario, catalog, 0).models[0].step
    measured = FleetSimulation(scenario, catalog, 0, physics=resolve_physics("measured")).models[0].step
    assert isinstance(measured, MeasuredStepModel)
    model_s = plain.breakdown(64.0, 0.0, 2048.0, 0.0).seconds
    measured_s = measured.breakdown(64.0, 0.0, 2048.0, 0.0).seconds
    assert not (abs(measured_s / model_s - 1.0) < 0.01).all()  # the tables, not the formulas, set the step
