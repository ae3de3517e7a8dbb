from __future__ import annotations

import pytest

from analyzer.pipeline import AnalysisResult, AnalyzerParams, input_from_samples
from analyzer.pipeline import analyze as run_pipeline
from analyzer.planning.plan import fleet_plan
from analyzer.planning.what_if import (
    GpuChange,
    WhatIfError,
    choose_pool,
    parse_changes,
    resolve_skus,
    what_if,
)
from analyzer.settings import AnalyzerSettings
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


def _analysis(spec: list[tuple[str, str, int, int]], params: AnalyzerParams | None = None) -> AnalysisResult:
    fleet = Fleet(workers(spec), hours=8, window_s=900.0, rate_rps=lambda h: 12.0, osl=lambda h: 900.0)
    gpu, eng = fleet.columns()
    return run_pipeline(input_from_samples(gpu, eng), CATALOG, params)


@pytest.fixture(scope="module")
def misplaced() -> AnalysisResult:
    return _analysis([("node00", H100, 0, 2), ("node01", H200, 2, 0)])


def test_parse_changes_puts_removals_first_and_splits_a_replace() -> None:
    changes = parse_changes(add=["H200-SXM:16"], remove=["H100-SXM:8"], replace=["H100-SXM:B200:4"])
    assert changes == (
        GpuChange("remove", "H100-SXM", 8),
        GpuChange("remove", "H100-SXM", 4),
        GpuChange("add", "H200-SXM", 16),
        GpuChange("add", "B200", 4),
    )
    with pytest.raises(WhatIfError, match="positive"):
        parse_changes(add=["H200-SXM:-2"])
    with pytest.raises(WhatIfError, match="FROM_SKU:TO_SKU:GPUS"):
        parse_changes(replace=["H100-SXM:8"])


def test_unknown_sku_is_refused_with_the_known_ones() -> None:
    with pytest.raises(WhatIfError, match=r"unknown GPU SKU 'H900'.*H200-SXM"):
        resolve_skus(parse_changes(add=["H900:8"]), CATALOG.gpus)


def test_plan_moves_decode_off_the_h100s(misplaced: AnalysisResult) -> None:
    [plan] = fleet_plan(misplaced.pools, misplaced.grid.workers)
    assert plan.status == "change" and plan.gain is not None
    assert plan.gain.output_tokens_per_s.value > 0
    assert plan.gain.output_tokens_per_s.low <= plan.gain.output_tokens_per_s.value
    assert {(c.sku, c.to_role) for c in plan.changes} >= {("H100-SXM", "prefill"), ("H200-SXM", "decode")}
    decode = {r.sku: r for r in plan.replicas if r.role == "decode"}
    assert decode["H100-SXM"].recommended < decode["H100-SXM"].current


def test_what_if_with_nothing_changed_is_the_recommended_split(misplaced: AnalysisResult) -> None:
    analysis = choose_pool(misplaced.pools, None)
    placement = analysis.latest.placement if analysis.latest else None
    assert placement is not None
    # add and remove the same GPUs: the set is today's, so the capacity is the recommended split's
    changes = parse_changes(add=["H200-SXM:2"], remove=["H200-SXM:2"])
    result = what_if(analysis, changes, resolve_skus(changes, CATALOG.gpus))
    assert result.capacity_what_if.tokens_per_s.value == pytest.approx(placement.best.tokens_per_s, rel=1e-6)
    assert result.cost_now_per_week_usd is None and result.cost_change_per_week_usd is None


def test_removing_gpus_loses_capacity_and_too_many_is_refused(misplaced: AnalysisResult) -> None:
    analysis = choose_pool(misplaced.pools, None)
    changes = parse_changes(remove=["H200-SXM:2"])
    result = what_if(analysis, changes, resolve_skus(changes, CATALOG.gpus))
    best_gain = result.capacity_best_now.tokens_per_s.value - result.capacity_now.tokens_per_s.value
    assert result.gain.tokens_per_s.value < best_gain
    assert result.capacity_what_if.tokens_per_s.value < result.capacity_best_now.tokens_per_s.value
    too_many = parse_changes(remove=["H200-SXM:6"])
    with pytest.raises(WhatIfError, match="has only 4 H200-SXM GPUs"):
        what_if(analysis, too_many, resolve_skus(too_many, CATALOG.gpus))


def test_choose_pool_needs_a_name_among_several(misplaced: AnalysisResult) -> None:
    pools = [misplaced.pools[0], misplaced.pools[0]]
    with pytest.raises(WhatIfError, match="--pool"):
        choose_pool(pools, None)
    with pytest.raises(WhatIfError, match="no pool 'x'"):
        choose_pool(pools, "x")


def test_a_plan_under_latency_targets_says_it_counts_goodput(
    misplaced: AnalysisResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = fleet_plan(misplaced.pools, misplaced.grid.workers)
    assert not any("goodput" in n for p in plans for n in p.notes)
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", '[{"tpot_p90_s": 0.05, "ttft_p90_s": 2}]')
    result = _analysis([("node00", H100, 0, 2), ("node01", H200, 2, 0)], AnalyzerSettings().params())
    (plan,) = fleet_plan(result.pools, result.grid.workers)
    assert (
        "capacities and gains count goodput within the pool's latency targets (TTFT p90 2 s, TPOT p90 "
        "0.05 s; settings rule PHASEFIT_ANALYZER_TARGETS[0])" in plan.notes
    )
