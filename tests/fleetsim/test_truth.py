"""The truth's equivalent best splits, and scoring by counts rather than worker ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from fleet.catalog import Catalog
from fleet.contract import Finding, FindingKind, Role
from fleetsim.examine import SimRun, score
from fleetsim.scenario import load_scenario
from fleetsim.truth import compute_truth


def _truth(name: str, catalog: Catalog, days: float = 1.0) -> dict[str, Any]:
    return compute_truth(load_scenario(name), catalog, 0, days, window_s=120)


@pytest.mark.parametrize("name", ["balanced", "all-h100"])
def test_a_balanced_pool_is_among_its_equivalent_best_splits(catalog: Catalog, name: str) -> None:
    truth = _truth(name, catalog)
    for segment in truth["segments"]:
        assert segment["current_is_best"]
        assert segment["current_placement"] in segment["best_placements"]
        assert segment["misplaced_counts"] == [[]] and segment["lost_output_tokens_per_s"] == 0
        assert segment["noise_tokens_per_s"] > 0
    assert truth["lost_requests_per_s"] == 0


def test_the_inverted_pool_needs_its_decode_workers_moved(catalog: Catalog) -> None:
    truth = _truth("inverted", catalog)
    for segment in truth["segments"]:
        assert not segment["current_is_best"]
        for option in segment["misplaced_counts"]:
            moved = {(r["sku"], r["from_role"], r["to_role"]): r["count"] for r in option}
            assert moved.get(("H100-SXM", "decode", "prefill"), 0) >= 1
    assert truth["lost_output_tokens_per_s"] > 0 and truth["lost_requests_per_s"] > 0


@dataclass
class _Result:
    findings: list[Finding]
    summary: dict[str, Any] = field(default_factory=dict)


def test_other_workers_of_the_same_pool_sku_and_role_score_full_marks(catalog: Catalog) -> None:
    truth = _truth("inverted", catalog)
    (segment,) = truth["segments"]
    (option,) = segment["misplaced_counts"]
    (pool,) = truth["pools"].values()
    named = {w["worker_id"] for w in segment["misplaced_workers"]}
    key = "some-cluster/some-deployment/some-model"  # pools are matched by their workers, never by name
    now = datetime(2024, 6, 3, tzinfo=UTC)
    findings = []
    for row in option:
        same = [
            w
            for w, info in sorted(pool["workers"].items(), reverse=True)
            if info["sku"] == row["sku"] and info["role"] == row["from_role"]
        ]
        others = [w for w in same if w not in named] + [w for w in same if w in named]
        for worker in others[: row["count"]]:
            findings.append(
                Finding(
                    kind=FindingKind(row["kind"]),
                    worker_id=worker,
                    pool=key,
                    gpu_sku=row["sku"],
                    role=Role(row["from_role"]),
                    first_seen=now,
                    last_seen=now,
                )
            )
    workers = [{"worker_id": w, "pool": key} for w in pool["workers"]]
    assert {f.worker_id for f in findings} != named  # different workers than the truth's pick
    run = SimRun("inverted", 0, 1.0, 120.0, {}, {}, truth, None)
    s = score(_Result(findings, {"workers": workers}), run)
    assert s.misplaced.tp == s.misplaced.truth > 0
    assert s.misplaced.fp == s.misplaced.fn == 0 and s.kinds_agree == s.misplaced.tp
