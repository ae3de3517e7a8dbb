"""Per-pool latency targets end to end: settings and catalog rules to each pool's capacity and summary."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from analyzer.pipeline import AnalysisInput, AnalysisResult, analyze, input_from_samples
from analyzer.pools.targets import NO_TARGETS_NOTE
from analyzer.settings import AnalyzerSettings
from fleet.catalog import load_catalog
from fleet.targets import parse_rules
from tests.analyzer.synthetic import H100, Fleet, workers

CATALOG = load_catalog()
CLUSTERS = json.dumps({"node00": "east", "node01": "west"})
EAST, WEST = "east/meta-llama/Llama-3.1-70B-Instruct", "west/meta-llama/Llama-3.1-70B-Instruct"


@pytest.fixture(scope="module")
def data() -> AnalysisInput:
    # Two pools alike in all but their cluster.
    gpu, engine = Fleet(workers([("node00", H100, 2, 2), ("node01", H100, 2, 2)]), hours=6).columns()
    return input_from_samples(gpu, engine)


def _run(data: AnalysisInput, monkeypatch: pytest.MonkeyPatch, **env: str) -> AnalysisResult:
    monkeypatch.setenv("PHASEFIT_ANALYZER_CLUSTERS", CLUSTERS)
    for name, value in env.items():
        monkeypatch.setenv(f"PHASEFIT_ANALYZER_{name.upper()}", value)
    return analyze(data, CATALOG, AnalyzerSettings().params())


def _decode(result: AnalysisResult, key: str) -> float:
    analysis = next(a for a in result.pools if a.pool.key == key)
    segment = analysis.segments[-1]
    return sum(c.decode.tokens_per_s for c in segment.capacities)


def _targets(result: AnalysisResult, key: str) -> dict[str, Any]:
    """The pool's targets and rule (its measured attainment: :func:`_attained`)."""
    pool: dict[str, Any] = next(p for p in result.summary["pools"] if p["pool"] == key)
    return {k: v for k, v in pool["targets"].items() if k != "attainment"}


def _attained(result: AnalysisResult, key: str) -> list[tuple[str, float | None]]:
    pool: dict[str, Any] = next(p for p in result.summary["pools"] if p["pool"] == key)
    return [(a["metric"], a["share"]) for a in pool["targets"]["attainment"]]


def test_settings_rules_are_named_by_their_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PHASEFIT_ANALYZER_TARGETS", '[{"tpot_p90_s": 0.1}, {"cluster": "east", "ttft_p90_s": 1}]'
    )
    rules = AnalyzerSettings().params().targets
    assert [(r.where, r.source) for r in rules] == [
        ("PHASEFIT_ANALYZER_TARGETS[0]", "settings"),
        ("PHASEFIT_ANALYZER_TARGETS[1]", "settings"),
    ]
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", '[{"cluster": "east", "tpot": 0.05}]')
    with pytest.raises(ValueError, match=r"PHASEFIT_ANALYZER_TARGETS\[0\]: unknown key 'tpot'"):
        AnalyzerSettings()


def test_with_no_target_the_analysis_says_so_once(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(data, monkeypatch)
    assert result.summary["warnings"].count(NO_TARGETS_NOTE) == 1
    for key in (EAST, WEST):
        assert _targets(result, key) == {
            "ttft_p90_s": None,
            "tpot_p90_s": None,
            "e2e_p90_s": None,
            "source": "none",
            "rule": None,
        }
        assert _attained(result, key) == []  # no target, nothing to attain
    assert _decode(result, EAST) == pytest.approx(_decode(result, WEST))


def test_a_pool_with_a_tight_tpot_has_less_decode_capacity(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(data, monkeypatch, targets='[{"cluster": "east", "tpot_p90_s": 0.025, "ttft_p90_s": 0.8}]')
    assert _targets(result, EAST) == {
        "ttft_p90_s": 0.8,
        "tpot_p90_s": 0.025,
        "e2e_p90_s": None,
        "source": "settings",
        "rule": "PHASEFIT_ANALYZER_TARGETS[0]",
    }
    assert _targets(result, WEST)["source"] == "none"
    assert _attained(result, EAST) == [("ttft", None), ("tpot", None)]  # the synthetic engines send no p90s
    assert 0 < _decode(result, EAST) < 0.8 * _decode(result, WEST)
    east = next(a for a in result.pools if a.pool.key == EAST)
    assert all(
        c.decode.tpot_s is not None and c.decode.tpot_s <= 0.025 + 1e-6 for c in east.segments[-1].capacities
    )
    assert NO_TARGETS_NOTE not in result.summary["warnings"]
    assert not any("end-to-end targets are reported" in w for w in result.summary["warnings"])


def _prefill(result: AnalysisResult, key: str) -> float:
    analysis = next(a for a in result.pools if a.pool.key == key)
    return sum(c.prefill.tokens_per_s for c in analysis.segments[-1].capacities)


def test_a_ttft_target_holds_the_prefill_load_below_saturation(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = _run(data, monkeypatch)
    loose = _run(data, monkeypatch, targets='[{"ttft_p90_s": 100}]')
    east = next(a for a in loose.pools if a.pool.key == EAST)
    alone = min(c.prefill.ttft_s or 0.0 for c in east.segments[-1].capacities)  # a prompt alone
    assert alone > 0
    tight = _run(data, monkeypatch, targets=f'[{{"cluster": "east", "ttft_p90_s": {3 * alone}}}]')
    assert 0.95 * _prefill(raw, EAST) < _prefill(loose, EAST) < _prefill(raw, EAST)
    assert 0 < _prefill(tight, EAST) < 0.8 * _prefill(tight, WEST)
    assert _prefill(tight, WEST) == pytest.approx(_prefill(raw, WEST))
    assert not any("targets are reported" in w for w in tight.summary["warnings"])


def test_the_global_tpot_is_the_default_and_a_rule_replaces_it(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(data, monkeypatch, tpot_slo_s="0.025", targets='[{"cluster": "west", "tpot_p90_s": 0.5}]')
    assert _targets(result, EAST)["source"] == "global"
    assert _targets(result, EAST)["rule"] == "PHASEFIT_ANALYZER_TPOT_SLO_S"
    assert _targets(result, WEST)["tpot_p90_s"] == 0.5
    assert _decode(result, EAST) < 0.8 * _decode(result, WEST)


def test_the_global_rule_names_the_threshold_that_set_it(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(data, monkeypatch, tpot_slo_s="0.5", thresholds='{"pool.capacity.tpot_slo_s": 0.025}')
    assert _targets(result, EAST)["rule"] == "threshold pool.capacity.tpot_slo_s"
    assert _targets(result, EAST)["tpot_p90_s"] == 0.025


def test_catalog_rules_apply_below_settings_rules_of_equal_specificity(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHASEFIT_ANALYZER_CLUSTERS", CLUSTERS)
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", '[{"model": "llama-3.1-70b", "tpot_p90_s": 0.05}]')
    entries = [
        {"model": "llama-3.1-70b", "tpot_p90_s": 0.04},
        {"cluster": "west", "model": "llama-3.1-70b", "e2e_p90_s": 30},
    ]
    catalog = replace(CATALOG, targets=parse_rules(entries, "catalog", "ops.yaml: targets"))
    result = analyze(data, catalog, AnalyzerSettings().params())
    assert _targets(result, EAST)["rule"] == "PHASEFIT_ANALYZER_TARGETS[0]"
    west = _targets(result, WEST)
    assert (west["source"], west["rule"], west["e2e_p90_s"], west["tpot_p90_s"]) == (
        "catalog",
        "ops.yaml: targets[1]",
        30,
        None,
    )


def test_a_tie_is_said_in_the_pools_notes(data: AnalysisInput, monkeypatch: pytest.MonkeyPatch) -> None:
    targets = '[{"cluster": "east", "tpot_p90_s": 0.05}, {"model": "llama-3.1-70b", "tpot_p90_s": 0.03}]'
    result = _run(data, monkeypatch, targets=targets)
    assert _targets(result, EAST)["tpot_p90_s"] == 0.05 and _targets(result, WEST)["tpot_p90_s"] == 0.03
    said = [w for w in result.summary["warnings"] if "match equally" in w]
    assert said == [
        f"{EAST}: latency targets: PHASEFIT_ANALYZER_TARGETS[0] and PHASEFIT_ANALYZER_TARGETS[1] match "
        "equally; the first listed applies"
    ]


def test_a_ttft_target_no_prompt_can_meet_leaves_capacity_and_loss_unknown_with_why(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(data, monkeypatch, targets='[{"cluster": "east", "ttft_p90_s": 0.001}]')
    east = next(p for p in result.summary["pools"] if p["pool"] == EAST)
    west = next(p for p in result.summary["pools"] if p["pool"] == WEST)
    assert east["capacity_tokens_per_s"] is None and "TTFT target 1 ms is below a prompt alone" in (
        east["capacity_reason"] or ""
    )
    assert east["lost"]["output_tokens_per_s"]["value"] is None  # unknown, never "loses nothing"
    assert "no worker of the pool can prefill within its TTFT target" in (east["lost_reason"] or "")
    assert west["capacity_tokens_per_s"] and west["capacity_reason"] is None  # the other pool as before


def test_the_bounded_prefill_band_is_wider_than_the_raw_one(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = next(a for a in _run(data, monkeypatch).pools if a.pool.key == EAST).segments[-1].capacities
    loose = _run(data, monkeypatch, targets='[{"cluster": "east", "ttft_p90_s": 100}]')
    alone = next(a for a in loose.pools if a.pool.key == EAST).segments[-1].capacities[0].prefill.ttft_s
    assert alone is not None
    tight = _run(data, monkeypatch, targets=f'[{{"cluster": "east", "ttft_p90_s": {2 * alone}}}]')
    bounded = next(a for a in tight.pools if a.pool.key == EAST).segments[-1].capacities
    for before, after in zip(raw, bounded, strict=True):
        assert 0 < after.prefill.tokens_per_s < before.prefill.tokens_per_s
        assert after.prefill.uncertainty > before.prefill.uncertainty
        assert after.prefill.unbounded_tokens_per_s == before.prefill.tokens_per_s


def test_the_operators_kv_link_bounds_each_prefill_worker_to_what_it_carries(
    data: AnalysisInput, monkeypatch: pytest.MonkeyPatch
) -> None:
    from analyzer.model.roofline import kv_bytes_per_sequence

    raw = next(a for a in _run(data, monkeypatch).pools if a.pool.key == EAST)
    linked = next(a for a in _run(data, monkeypatch, kv_link_gb_s="0.2").pools if a.pool.key == EAST)
    (before,), (after,) = raw.segments[-1].capacities[:1], linked.segments[-1].capacities[:1]
    d = before.group.deployment
    assert d is not None
    isl = linked.segments[-1].mix.isl
    carried = 0.2e9 / (kv_bytes_per_sequence(d, round(isl)) / isl)  # prompt tokens/s the link hands off
    assert before.prefill.tokens_per_s > carried  # the link binds here
    assert after.prefill.tokens_per_s == pytest.approx(carried) and after.prefill.kv_link_bound
    assert after.prefill.unbounded_tokens_per_s == pytest.approx(before.prefill.tokens_per_s)
    loose = next(a for a in _run(data, monkeypatch, kv_link_gb_s="1000").pools if a.pool.key == EAST)
    assert loose.segments[-1].capacities[0].prefill.tokens_per_s == before.prefill.tokens_per_s


def test_a_saturated_prefill_phase_stands_for_its_capacity_only_without_a_ttft_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a queueing prefill phase delivered missed any TTFT target: under one, the current plan counts
    the target-bounded capacity, so a pool short of prefill goodput shows the loss."""
    from fleetsim.examine import simulate

    run = simulate("ttft-target", CATALOG, days=1.0, window_s=120.0, seed=0, truth=False)
    data = input_from_samples(run.gpu_columns, run.engine_columns)
    raw = analyze(data, CATALOG, AnalyzerSettings().params())
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", '[{"ttft_p90_s": 0.9, "tpot_p90_s": 0.08}]')
    bounded = analyze(data, CATALOG, AnalyzerSettings().params())
    (segment,) = {a.pool.key: a for a in bounded.pools}.popitem()[1].segments[-1:]
    assert segment.measured[0] is not None  # the prefill phase was seen saturated
    assert any("counts the load that meets it" in note for note in segment.notes)
    assert segment.placement is not None and segment.placement.lost_tokens_per_s > 0
    (pool,) = bounded.summary["pools"]
    (unbounded,) = raw.summary["pools"]
    assert pool["capacity_tokens_per_s"] < 0.8 * unbounded["capacity_tokens_per_s"]
