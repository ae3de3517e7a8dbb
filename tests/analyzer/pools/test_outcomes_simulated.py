"""The advice carried out in the simulated fleet: the analyzer judges the change against the truth."""

from __future__ import annotations

import pytest

from analyzer.pipeline import analyze, input_from_samples
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from fleetsim.role_changes import with_role_changes
from fleetsim.scenario import load_scenario

CATALOG = load_catalog()


@pytest.mark.slow
def test_the_carried_out_swap_paid_off_as_the_truth_says() -> None:
    base = load_scenario("carried-out").model_copy(update={"changes": [], "days": 2.0})
    swap = [
        {"worker": "node01/prefill-1", "to_role": "decode", "at_hour": 24.0},
        {"worker": "node01/prefill-2", "to_role": "decode", "at_hour": 24.0},
        {"worker": "node00/decode-1", "to_role": "prefill", "at_hour": 24.0},
        {"worker": "node00/decode-2", "to_role": "prefill", "at_hour": 24.0},
    ]
    run = simulate(with_role_changes(base, swap), CATALOG, days=2.0, window_s=300.0, seed=0)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
    (pool,) = result.typed_summary.pools
    (change,) = [c for c in pool.changes if c.moved]
    assert {m.worker_id for m in change.moved} == {s["worker"] for s in swap}
    assert change.followed == "as recommended" and change.verdict == "paid off as predicted"
    (truth,) = run.truth["changes"]
    realized = float(truth["realized_gain_output_tokens_per_s"])
    assert (
        change.predicted_output_tokens_per_s is not None and change.realized_output_tokens_per_s is not None
    )
    assert abs(change.predicted_output_tokens_per_s / realized - 1.0) < 0.15
    assert abs(change.realized_output_tokens_per_s / realized - 1.0) < 0.15
    assert result.typed_summary.model.changes_scored == 1
