from __future__ import annotations

import json

import pytest

from analyzer.findings.misplaced_worker import KINDS as MISPLACEMENT_KINDS
from analyzer.findings.misplaced_worker import change_kind
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.pool import SkuGroup
from analyzer.pools.split_search import place
from analyzer.pools.worker_choice import Change
from fleet.catalog import load_catalog
from fleet.contract import FindingKind, FindingStatus, Role, Severity
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


def _run(fleet: Fleet) -> AnalysisResult:
    gpu, engine = fleet.columns()
    return analyze(input_from_samples(gpu, engine), CATALOG)


@pytest.fixture(scope="module")
def inverted() -> AnalysisResult:
    fleet = Fleet(
        workers(
            [("node00", H100, 0, 4), ("node01", H100, 0, 4), ("node02", H200, 4, 0), ("node03", H200, 4, 0)]
        ),
        hours=24,
    )
    return _run(fleet)


def test_inverted_placement_flags_both_sides(inverted: AnalysisResult) -> None:
    kinds = {f.worker_id or "": f.kind for f in inverted.findings if f.kind in MISPLACEMENT_KINDS}
    decode_on_h100 = [w for w, k in kinds.items() if k is FindingKind.DECODE_ON_LOW_BANDWIDTH]
    prefill_on_h200 = [w for w, k in kinds.items() if k is FindingKind.PREFILL_ON_HIGH_BANDWIDTH]
    assert len(decode_on_h100) >= 6 and all(w.startswith(("node00", "node01")) for w in decode_on_h100)
    # Which H200 prefill workers move is the telemetry's choice (here they are alike), never an id order.
    assert prefill_on_h200 and all(
        w.startswith(("node02/prefill", "node03/prefill")) for w in prefill_on_h200
    )


def test_a_misplacement_finding_carries_evidence_range_and_an_action(inverted: AnalysisResult) -> None:
    finding = next(f for f in inverted.findings if f.kind is FindingKind.DECODE_ON_LOW_BANDWIDTH)
    assert finding.gpu_sku == "H100-SXM"
    assert finding.role is Role.DECODE
    assert finding.status is FindingStatus.OPEN
    assert finding.severity in (Severity.WARNING, Severity.CRITICAL, Severity.INFO)
    assert 0 <= finding.lost_tokens_per_s_low <= finding.lost_tokens_per_s <= finding.lost_tokens_per_s_high
    assert finding.lost_tokens_per_s > 0
    evidence = finding.evidence
    for key in (
        "tensor_active",
        "dram_active",
        "kv_cache_usage",
        "tpot_p50_s",
        "generation_tokens_per_s",
        "achieved_flops_per_s_per_gpu",
        "arithmetic_intensity_flop_per_byte",
        "ridge_point_flop_per_byte",
        "demand_limited",
        "recommended_role",
    ):
        assert key in evidence, key
    # Decode sits below the ridge: memory side of the roofline.
    assert evidence["roofline_side"] == "memory"
    assert evidence["recommended_role"] == "prefill"
    assert finding.recommendation is not None
    assert finding.recommendation.action == "swap-roles-in-place"
    assert finding.recommendation.expected_gain_tokens_per_s == pytest.approx(finding.lost_tokens_per_s)
    assert "option_move_same_sku" in evidence
    json.dumps(finding.model_dump(mode="json"))  # evidence is plain JSON


def test_swaps_name_their_counterpart(inverted: AnalysisResult) -> None:
    paired = [f for f in inverted.findings if f.recommendation and f.recommendation.counterpart_worker_id]
    assert paired
    for finding in paired:
        assert finding.recommendation is not None
        other = finding.recommendation.counterpart_worker_id
        assert other is not None and other != finding.worker_id
        assert finding.recommendation.target_sku in ("H100-SXM", "H200-SXM")
        assert finding.recommendation.target_sku != finding.gpu_sku


def test_the_lost_tokens_of_findings_add_up_to_the_pool_loss(inverted: AnalysisResult) -> None:
    pool = inverted.summary["pools"][0]
    workers_lost = sum(f.lost_tokens_per_s for f in inverted.findings if f.kind in MISPLACEMENT_KINDS)
    ratio_lost = sum(f.lost_tokens_per_s for f in inverted.findings if f.kind is FindingKind.POOL_RATIO_DRIFT)
    assert workers_lost + ratio_lost == pytest.approx(pool["lost"]["tokens_per_s"]["value"], rel=1e-3)


def test_no_better_hardware_means_no_misplacement() -> None:
    result = _run(
        Fleet(workers([("node00", H100, 4, 0), ("node01", H100, 3, 1), ("node02", H100, 3, 1)]), hours=24)
    )
    assert [f for f in result.findings if f.kind in MISPLACEMENT_KINDS] == []


def test_a_mix_drift_raises_pool_ratio_drift_when_it_began() -> None:
    fleet = Fleet(
        workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]),
        hours=36,
        rate_rps=lambda h: 30.0,
        isl=lambda h: 1300.0 if h < 24 else 3000.0,
        osl=lambda h: 180.0 if h < 24 else 60.0,
    )
    result = _run(fleet)
    (drift,) = [f for f in result.findings if f.kind is FindingKind.POOL_RATIO_DRIFT]
    assert drift.status is FindingStatus.OPEN
    assert drift.evidence["shift_began"] == "2024-06-04T00:00:00+00:00"
    assert "prompt_tokens" in str(drift.evidence["shift"])
    assert drift.recommendation is not None and drift.recommendation.action == "rebalance-pool"
    now = str(drift.evidence["prefill_decode_now"]).split(":")
    recommended = str(drift.evidence["prefill_decode_recommended"]).split(":")
    assert int(recommended[0]) > int(now[0])  # long prompts, short outputs: more prefill
    pool = result.summary["pools"][0]
    assert pool["ratio_drift"] is True
    assert pool["drift_events"][0]["start"] == "2024-06-04T00:00:00Z"


def _capacity_group(sku_key: str, rows: range) -> GroupCapacity:
    return GroupCapacity(
        SkuGroup(CATALOG.gpus.get(sku_key), 2, tuple(rows), None),
        RoleCapacity(13_000.0, 0.03, "measured"),
        RoleCapacity(6_500.0 if sku_key == "H100-SXM" else 9_000.0, 0.03, "measured"),
        kv_bytes=60e9,
    )


def test_kinds_say_which_way_the_sku_is_wrong() -> None:
    groups = [_capacity_group("H100-SXM", range(0, 4)), _capacity_group("H200-SXM", range(4, 8))]
    roles = [[(r, "decode") for r in range(0, 4)], [(r, "prefill") for r in range(4, 8)]]
    result = place(
        groups, roles, isl=1300.0, osl=600.0, demand_tokens_per_s=1.0, peak_demand_tokens_per_s=1.0
    )
    current = result.current.prefill
    to_prefill = next(c for c in result.changes if c.to_role == "prefill")
    to_decode = next(c for c in result.changes if c.to_role == "decode")
    assert change_kind(to_prefill, result, current, False) is FindingKind.DECODE_ON_LOW_BANDWIDTH
    assert change_kind(to_prefill, result, current, True) is FindingKind.CAPACITY_ON_SMALL_MEMORY
    assert change_kind(to_decode, result, current, False) is FindingKind.PREFILL_ON_HIGH_BANDWIDTH
    # A change inside one SKU only rebalances the pool.
    same = Change(row=0, group=0, to_role="prefill", share=1.0)
    single = place(
        [groups[0]],
        [[(r, "decode") for r in range(4)]],
        isl=1300.0,
        osl=180.0,
        demand_tokens_per_s=1.0,
        peak_demand_tokens_per_s=1.0,
    )
    assert change_kind(same, single, single.current.prefill, False) is FindingKind.POOL_RATIO_DRIFT


def test_an_idle_pool_is_under_utilised_and_priced() -> None:
    result = _run(
        Fleet(workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]), hours=12, rate_rps=lambda h: 4.0)
    )
    (under,) = [f for f in result.findings if f.kind is FindingKind.UNDERUTILISED_POOL]
    assert under.worker_id is None and under.pool == result.summary["pools"][0]["pool"]
    assert float(str(under.evidence["utilisation"])) < 0.4
    assert under.evidence["idle_cost"] == "price unknown"


def test_small_models_with_short_outputs_do_not_pay_for_disaggregation() -> None:
    fleet = Fleet(
        workers([("node00", H100, 2, 2), ("node01", H200, 2, 2)]),
        hours=12,
        rate_rps=lambda h: 200.0,
        # Two output tokens (classification-style): colocated serving then beats the split by ~13% under
        # the refitted model; at 6 tokens it was within a point of the 10% rule either side, fit to fit.
        osl=lambda h: 2.0,
        model="meta-llama/Llama-3.1-8B-Instruct",
    )
    result = _run(fleet)
    (finding,) = [f for f in result.findings if f.kind is FindingKind.DISAGGREGATION_NOT_PAYING]
    assert finding.recommendation is not None and finding.recommendation.action == "colocate"
    assert "small models gain little" in str(finding.evidence["reason"])
    checks = {c["check"]: c for c in result.summary["pools"][0]["checks"]}
    assert checks["model-size"]["passed"] is False
    assert checks["output-length"]["passed"] is False
