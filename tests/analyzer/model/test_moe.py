"""Mixture-of-experts physics and the parallel layout: experts touched per step, what each GPU holds and
reads under expert and attention data parallelism, and the routing band."""

from __future__ import annotations

import math

import pytest

from analyzer.model import roofline
from analyzer.model.deployment import Deployment, DeploymentError, make_deployment
from analyzer.model.efficiency import CALIBRATED
from analyzer.model.moe import (
    dispatch_time,
    ep_imbalance,
    kv_bytes_per_sequence,
    routing_experts,
    step_time,
    weights_per_gpu,
)
from analyzer.model.perf_model import Workload, predict
from fleet.catalog import load_catalog
from fleet.models import experts_touched, routed_expert_bytes, routed_weight_bytes, weight_bytes

CATALOG = load_catalog()


def moe(
    gpu: str = "H100-SXM", tp: int = 8, ep: int = 1, dp: bool = False, model: str = "qwen3-235b-a22b"
) -> Deployment:
    return make_deployment(CATALOG, model=model, gpu=gpu, precision="fp8", tp=tp, ep=ep, attention_dp=dp)


def test_experts_touched_follows_uniform_routing() -> None:
    m = CATALOG.models.get("qwen3-235b-a22b")  # 128 experts, 8 per token
    assert experts_touched(m, 1) == pytest.approx(8.0)
    assert experts_touched(m, 16) == pytest.approx(128 * (1 - (120 / 128) ** 16))
    assert experts_touched(m, 4096) == pytest.approx(128.0, rel=1e-9)
    # Routing concentrated on half the experts touches fewer of them at every batch.
    for tokens in (2, 16, 64):
        assert experts_touched(m, tokens, experts=64) < experts_touched(m, tokens)
    assert experts_touched(CATALOG.models.get("llama-3.1-70b"), 100) == 0.0
    with pytest.raises(ValueError, match="experts_active"):
        experts_touched(m, 4, experts=4)


def test_resident_memory_follows_total_parameters_and_the_layout() -> None:
    tp_only = moe()
    total = weight_bytes(tp_only.model, tp_only.precision)
    assert weights_per_gpu(tp_only) == pytest.approx(total / 8)
    assert weights_per_gpu(moe(ep=8)) == pytest.approx(total / 8)  # EP moves whole experts, same share
    routed = routed_weight_bytes(tp_only.model, tp_only.precision)
    # Attention data parallelism keeps a full copy of everything but the routed experts on every GPU.
    assert weights_per_gpu(moe(ep=8, dp=True)) == pytest.approx(total - routed + routed / 8)
    assert routed / total > 0.9  # Qwen3-235B-A22B: almost all of it is routed experts


def test_attention_dp_holds_every_kv_head_of_its_own_sequences() -> None:
    tp_only, dp = moe(), moe(ep=8, dp=True)
    # Qwen3 has 4 KV heads: TP8 replicates each twice; attention DP replicates nothing.
    assert roofline.kv_replication(tp_only) == 2.0
    assert kv_bytes_per_sequence(tp_only, 1000) == pytest.approx(2 * kv_bytes_per_sequence(dp, 1000))


def test_tensor_parallel_moe_is_the_plain_roofline() -> None:
    d = moe()
    for batch in (1, 64, 1024):
        ours = step_time(d, CALIBRATED, decode_seqs=batch, context_len=1500)
        assert ours == roofline.step_time(d, CALIBRATED, decode_seqs=batch, context_len=1500)


def test_expert_parallelism_waits_for_the_busiest_gpu() -> None:
    d = moe(ep=8)
    assert ep_imbalance(moe(), 100) == 1.0
    small, large = ep_imbalance(d, 8), ep_imbalance(d, 8192)
    assert small > large > 1.0
    pairs = 8192 * 8
    expected = 1 + math.sqrt(pairs / 8 * 7 / 8) * math.sqrt(2 * math.log(8)) / (pairs / 8)
    assert large == pytest.approx(expected)
    plain = step_time(moe(), CALIBRATED, decode_seqs=256, context_len=1500)
    ep = step_time(d, CALIBRATED, decode_seqs=256, context_len=1500)
    assert ep.matmul_compute_s > plain.matmul_compute_s
    assert ep.comm_s == plain.comm_s  # attention still all-reduces; experts combine in the same all-reduce


def test_attention_dp_reads_its_own_copy_and_dispatches_tokens() -> None:
    plain = step_time(moe(), CALIBRATED, decode_seqs=256, context_len=1500)
    dp = step_time(moe(ep=8, dp=True), CALIBRATED, decode_seqs=256, context_len=1500)
    assert dp.weight_read_s > plain.weight_read_s  # the replicated non-expert weights
    assert dp.kv_read_s == pytest.approx(plain.kv_read_s / 2)  # no replicated KV heads
    d = moe(ep=8, dp=True)
    m = d.model
    assert dispatch_time(moe(), CALIBRATED, 256) == 0.0
    assert d.gpu.interconnect_bytes_per_s is not None and m.experts_active is not None
    link = d.gpu.interconnect_bytes_per_s * CALIBRATED.allreduce_bandwidth_efficiency
    volume = 256 / 8 * m.experts_active * m.hidden * 2 * 7 / 8
    expected = (
        2 * m.moe_layers * (7 * CALIBRATED.allreduce_peer_latency_s + volume / link)
    )  # 7 peers, each way
    assert dp.comm_s == pytest.approx(expected)


def test_a_gpu_never_reads_more_experts_than_it_holds() -> None:
    d = moe(ep=8)
    step = step_time(d, CALIBRATED, decode_seqs=8192, context_len=100)
    bandwidth = CALIBRATED.bandwidth_efficiency * d.hbm_bandwidth
    held = routed_weight_bytes(d.model, d.precision) / 8
    assert step.weight_read_s * bandwidth <= held + weight_bytes(d.model, d.precision) / 8


def test_routing_band_spreads_over_half_the_experts() -> None:
    d = moe()
    assert routing_experts(d) == 64.0
    assert (
        routing_experts(make_deployment(CATALOG, model="llama-3.1-8b", gpu="H100-SXM", precision="fp8", tp=1))
        is None
    )
    # Skewed routing reads fewer experts at a moderate batch: a faster step.
    uniform = step_time(d, CALIBRATED, decode_seqs=16, context_len=1000)
    skewed = step_time(d, CALIBRATED, decode_seqs=16, context_len=1000, experts=64.0)
    assert skewed.weight_read_s < uniform.weight_read_s
    prediction = predict(d, Workload(1000, 1000, 16))
    assert prediction.regime == "moe"
    assert prediction.uncertainty_parts["routing"] > 0.0
    low, high = prediction.ranges["output"]
    assert low < prediction.output_tokens_per_s < high


def test_layouts_that_cannot_be_are_refused() -> None:
    with pytest.raises(DeploymentError, match="ep must divide"):
        moe(tp=8, ep=3)
    with pytest.raises(DeploymentError, match="dense model"):
        make_deployment(CATALOG, model="llama-3.1-70b", gpu="H100-SXM", precision="fp8", tp=8, ep=8)
    assert moe(ep=8, dp=True).layout == "TP8 EP8 attention-DP"
    assert routed_expert_bytes(moe().model, moe().precision) == 3 * 4096 * 1536
