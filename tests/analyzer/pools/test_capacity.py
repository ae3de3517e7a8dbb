from __future__ import annotations

import math
from dataclasses import replace

import pytest

from analyzer.findings.evidence import capacity_evidence
from analyzer.model.deployment import make_deployment
from analyzer.model.kv_budget import BudgetSource
from analyzer.model.moe import kv_bytes_per_token_slot
from analyzer.model.validation import widen
from analyzer.pools.calibration import CapacityParams, PoolCalibration
from analyzer.pools.capacity import RoleCapacity, group_capacity, kv_budget_of, routing_band_beyond_seen
from analyzer.pools.decode_fit import DecodeLine
from analyzer.pools.pool import SkuGroup
from fleet.catalog import load_catalog

CATALOG = load_catalog()
ISL, OSL = 1334.0, 175.0


def _group(gpu: str, rows: range) -> SkuGroup:
    d = make_deployment(CATALOG, model="llama-3.1-70b", gpu=gpu, precision="fp8", tp=2)
    return SkuGroup(d.gpu, 2, tuple(rows), d)


H100 = _group("H100 SXM", range(0, 8))
H200 = _group("H200 SXM", range(8, 16))
# What their engines report holding (tokens): the budgets are measured, so only the model's own error is
# left in the capacities' uncertainty.
REPORTED = {H100.key: (400_000.0, 0.0), H200.key: (1_100_000.0, 0.0)}


def _inverted_calibration() -> PoolCalibration:
    """H100s decode (a line up to batch 38), H200s prefill (a factor measured while saturated): every other
    figure is transferred, as in a fleet placed backwards."""
    return PoolCalibration(
        prefill_factor={H200.key: (1.07, 0.006)},
        prefill_saturated={H200.key},
        decode={H100.key: DecodeLine(scale=0.97, residual=0.02, max_batch_seen=38.0, points=200)},
        pooled_prefill=1.07,
        pooled_decode=0.97,
        skus={H100.key: H100.sku, H200.key: H200.sku},
        kv_reported=dict(REPORTED),
        kv_reporting={H100.key: tuple(H100.members), H200.key: tuple(H200.members)},
    )


def test_correlation_is_the_shared_share_of_the_uncertainty() -> None:
    assert RoleCapacity(1.0, 0.2, "transferred", shared=0.05).correlation == pytest.approx(0.25)
    assert RoleCapacity(1.0, 0.2, "measured").correlation == 0.0
    assert RoleCapacity(1.0, 0.1, "measured", shared=0.3).correlation == 1.0
    assert RoleCapacity(0.0, 0.0, "model", fits=False).correlation == 0.0


def test_capacities_from_one_source_share_its_error() -> None:
    # A model band wide enough not to cap the transferred decode figure (the cap is tested below).
    p = CapacityParams(model_uncertainty=0.45)
    cal = _inverted_calibration()
    h100, h200 = (group_capacity(g, cal, ISL, OSL, p) for g in (H100, H200))
    # Prefill: the H100 borrows the H200's measured factor; equal compute adds no cross-SKU error.
    assert (h200.prefill.source, h100.prefill.source) == ("measured", "transferred")
    assert h100.prefill.uncertainty == pytest.approx(p.measured_uncertainty)
    assert h100.prefill.correlation == pytest.approx(1.0)
    assert h200.prefill.correlation == pytest.approx(1.0)
    # Decode: both extrapolate the H100's line beyond batch 38; the H200 also borrows its scale, and only
    # the cross-SKU part of its error (bandwidth and memory differ) is its own.
    # A TPOT line fitted below saturation calibrates the model: it is not a saturated worker's throughput.
    assert (h100.decode.source, h200.decode.source) == ("calibrated", "transferred")
    assert h100.decode.correlation == pytest.approx(1.0, abs=1e-3)  # a reported budget is all but exact
    assert h200.decode.batch is not None and h200.decode.batch > 4 * 38.0
    extrapolation = p.extrapolation_per_doubling * math.log2(h200.decode.batch / 38.0)
    assert h200.decode.shared == pytest.approx(p.measured_uncertainty + extrapolation, rel=1e-3)
    assert 0.5 < h200.decode.correlation < 1.0


def test_a_factor_from_unsaturated_buckets_is_calibrated_not_measured() -> None:
    cal = replace(_inverted_calibration(), prefill_saturated=set())
    assert group_capacity(H200, cal, ISL, OSL).prefill.source == "calibrated"


def test_a_borrowed_figure_is_never_less_certain_than_the_uncalibrated_model() -> None:
    p = CapacityParams(model_uncertainty=0.15)
    h200 = group_capacity(H200, _inverted_calibration(), ISL, OSL, p)
    assert h200.decode.source == "transferred"
    # At most the model's held-out band (15% here): what is borrowed rests on the fleet's own figures, so
    # the model-only band's widening to the measured kernels' error does not reach it.
    assert h200.decode.uncertainty == pytest.approx(0.15, rel=1e-3)
    assert h200.decode.correlation == pytest.approx(1.0)


def test_an_uncalibrated_model_shares_what_cancels_in_cross_sku_ratios() -> None:
    p = CapacityParams()
    cal = PoolCalibration(skus={H100.key: H100.sku, H200.key: H200.sku}, kv_reported=dict(REPORTED))
    capacity = group_capacity(H200, cal, ISL, OSL, p)
    for phase, role in (("prefill", capacity.prefill), ("decode", capacity.decode)):
        assert role.source == "model"
        # The held-out band, or the measured kernels' error of TP 1-2 dense where that is wider.
        assert role.uncertainty == pytest.approx(widen(2, False, phase, p.model_uncertainty).band, rel=0.01)
        assert role.shared == pytest.approx(p.model_uncertainty - p.transfer_uncertainty, rel=0.05)


def test_a_reported_budget_comes_before_any_model_and_says_so() -> None:
    cal = PoolCalibration(skus={H100.key: H100.sku}, kv_reported={H100.key: (250_000.0, 0.0)})
    budget = kv_budget_of(H100, cal)
    assert budget.source is BudgetSource.MEASURED
    assert H100.deployment is not None
    assert budget.tokens(H100.deployment) == pytest.approx(250_000.0)
    # Its capacity rests on it: the decode batch is what 250k tokens hold of whole sequences.
    capacity = group_capacity(H100, cal, ISL, OSL)
    assert capacity.kv_budget is budget or capacity.kv_budget == budget
    assert capacity.decode.batch == pytest.approx(250_000.0 / (ISL + OSL), rel=0.01)
    # Inference from the group's own telemetry and the model come only after a measurement.
    inferred = PoolCalibration(skus={H100.key: H100.sku}, kv_bytes={H100.key: 1e9})
    assert kv_budget_of(H100, inferred).source is BudgetSource.INFERRED
    assert kv_budget_of(H100, PoolCalibration()).source is BudgetSource.MODELLED
    peer = PoolCalibration(kv_peer={H100.key: (300_000.0, 0.0, 3)}, kv_bytes={H100.key: 1e9})
    assert kv_budget_of(H100, peer).source is BudgetSource.PEER
    assert kv_budget_of(H100, peer).tokens(H100.deployment) == pytest.approx(300_000.0)


def test_evidence_says_which_budget_each_worker_rests_on() -> None:
    cal = PoolCalibration(
        skus={H100.key: H100.sku},
        kv_reported={H100.key: (250_000.0, 0.0)},
        kv_reporting={H100.key: (0, 1)},  # workers 0 and 1 report; the others run the same engine
    )
    capacity = group_capacity(H100, cal, ISL, OSL)
    assert capacity_evidence(capacity, 0)["kv_budget"] == "measured"
    assert capacity_evidence(capacity, 5)["kv_budget"] == "measured-on-peer"
    modelled = capacity_evidence(group_capacity(H100, PoolCalibration(), ISL, OSL), 0)
    assert modelled["kv_budget"] == "modelled"
    assert "reserve" in str(modelled["kv_budget_detail"])
    assert modelled["decode_capacity_uncertainty"] is not None


def _starved(budget_tokens: float | None) -> tuple[float, float]:
    """Decode uncertainty of 70B FP8 on one H100 (weights nearly fill it) and on one H200, with the
    budget reported (``budget_tokens``) or modelled (None)."""
    out = []
    for gpu in ("H100 SXM", "H200 SXM"):
        d = make_deployment(CATALOG, model="llama-3.1-70b", gpu=gpu, precision="fp8", tp=1)
        group = SkuGroup(d.gpu, 1, (0,), d)
        reported = {} if budget_tokens is None else {group.key: (budget_tokens, 0.0)}
        cal = PoolCalibration(skus={group.key: group.sku}, kv_reported=reported)
        out.append(group_capacity(group, cal, 1000.0, 1000.0).decode.uncertainty)
    return out[0], out[1]


def test_a_modelled_budget_widens_the_band_where_the_kv_cache_starves() -> None:
    p = CapacityParams()
    starved, roomy = _starved(None)
    # One H100 holds 72.7 GB of weights in 80 GB: the engine's reserve and fraction decide the budget.
    assert starved > 2 * roomy
    assert starved == pytest.approx(1.0)  # the low end of the range holds no batch at all
    assert roomy > p.model_uncertainty  # even the H200's modelled budget adds to the model's own error
    measured_starved, measured_roomy = _starved(20_000.0)
    model_band = widen(1, False, "decode", p.model_uncertainty).band
    assert measured_starved == pytest.approx(model_band, rel=0.05)
    assert measured_roomy == pytest.approx(model_band, rel=0.05)


def test_a_model_only_capacity_widens_to_the_measured_kernels_error() -> None:
    """Nothing measured: a TP 8 decode capacity spans the model's disagreement with measured kernels
    (``analyzer.model.validation``), not only its error on published rows; a transferred one the kernels'
    cross-SKU ratio error where that is wider than the held-out one."""
    p = CapacityParams()
    d = make_deployment(CATALOG, model="llama-3.1-405b", gpu="H200 SXM", precision="fp8", tp=8)
    group = SkuGroup(d.gpu, 8, (0,), d)
    cal = PoolCalibration(skus={group.key: group.sku}, kv_reported={group.key: (2_000_000.0, 0.0)})
    capacity = group_capacity(group, cal, 1000.0, 1000.0, p)
    assert capacity.decode.source == "model"
    assert widen(8, False, "decode", p.model_uncertainty).band > 1.0
    assert capacity.decode.uncertainty == pytest.approx(1.0)  # a decode band is capped at 100%
    assert capacity.prefill.uncertainty == pytest.approx(widen(8, False, "prefill", p.model_uncertainty).band)
    assert capacity.prefill.uncertainty > p.model_uncertainty


def test_moe_routing_band_is_shared_by_every_group_of_the_pool() -> None:
    groups: list[SkuGroup] = []
    for gpu in ("H100 SXM", "H200 SXM"):
        d = make_deployment(CATALOG, model="qwen3-235b-a22b", gpu=gpu, precision="fp8", tp=8)
        groups.append(SkuGroup(d.gpu, 8, (len(groups),), d))
    reported = {
        g.key: (g.deployment.hbm_bytes * 0.3 * 8 / kv_bytes_per_token_slot(g.deployment), 0.0)
        for g in groups
        if g.deployment is not None
    }
    cal = PoolCalibration(skus={g.key: g.sku for g in groups}, kv_reported=reported)
    # A dense model at TP 2 (at TP 8 its model-only band, widened to the measured kernels' error, is
    # already the widest there is).
    dense_d = make_deployment(CATALOG, model="llama-3.1-70b", gpu="H200 SXM", precision="fp8", tp=2)
    dense = SkuGroup(dense_d.gpu, 2, (9,), dense_d)
    dense_cal = PoolCalibration(skus={dense.key: dense.sku}, kv_reported={dense.key: (2_000_000.0, 0.0)})
    dense_decode = group_capacity(dense, dense_cal, 1000.0, 1000.0).decode
    for g in groups:
        decode = group_capacity(g, cal, 1000.0, 1000.0).decode
        assert decode.uncertainty > dense_decode.uncertainty  # the MoE band widens it
        assert decode.shared > dense_decode.shared  # and what widens it is common to the pool's groups


def test_a_fitted_moe_decode_carries_the_routing_band_only_as_it_changes_beyond_the_batches_seen() -> None:
    """The step times a decode line was fitted on hold the routing the engines saw: at the batches seen the
    MoE routing band does not apply; beyond them, only as far as the routing's effect on a step changes
    from the largest batch seen to the batch extrapolated to. A line seen up to 64 sequences (every expert
    of Mixtral already touched) keeps a narrow band at 128; one seen up to 4 (few experts touched) a wide
    one; the model alone the widest."""
    d = make_deployment(CATALOG, model="mixtral-8x7b", gpu="H100 SXM", precision="fp8", tp=2)
    group = SkuGroup(d.gpu, 2, (0,), d)
    reported = {group.key: (400_000.0, 0.0)}
    p = CapacityParams(max_decode_batch=128)

    def decode(seen: float | None) -> RoleCapacity:
        lines = {} if seen is None else {group.key: DecodeLine(0.9, 0.02, seen, 200)}
        cal = PoolCalibration(
            skus={group.key: group.sku}, kv_reported=reported, decode=lines, pooled_decode=0.9
        )
        return group_capacity(group, cal, 1000.0, 200.0, p).decode

    modelled, at_seen, near, few = decode(None), decode(128.0), decode(64.0), decode(4.0)
    assert modelled.source == "model" and at_seen.source == near.source == few.source == "calibrated"
    assert at_seen.batch == pytest.approx(128.0)
    assert at_seen.uncertainty == pytest.approx(p.measured_uncertainty)  # the fitted floor: no routing band
    extrapolation = p.extrapolation_per_doubling  # one doubling beyond 64
    assert p.measured_uncertainty + extrapolation < near.uncertainty < 0.1
    assert few.uncertainty > 0.15 > near.uncertainty
    assert modelled.uncertainty > few.uncertainty


def test_the_routing_band_beyond_the_batches_seen_is_zero_for_a_dense_model_and_at_the_batch_seen() -> None:
    dense = make_deployment(CATALOG, model="llama-3.1-70b", gpu="H100 SXM", precision="fp8", tp=2)
    moe = make_deployment(CATALOG, model="qwen3-235b-a22b", gpu="H200 SXM", precision="fp8", tp=8)
    cal = PoolCalibration()
    assert routing_band_beyond_seen(dense, cal, 1100.0, 512.0, 4.0) == 0.0
    assert routing_band_beyond_seen(moe, cal, 1100.0, 128.0, 128.0) == 0.0
    assert routing_band_beyond_seen(moe, cal, 1100.0, 64.0, 128.0) == 0.0  # within the batches seen
    # 128 experts, 8 per token: 4 sequences touch a fraction of them, 64 nearly all.
    assert (
        routing_band_beyond_seen(moe, cal, 1100.0, 128.0, 4.0)
        > 0.1
        > routing_band_beyond_seen(moe, cal, 1100.0, 128.0, 64.0)
    )
