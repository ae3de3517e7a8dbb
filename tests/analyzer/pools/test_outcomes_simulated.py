"""The advice carried out in the simulated fleet: the analyzer judges the change against the truth."""

from __future__ import annotations

import numpy as np
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


@pytest.mark.slow
def test_a_swap_by_pod_replacement_is_a_change_judged_like_one_in_place() -> None:
    """The Deployment way: old pods deleted, new pods with new names on the same GPUs."""
    base = load_scenario("carried-out").model_copy(update={"changes": [], "days": 2.0, "naming": "gke"})
    swap = [
        {"worker": "node01/prefill-1", "to_role": "decode", "at_hour": 24.0, "replace_pods": True},
        {"worker": "node01/prefill-2", "to_role": "decode", "at_hour": 24.0, "replace_pods": True},
        {"worker": "node00/decode-1", "to_role": "prefill", "at_hour": 24.0, "replace_pods": True},
        {"worker": "node00/decode-2", "to_role": "prefill", "at_hour": 24.0, "replace_pods": True},
    ]
    run = simulate(with_role_changes(base, swap), CATALOG, days=2.0, window_s=300.0, seed=0)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
    (pool,) = result.typed_summary.pools
    (change,) = [c for c in pool.changes if c.moved]
    (truth,) = run.truth["changes"]
    expected = {(w["worker_id"], w["new_worker_id"], w["from_role"], w["to_role"]) for w in truth["workers"]}
    assert {(m.worker_id, m.new_worker_id, m.from_role, m.to_role) for m in change.moved} == expected
    assert change.followed == "as recommended" and change.verdict == "paid off as predicted"
    realized = float(truth["realized_gain_output_tokens_per_s"])
    assert change.realized_output_tokens_per_s is not None
    assert abs(change.realized_output_tokens_per_s / realized - 1.0) < 0.15
    # The pods that left are not serving, not "without GPUs": their GPUs serve their replacements.
    departed = {w["worker_id"] for w in truth["workers"]}
    reasons = {
        w.worker_id: w.unjudged_reason for w in result.typed_summary.workers if w.worker_id in departed
    }
    assert set(reasons) == departed and all(r and r.startswith("not serving") for r in reasons.values())


@pytest.mark.slow
def test_the_traffic_mix_around_an_in_place_change_is_not_garbled() -> None:
    """The hour a worker changes role holds both roles' counters under one: it says nothing of the mix
    (it once read 8 prompt and 5 output tokens per request)."""
    base = load_scenario("carried-out").model_copy(update={"changes": [], "days": 2.0})
    swap = [
        {"worker": "node01/prefill-1", "to_role": "decode", "at_hour": 24.0},
        {"worker": "node00/decode-1", "to_role": "prefill", "at_hour": 24.0},
    ]
    run = simulate(with_role_changes(base, swap), CATALOG, days=2.0, window_s=300.0, seed=0, truth=False)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
    (pool,) = result.typed_summary.pools
    for segment in pool.segments:
        assert segment.mean_prompt_tokens is not None and segment.mean_output_tokens is not None
        assert 1200 < segment.mean_prompt_tokens < 1500 and 700 < segment.mean_output_tokens < 1100


def test_role_transitions_mark_both_buckets_around_a_change() -> None:
    from analyzer.pools.workload import role_transitions

    role = np.array([[0, 0, 0, 1, 1], [1, 1, -1, 1, 1]], dtype=np.int8)  # a change; a restart in a role
    assert role_transitions(role).tolist() == [False, False, True, True, False]
