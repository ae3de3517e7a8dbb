"""The analyzer examined by the simulator, scored by counts (``fleetsim.examine``) on short runs.

The full benchmark (every scenario, several seeds, through the store) is benchmarks/analyzer_accuracy.py;
these runs are 2-3 simulated days at 60 s windows so the suite stays fast.
"""

from __future__ import annotations

import pytest

from analyzer.pipeline import analyze, input_from_samples
from fleet.catalog import load_catalog
from fleetsim.examine import MISPLACEMENT, Score, Tally, score, simulate

CATALOG = load_catalog()
DAYS = {"demo": 3.0, "balanced": 2.0, "all-h100": 2.0, "inverted": 2.0, "capacity": 2.0}


@pytest.fixture(scope="module")
def scores() -> dict[str, Score]:
    out = {}
    for name, days in DAYS.items():
        run = simulate(name, CATALOG, days=days)
        out[name] = score(analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG), run)
    return out


@pytest.mark.parametrize("name", ["balanced", "all-h100"])
def test_nothing_is_flagged_where_the_truth_has_nothing(scores: dict[str, Score], name: str) -> None:
    s = scores[name]
    assert s.misplaced.truth == 0 and s.misplaced.flagged == 0
    assert not any(s.flagged_by_kind.get(k.value) for k in MISPLACEMENT)
    assert all(t.fp == 0 for t in s.kinds.values() if t is not None)


@pytest.mark.parametrize("name", ["demo", "inverted"])
def test_the_misplacements_are_found_by_count(scores: dict[str, Score], name: str) -> None:
    s = scores[name]
    assert s.misplaced.truth > 0
    assert s.misplaced.fp == 0
    assert s.misplaced.tp >= 0.8 * s.misplaced.truth
    estimate, truth = s.lost["output_tokens"]
    assert estimate is not None and abs(estimate - truth) <= 0.3 * truth


def test_over_the_short_runs_precision_and_recall_meet_the_goal(scores: dict[str, Score]) -> None:
    total = Tally()
    for s in scores.values():
        total.add(s.misplaced)
        for kind, t in s.kinds.items():
            if t is not None and kind not in {k.value for k in MISPLACEMENT}:
                total.add(t)
    assert total.precision is not None and total.precision >= 0.9
    assert total.recall is not None and total.recall >= 0.8


def test_nothing_critical_on_a_pool_that_serves_its_demand(scores: dict[str, Score]) -> None:
    assert {name: s.critical_on_demand_limited for name, s in scores.items()} == dict.fromkeys(DAYS, 0)
