"""A what-if on a pool is sized to the pool's own latency targets, as its analysis was."""

from __future__ import annotations

from dataclasses import replace

from analyzer.pipeline import AnalyzerParams, analyze, input_from_samples
from analyzer.planning.standing import StandingWhatIf, evaluate
from analyzer.pools.analysis import PoolParams
from analyzer.pools.calibration import CapacityParams
from fleet.catalog import load_catalog
from fleet.targets import NO_TARGETS, parse_rules
from tests.analyzer.synthetic import H100, Fleet, workers

CATALOG = load_catalog()


def test_a_new_sku_is_sized_to_the_pools_tpot_target() -> None:
    fleet = Fleet(
        workers([("node00", H100, 2, 2), ("node01", H100, 2, 2)]), hours=6, rate_rps=lambda h: 120.0
    )
    data = input_from_samples(*fleet.columns())
    tight = replace(AnalyzerParams(), targets=parse_rules([{"tpot_p90_s": 0.02}], "settings", "S"))
    analyses = analyze(data, CATALOG, tight).pools
    assert analyses[0].targets.tpot_p90_s == 0.02
    asked = [StandingWhatIf(add=["H200-SXM:8"])]
    (held,) = evaluate(asked, analyses, CATALOG, AnalyzerParams())  # the pool's own target, none fleet-wide
    stripped = [replace(a, targets=NO_TARGETS) for a in analyses]
    fleet_wide = AnalyzerParams(pool=PoolParams(capacity=CapacityParams(tpot_slo_s=0.02)))
    (as_params,) = evaluate(asked, stripped, CATALOG, fleet_wide)
    (unheld,) = evaluate(asked, stripped, CATALOG, AnalyzerParams())
    assert held == as_params
    assert held.output_gain is not None and unheld.output_gain is not None
    assert 0 < held.output_gain < unheld.output_gain
