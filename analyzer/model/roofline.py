"""Roofline time of one engine iteration, operator class by operator class.

Each class takes max(FLOPs / achieved compute, bytes / achieved bandwidth), and the classes' times add.
FLOPs and bytes come from ``fleet.models``. Reasoning: docs/analyzer.md#roofline
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.model.activations import activation_bytes_per_token
from analyzer.model.collectives import Link, allreduce_seconds
from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import EfficiencyParams, EngineLimits
from fleet.contract import Bottleneck
from fleet.models import (
    attention_kv_read_bytes_per_token,
    decode_flops_per_token,
    decode_weight_bytes_read,
    kv_bytes_for_context,
    weight_bytes,
)

# GPUs without an NVLink-class figure in the catalog talk over PCIe: Gen4 x16, both directions together.
PCIE_FALLBACK_BYTES_PER_S = 64e9
_ACTIVATION_BYTES = 2.0  # all-reduces carry 16-bit activations whatever the weight precision
_ALLREDUCES_PER_LAYER = 2  # after attention and after the FFN (Megatron-style tensor parallelism)


@dataclass(frozen=True)
class StepTime:
    """Seconds one iteration spends per operator class (already divided by the achieved rates)."""

    matmul_compute_s: float
    weight_read_s: float
    attention_compute_s: float
    kv_read_s: float
    comm_s: float
    overhead_s: float
    activation_s: float = 0.0

    @property
    def matmul_s(self) -> float:
        return max(self.matmul_compute_s, self.weight_read_s)

    @property
    def attention_s(self) -> float:
        return max(self.attention_compute_s, self.kv_read_s)

    @property
    def total_s(self) -> float:
        return self.matmul_s + self.attention_s + self.activation_s + self.comm_s + self.overhead_s

    @property
    def compute_bound_s(self) -> float:
        """Time in operators limited by compute."""
        matmul = self.matmul_compute_s if self.matmul_compute_s >= self.weight_read_s else 0.0
        attention = self.attention_compute_s if self.attention_compute_s >= self.kv_read_s else 0.0
        return matmul + attention

    @property
    def memory_bound_s(self) -> float:
        """Time in operators limited by HBM bandwidth (the activation kernels always are)."""
        return self.matmul_s + self.attention_s + self.activation_s - self.compute_bound_s

    def bottleneck(self) -> Bottleneck:
        """Compute, memory bandwidth, or under-utilised when communication and overhead dominate."""
        fixed = self.comm_s + self.overhead_s
        if fixed > max(self.compute_bound_s, self.memory_bound_s):
            return Bottleneck.UNDERUTILISED
        if self.compute_bound_s >= self.memory_bound_s:
            return Bottleneck.COMPUTE
        return Bottleneck.MEMORY_BANDWIDTH

    def as_dict(self) -> dict[str, float]:
        return {
            "matmul_compute_s": self.matmul_compute_s,
            "weight_read_s": self.weight_read_s,
            "attention_compute_s": self.attention_compute_s,
            "kv_read_s": self.kv_read_s,
            "activation_s": self.activation_s,
            "comm_s": self.comm_s,
            "overhead_s": self.overhead_s,
            "total_s": self.total_s,
        }


def kv_replication(d: Deployment) -> float:
    """How many copies of each token's KV the instance holds: every GPU keeps at least one KV head
    (GQA with tp > kv_heads), and tensor parallelism replicates an MLA latent on every GPU."""
    if d.model.attention == "mla":
        return float(d.tp)
    return max(1.0, d.tp / d.model.kv_heads)


def kv_bytes_per_sequence(d: Deployment, seq_len: int) -> float:
    """KV bytes the instance reserves for one sequence of ``seq_len`` tokens (all replicas)."""
    return kv_bytes_for_context(d.model, seq_len, d.kv_precision) * kv_replication(d)


def kv_budget_bytes(d: Deployment, params: EfficiencyParams, limits: EngineLimits) -> float:
    """KV-cache bytes the instance can hold: (HBM x TP - weights - reserve x TP) x the KV fraction."""
    free = d.hbm_bytes * d.tp - weight_bytes(d.model, d.precision) - params.runtime_reserve_bytes * d.tp
    return max(0.0, free * limits.kv_memory_fraction)


def kv_capacity_sequences(
    d: Deployment, params: EfficiencyParams, limits: EngineLimits, seq_len: int
) -> float:
    """Sequences of ``seq_len`` tokens whose KV fits at once (fractional; < 1 means not even one)."""
    return kv_budget_bytes(d, params, limits) / kv_bytes_per_sequence(d, max(1, seq_len))


def link_bytes_per_s(d: Deployment, params: EfficiencyParams) -> float:
    """What the GPU's link to its peers delivers to collectives (the catalog's figure, else PCIe, at the
    fitted all-reduce efficiency)."""
    return (
        d.gpu.interconnect_bytes_per_s or PCIE_FALLBACK_BYTES_PER_S
    ) * params.allreduce_bandwidth_efficiency


def collective_link(d: Deployment, params: EfficiencyParams) -> Link:
    """The instance's link as its collectives see it (achieved bandwidth, fitted latency per call)."""
    return Link(link_bytes_per_s(d, params), params.allreduce_peer_latency_s)


def allreduce_time(d: Deployment, params: EfficiencyParams, tokens: float) -> float:
    """Tensor-parallel all-reduces of one iteration over ``tokens`` tokens (:mod:`collectives`)."""
    if d.tp == 1 or tokens <= 0:
        return 0.0
    message = tokens * d.model.hidden * _ACTIVATION_BYTES
    one = allreduce_seconds(d.tp, message, collective_link(d, params))
    return _ALLREDUCES_PER_LAYER * d.model.layers * one


def step_time(
    d: Deployment,
    params: EfficiencyParams,
    *,
    decode_seqs: float,
    context_len: float,
    prefill_tokens: float = 0.0,
    prefill_flops: float = 0.0,
) -> StepTime:
    """One iteration decoding ``decode_seqs`` sequences at ``context_len`` and prefilling
    ``prefill_tokens`` prompt tokens that cost ``prefill_flops`` (matmuls and their attention)."""
    if decode_seqs < 0 or prefill_tokens < 0 or prefill_flops < 0 or context_len < 0:
        raise ValueError("step sizes must be >= 0")
    tokens = decode_seqs + prefill_tokens
    compute = params.compute_efficiency * d.tp
    bandwidth = params.bandwidth_efficiency * d.hbm_bandwidth * d.tp
    ctx = max(1, round(context_len))
    linear_per_token = decode_flops_per_token(d.model, 0)
    attention_flops = decode_seqs * (decode_flops_per_token(d.model, ctx) - linear_per_token)
    kv_bytes = (
        decode_seqs * attention_kv_read_bytes_per_token(d.model, ctx, d.kv_precision) * kv_replication(d)
    )
    weights = decode_weight_bytes_read(d.model, d.precision, max(1, math.ceil(tokens)))
    return StepTime(
        matmul_compute_s=(decode_seqs * linear_per_token + prefill_flops) / (compute * d.matmul_peak_flops),
        weight_read_s=weights / bandwidth,
        attention_compute_s=attention_flops / (compute * d.attention_peak_flops),
        kv_read_s=kv_bytes / bandwidth,
        activation_s=tokens * activation_bytes_per_token(d) / (params.bandwidth_efficiency * d.hbm_bandwidth),
        comm_s=allreduce_time(d, params, tokens),
        overhead_s=params.step_overhead_s,
    )
