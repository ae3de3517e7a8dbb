"""Mixture-of-experts layouts: what each GPU of an instance holds, reads and exchanges per iteration.

A dense or tensor-parallel instance follows :mod:`analyzer.model.roofline` exactly. Expert parallelism,
attention data parallelism and routing skew change it. Reasoning: docs/analyzer.md#moe
"""

from __future__ import annotations

import math
from dataclasses import replace

from analyzer.model import roofline
from analyzer.model.collectives import all_to_all_seconds
from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import EfficiencyParams
from analyzer.model.roofline import StepTime
from fleet.models import (
    decode_weight_bytes_read,
    experts_touched,
    kv_bytes_for_context,
    routed_expert_bytes,
    routed_weight_bytes,
    weight_bytes,
)

# The routing band's alternative: tokens spread over this share of a layer's experts (a router whose load
# concentrates on half the experts). An assumption that bounds the band, not a measured skew.
ROUTING_SPREAD = 0.5
_ACTIVATION_BYTES = 2.0  # dispatch and combine move 16-bit hidden states


def weights_per_gpu(d: Deployment) -> float:
    """Weight bytes one GPU of the instance holds: everything split over ``tp`` GPUs, or, under attention
    data parallelism, a full copy of the non-expert weights plus its share of the routed experts."""
    total = weight_bytes(d.model, d.precision)
    if not d.attention_dp:
        return total / d.tp
    routed = routed_weight_bytes(d.model, d.precision)
    return (total - routed) + routed / d.tp


def kv_replication(d: Deployment) -> float:
    """Copies of each token's KV the instance holds: none beyond one under attention data parallelism
    (each GPU keeps its own sequences), else as tensor parallelism replicates KV heads."""
    return 1.0 if d.attention_dp else roofline.kv_replication(d)


def kv_bytes_per_sequence(d: Deployment, seq_len: int) -> float:
    """KV bytes the instance reserves for one sequence of ``seq_len`` tokens (all replicas)."""
    return kv_bytes_for_context(d.model, max(1, seq_len), d.kv_precision) * kv_replication(d)


def kv_bytes_per_token_slot(d: Deployment) -> float:
    """KV bytes of one token slot of the engine's pool (one token in every layer, all replicas): what an
    engine's reported budget in tokens multiplies."""
    return kv_bytes_per_sequence(d, 1)


def ep_imbalance(d: Deployment, tokens: float) -> float:
    """Routed work on the busiest of ``ep`` expert-parallel GPUs over the mean: the (token, expert) pairs
    of an iteration land on a GPU with probability 1/ep; the expected maximum of ``ep`` such binomial
    counts is about mean + sd x sqrt(2 ln ep). 1 without expert parallelism."""
    if d.ep <= 1 or not d.model.experts_active or tokens <= 0:
        return 1.0
    pairs = tokens * d.model.experts_active
    p = 1.0 / d.ep
    mean = pairs * p
    sd = math.sqrt(pairs * p * (1.0 - p))
    return 1.0 + sd * math.sqrt(2.0 * math.log(d.ep)) / mean


def _routed_bytes_read(d: Deployment, tokens: int, experts: float | None) -> float:
    m = d.model
    return m.moe_layers * experts_touched(m, tokens, experts=experts) * routed_expert_bytes(m, d.precision)


def _routed_flops(d: Deployment, tokens: float) -> float:
    """Multiply-add FLOPs of the routed experts for ``tokens`` tokens (gate, up and down projections)."""
    m = d.model
    return 2.0 * tokens * (m.experts_active or 0) * m.moe_layers * 3 * m.hidden * (m.moe_intermediate or 0)


def dispatch_time(d: Deployment, params: EfficiencyParams, tokens: float) -> float:
    """Attention-data-parallel MoE layers: each GPU sends its tokens' hidden states to the GPUs of their
    ``k`` experts and gets the results back (an all-to-all each way per MoE layer over ``tp - 1`` peers,
    :func:`analyzer.model.collectives.all_to_all_seconds`)."""
    m = d.model
    if not d.attention_dp or d.tp == 1 or tokens <= 0 or not m.experts_active:
        return 0.0
    volume = (tokens / d.tp) * m.experts_active * m.hidden * _ACTIVATION_BYTES * (d.tp - 1) / d.tp
    one_way = all_to_all_seconds(d.tp, volume, roofline.collective_link(d, params))
    return 2.0 * m.moe_layers * one_way


def step_time(
    d: Deployment,
    params: EfficiencyParams,
    *,
    decode_seqs: float,
    context_len: float,
    prefill_tokens: float = 0.0,
    prefill_flops: float = 0.0,
    experts: float | None = None,
) -> StepTime:
    """One iteration of the instance (see :func:`analyzer.model.roofline.step_time` for the operator classes),
    with expert parallelism, attention data parallelism and the routing spread ``experts`` applied."""
    base = roofline.step_time(
        d,
        params,
        decode_seqs=decode_seqs,
        context_len=context_len,
        prefill_tokens=prefill_tokens,
        prefill_flops=prefill_flops,
    )
    if not d.is_moe or (d.ep == 1 and not d.attention_dp and experts is None):
        return base
    tokens = decode_seqs + prefill_tokens
    n = max(1, math.ceil(tokens))
    per_gpu_bandwidth = params.bandwidth_efficiency * d.hbm_bandwidth
    uniform_routed = _routed_bytes_read(d, n, None)
    non_routed = decode_weight_bytes_read(d.model, d.precision, n) - uniform_routed
    routed = _routed_bytes_read(d, n, experts)
    imbalance = ep_imbalance(d, tokens)
    # A GPU never reads more than the experts it holds (its share of all of them).
    routed_per_gpu = min(routed_weight_bytes(d.model, d.precision) / d.tp, routed / d.tp * imbalance)
    non_routed_per_gpu = non_routed if d.attention_dp else non_routed / d.tp
    weight_read_s = (non_routed_per_gpu + routed_per_gpu) / per_gpu_bandwidth
    # The busiest expert-parallel GPU multiplies more than the mean: extra routed FLOPs at the same rate.
    extra_flops = _routed_flops(d, tokens) * (imbalance - 1.0)
    matmul_compute_s = base.matmul_compute_s + extra_flops / (
        params.compute_efficiency * d.tp * d.matmul_peak_flops
    )
    kv_read_s = base.kv_read_s * kv_replication(d) / roofline.kv_replication(d)
    comm_s = dispatch_time(d, params, tokens) if d.attention_dp else base.comm_s
    return replace(
        base,
        matmul_compute_s=matmul_compute_s,
        weight_read_s=weight_read_s,
        kv_read_s=kv_read_s,
        comm_s=comm_s,
    )


def routing_experts(d: Deployment) -> float | None:
    """The expert count of the routing band's skewed alternative (None for a dense model)."""
    m = d.model
    if not m.experts_total or not m.experts_active:
        return None
    return max(float(m.experts_active), ROUTING_SPREAD * m.experts_total)
