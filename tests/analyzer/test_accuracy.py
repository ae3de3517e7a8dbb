"""The analyzer examined by the simulator: short runs of the built-in scenarios against their ground truth.

The full benchmark (every scenario, a week, through the store) is benchmarks/analyzer_accuracy.py; these
runs are short (2-3 simulated days at 60 s windows) so the suite stays fast.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pytest

from analyzer.misplacement import MISPLACEMENT_KINDS
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from fleet.catalog import load_catalog
from fleet.contract import FindingKind, FindingStatus
from tests.analyzer.sim_harness import Score, SimRun, score, simulate, totals

CATALOG = load_catalog()
DAYS = {"demo": 3.0, "balanced": 2.0, "all-h100": 2.0, "inverted": 2.0, "capacity": 2.0}


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[SimRun, AnalysisResult]]:
    out = {}
    for name, days in DAYS.items():
        run = simulate(name, CATALOG, days=days)
        out[name] = (run, analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG))
    return out


def _score(runs: dict[str, tuple[SimRun, AnalysisResult]], name: str) -> Score:
    run, result = runs[name]
    return score(result, run.truth, name)


@pytest.mark.parametrize("name", ["balanced", "all-h100"])
def test_nothing_is_flagged_where_nothing_is_wrong(
    runs: dict[str, tuple[SimRun, AnalysisResult]], name: str
) -> None:
    run, result = runs[name]
    assert run.truth["misplaced_workers"] == []
    assert result.findings == []
    assert result.summary["fleet"]["lost_tokens_per_s"] == 0.0


def test_the_demo_misplacements_and_loss_match_the_truth(
    runs: dict[str, tuple[SimRun, AnalysisResult]],
) -> None:
    s = _score(runs, "demo")
    assert s.flagged == s.truth_misplaced and len(s.flagged) == 3
    assert s.lost_error is not None and s.lost_error < 0.15
    assert s.lost_low <= s.lost_truth * 1.05 and s.lost_high >= s.lost_truth * 0.95  # the range holds it
    _, result = runs["demo"]
    kinds = {f.kind for f in result.findings if f.worker_id in s.flagged}
    assert kinds == {FindingKind.DECODE_ON_LOW_BANDWIDTH}


def test_the_inverted_fleet_is_found_without_false_alarms(
    runs: dict[str, tuple[SimRun, AnalysisResult]],
) -> None:
    s = _score(runs, "inverted")
    assert s.false_positives == 0
    # Every H100 decode worker is flagged with the H200s it should swap with. Keeping one H100 decoder
    # sustains the same request rate at the central capacities; the decode pool on H200s alone has more
    # buffer, and keeps more rate where the shared, extrapolated decode line is optimistic.
    assert s.flagged == s.truth_misplaced
    assert s.lost_error is not None and s.lost_error < 0.15


def test_kv_starved_decode_on_the_smaller_memory_is_named_so(
    runs: dict[str, tuple[SimRun, AnalysisResult]],
) -> None:
    s = _score(runs, "capacity")
    assert s.flagged == s.truth_misplaced
    assert s.kinds_agree == len(s.truth_misplaced)
    _, result = runs["capacity"]
    starved = [f for f in result.findings if f.kind is FindingKind.CAPACITY_ON_SMALL_MEMORY]
    assert {f.gpu_sku for f in starved} == {"H100-SXM"}
    # Round-robin routing made the KV-starved H100 decoders bound the pool; the loss is measured there.
    assert any("round-robin" in note for segment in result.pools[0].segments for note in segment.notes)
    assert s.lost_error is not None and s.lost_error < 0.30


def test_over_the_short_runs_precision_and_recall_meet_the_goal(
    runs: dict[str, tuple[SimRun, AnalysisResult]],
) -> None:
    total = totals(_score(runs, name) for name in DAYS)
    assert total["precision"] >= 0.95
    assert total["recall"] >= 0.95
    assert total["lost_error_median"] < 0.15
    assert total["lost_error_max"] < 0.30


def test_the_mid_run_drift_is_found_when_it_began(runs: dict[str, tuple[SimRun, AnalysisResult]]) -> None:
    run, result = runs["demo"]
    (event,) = run.truth["drift_events"]
    began = datetime.fromisoformat(event["start"].replace("Z", "+00:00")).timestamp()
    (drift,) = [f for f in result.findings if f.kind is FindingKind.POOL_RATIO_DRIFT]
    assert drift.status is FindingStatus.OPEN
    shift = datetime.fromisoformat(str(drift.evidence["shift_began"])).timestamp()
    assert abs(shift - began) <= 3 * 3600
    best = int(str(drift.evidence["prefill_decode_recommended"]).split(":")[0])
    now = int(str(drift.evidence["prefill_decode_now"]).split(":")[0])
    assert best > now  # long prompts: the pool needs more prefill


def _until(run: SimRun, end: float) -> AnalysisResult:
    def cut(columns: dict[str, Any]) -> dict[str, Any]:
        keep = np.asarray(columns["ts"]) < end
        return {
            k: (v[keep] if isinstance(v, np.ndarray) else [x for x, k2 in zip(v, keep, strict=True) if k2])
            for k, v in columns.items()
        }

    first = float(np.min(run.gpu_columns["ts"])) - run.window_s
    return analyze(
        input_from_samples(cut(run.gpu_columns), cut(run.engine_columns), start=first, end=end), CATALOG
    )


def test_the_drift_is_raised_within_a_few_hours_and_not_before(
    runs: dict[str, tuple[SimRun, AnalysisResult]],
) -> None:
    run, _ = runs["demo"]
    began = datetime.fromisoformat(run.truth["drift_events"][0]["start"].replace("Z", "+00:00")).timestamp()
    before = _until(run, began)
    assert not [f for f in before.findings if f.kind is FindingKind.POOL_RATIO_DRIFT]
    assert {f.worker_id for f in before.findings if f.kind in MISPLACEMENT_KINDS} == {
        w["worker_id"] for w in run.truth["misplaced_workers"] if 0 in w["segments"]
    }
    after = _until(run, began + 4 * 3600)
    assert [
        f for f in after.findings if f.kind is FindingKind.POOL_RATIO_DRIFT and f.status is FindingStatus.OPEN
    ]
