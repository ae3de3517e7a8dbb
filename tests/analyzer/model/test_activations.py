"""analyzer/model/activations.py: the HBM traffic between the matmuls, and what it does to a step."""

from __future__ import annotations

import pytest

from analyzer.model import roofline
from analyzer.model.activations import activation_bytes_per_token
from analyzer.model.deployment import Deployment, make_deployment
from analyzer.model.efficiency import CALIBRATED
from fleet.catalog import load_catalog
from fleet.models import prefill_flops

CATALOG = load_catalog()


def deployment(model: str, gpu: str = "H100-SXM", tp: int = 1, ep: int = 1, dp: bool = False) -> Deployment:
    return make_deployment(CATALOG, model=model, gpu=gpu, precision="fp8", tp=tp, ep=ep, attention_dp=dp)


def test_a_dense_layer_counts_the_norms_rotary_and_gated_activation() -> None:
    """Llama 3.1 70B at TP 2, written out from its config: 80 layers, hidden 8192, 64 query and 8 KV heads
    of 128, FFN 28672; 16-bit elements."""
    norms = 8 * 8192  # two fused residual-add + RMSNorm kernels, not split by TP
    rotary = 2 * (64 + 8) * 128 / 2
    gated = 3 * 28672 / 2
    expected = 80 * (norms + rotary + gated) * 2
    assert activation_bytes_per_token(deployment("llama-3.1-70b", tp=2)) == pytest.approx(expected)
    assert expected == pytest.approx(18.8e6, rel=0.01)


def test_tensor_parallelism_splits_all_but_the_norms() -> None:
    one = activation_bytes_per_token(deployment("llama-3.1-8b", tp=1))
    two = activation_bytes_per_token(deployment("llama-3.1-8b", tp=2))
    norms = 32 * 8 * 4096 * 2
    assert two - norms == pytest.approx((one - norms) / 2)


def test_moe_layers_count_the_experts_a_token_passes_through() -> None:
    """Qwen3-235B-A22B: 8 of 128 experts of width 1536 per token, and their permute and un-permute."""
    d = deployment("qwen3-235b-a22b", tp=8, ep=8)
    m = d.model
    per_layer = 8 * m.hidden + (2 * (m.heads + m.kv_heads) * m.head_dim + 3 * 8 * 1536 + 4 * 8 * m.hidden) / 8
    assert activation_bytes_per_token(d) == pytest.approx(m.layers * per_layer * 2)


def test_attention_data_parallelism_splits_the_norms_too() -> None:
    tp = activation_bytes_per_token(deployment("qwen3-235b-a22b", tp=8, ep=8))
    dp = activation_bytes_per_token(deployment("qwen3-235b-a22b", tp=8, ep=8, dp=True))
    m = deployment("qwen3-235b-a22b", tp=8).model
    assert tp - dp == pytest.approx(m.layers * 8 * m.hidden * (1 - 1 / 8) * 2)


def _prefill_s(gpu: str, tokens: int) -> float:
    d = deployment("llama-3.1-70b", gpu=gpu, tp=2)
    step = roofline.step_time(
        d, CALIBRATED, decode_seqs=0, context_len=0, prefill_tokens=tokens,
        prefill_flops=prefill_flops(d.model, tokens),
    )  # fmt: skip
    assert step.activation_s > 0
    return step.total_s


def test_an_h200_prefills_a_few_percent_faster_than_an_h100() -> None:
    """Same compute, faster HBM: only the activation traffic differs in a long, compute-bound prefill."""
    edge = _prefill_s("H100-SXM", 8192) / _prefill_s("H200-SXM", 8192)
    assert 1.01 < edge < 1.08


def test_small_decode_batches_barely_notice_it() -> None:
    d = deployment("llama-3.1-70b", tp=2)
    step = roofline.step_time(d, CALIBRATED, decode_seqs=8, context_len=2048)
    assert step.activation_s < 0.02 * step.total_s
    assert step.memory_bound_s >= step.weight_read_s + step.activation_s
