"""Pool-run scoring and measured facts: state, loss against the truth, phantom loss, decisions, changes."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from fleetsim.examine_pools import PoolTotals, change_scores, decisions_agree, pool_scores
from fleetsim.measured_facts import missing_fields, underuse


def _segment(pool: str, start: str, end: str, **values: Any) -> dict[str, Any]:
    base = {"demand_limited": False, "lost_output_tokens_per_s": 0.0, "current_is_best": True}
    return {"pool": pool, "start": start, "end": end, **base, **values}


TRUTH: dict[str, Any] = {
    "pools": {"c/a": {"workers": {"w1": {}, "w2": {}}}, "c/b": {"workers": {"w3": {}}}},
    "segments": [
        _segment(
            "c/a",
            "2024-06-03T00:00:00Z",
            "2024-06-03T12:00:00Z",
            lost_output_tokens_per_s=1000.0,
            current_is_best=False,
            utilisation=0.9,
        ),
        _segment(
            "c/a",
            "2024-06-03T12:00:00Z",
            "2024-06-04T00:00:00Z",
            lost_output_tokens_per_s=0.0,
            utilisation=0.8,
        ),
        _segment("c/b", "2024-06-03T00:00:00Z", "2024-06-04T00:00:00Z", demand_limited=True, utilisation=0.1),
    ],
    "changes": [
        {
            "pool": "c/a",
            "at": "2024-06-03T12:00:00Z",
            "realized_gain_output_tokens_per_s": 900.0,
            "workers": [{"worker_id": "w1", "new_worker_id": "w1-new"}],
        },
    ],
}


def _summary(lost_a: float | None, lost_b: float, state_b: bool | None = True) -> dict[str, Any]:
    return {
        "pools": [
            {
                "pool": "A",
                "demand_limited": False,
                "lost_mean": {"output_tokens_per_s": {"value": lost_a, "low": 400.0, "high": 600.0}},
                "recommended": {"H100/tp2": {"prefill_best": 2, "decode_best": 0}},
                "changes": [
                    {
                        "at": "2024-06-03T13:00:00Z",
                        "verdict": "paid off as predicted",
                        "realized_output_tokens_per_s": 880.0,
                        "moved": [{"worker_id": "w1-new"}],
                    }
                ],
            },
            {
                "pool": "B",
                "demand_limited": state_b,
                "lost_mean": {"output_tokens_per_s": {"value": lost_b, "low": None, "high": None}},
            },
        ]
    }


POOLS = {"A": "c/a", "B": "c/b"}


def test_pool_scores_read_state_loss_range_and_phantom() -> None:
    a, b = pool_scores(_summary(500.0, 120.0), TRUTH, POOLS, Counter())
    assert a.pool == "c/a" and a.truth_lost_output == pytest.approx(500.0)  # time-weighted
    assert a.ratio == pytest.approx(1.0) and a.in_band and a.truth_in_range
    assert a.state_right and a.phantom is None
    assert b.truth_demand_limited and b.state_right
    assert b.phantom == pytest.approx(120.0)  # nothing to gain there, yet a loss reported
    totals = PoolTotals()
    totals.add_pools([a, b])
    assert (totals.in_band, totals.loss_scored, totals.phantom_reported, totals.phantom_pools) == (1, 1, 1, 1)


def test_the_supply_limited_loss_measures_count_only_pools_whose_truth_is_supply_limited() -> None:
    a, b = pool_scores(_summary(500.0, 120.0), TRUTH, POOLS, Counter())
    idle = replace(a, truth_demand_limited=True)  # the same figures on a pool the truth finds idle
    off = replace(a, reported_lost_output=1000.0, reported_low=900.0, reported_high=1100.0)  # twice the truth
    totals = PoolTotals()
    totals.add_pools([a, b, idle, off])
    assert (totals.in_band, totals.loss_scored, totals.truth_in_range, totals.range_scored) == (2, 3, 2, 3)
    assert (totals.supply_in_band, totals.supply_loss_scored) == (1, 2)
    assert (totals.supply_in_range, totals.supply_range_scored) == (1, 2)


def test_losses_are_counted_by_what_the_analyzer_said_they_rest_on() -> None:
    summary = _summary(500.0, 120.0)
    summary["pools"][0]["loss_basis"] = "calibrated"
    a, b = pool_scores(summary, TRUTH, POOLS, Counter())
    assert a.basis == "calibrated" and b.basis == "unsaid"  # B says nothing: never read as measured
    off = replace(a, basis="model", reported_lost_output=1000.0, reported_low=900.0, reported_high=1100.0)
    totals = PoolTotals()
    totals.add_pools([a, b, off])
    assert totals.by_basis == {"calibrated": [1, 1, 1], "model": [1, 0, 0]}  # b has no true loss


def test_a_missing_estimate_is_unscored_not_zero() -> None:
    a, b = pool_scores(_summary(None, 0.0, None), TRUTH, POOLS, Counter())
    assert a.ratio is None and a.in_band is None
    assert b.state_right is None and b.phantom == 0.0


def test_a_change_is_seen_under_its_new_pod_name_and_judged() -> None:
    (change,) = change_scores(_summary(500.0, 0.0), TRUTH, POOLS)
    assert change.seen and change.judged and change.reported_gain_output == 880.0
    summary = _summary(500.0, 0.0)
    summary["pools"][0]["changes"][0]["at"] = "2024-06-03T20:00:00Z"  # 8 hours off: another change
    assert not change_scores(summary, TRUTH, POOLS)[0].seen


def test_decisions_agree_only_when_every_seed_decided_the_same() -> None:
    assert decisions_agree({"x": {0: ("a",), 1: ("a",)}, "y": {0: ("a",), 1: ("b",)}, "z": {0: ()}}) == (1, 2)


def test_underuse_is_measured_with_an_unscored_band() -> None:
    due, grey = underuse(TRUTH)
    assert [d["pool"] for d in due] == ["c/b"] and grey == set()
    truth = {**TRUTH, "segments": [{**s, "utilisation": 0.4} for s in TRUTH["segments"]]}
    assert underuse(truth) == ([], {("c/a", None), ("c/b", None)})


def test_missing_profiling_fields_are_read_from_the_records() -> None:
    gpu = {
        "worker_id": ["w1"] * 10 + ["w2"] * 10 + ["w3"] * 20,
        "sm_active": [None] * 10 + [0.5] * 9 + [None] + [0.5] * 20,
        "tensor_active": [None] * 10 + [0.5] * 9 + [None] + [0.5] * 19 + [None],
        "dram_active": [None] * 10 + [0.5] * 9 + [None] + [0.5] * 20,
    }
    due, grey = missing_fields(gpu, TRUTH)
    assert [(d["pool"], d["worker_id"]) for d in due] == [("c/a", "w1"), ("c/a", "w2")]  # w2: 10% of its own
    assert grey == set()  # w3 lacks one field once: not a lost exporter field set


def test_the_analyzer_state_is_its_segments_time_weighted_majority() -> None:
    summary = _summary(500.0, 0.0)
    summary["pools"][0]["demand_limited"] = True  # the latest segment's, say
    summary["pools"][0]["segments"] = [
        {"start": "2024-06-03T00:00:00Z", "end": "2024-06-03T18:00:00Z", "demand_limited": False},
        {"start": "2024-06-03T18:00:00Z", "end": "2024-06-04T00:00:00Z", "demand_limited": True},
        {"start": "2024-06-04T00:00:00Z", "end": "2024-06-04T01:00:00Z", "demand_limited": None},
    ]
    a, _ = pool_scores(summary, TRUTH, POOLS, Counter())
    assert a.reported_demand_limited is False and a.state_right


def test_a_decision_is_the_moves_and_the_split_not_the_kinds_named() -> None:
    one = Counter({("c/a", "H100", "decode", "prefill", "capacity-on-small-memory"): 1,
                   ("c/a", "H100", "decode", "prefill", "decode-on-low-bandwidth"): 1})  # fmt: skip
    other = Counter({("c/a", "H100", "decode", "prefill", "capacity-on-small-memory"): 2})
    a1, _ = pool_scores(_summary(500.0, 0.0), TRUTH, POOLS, one)
    a2, _ = pool_scores(_summary(500.0, 0.0), TRUTH, POOLS, other)
    assert a1.decision == a2.decision
    assert ("H100", "decode", "prefill", "2") in a1.decision
    assert ("split", "H100/tp2", "2", "0") in a1.decision
