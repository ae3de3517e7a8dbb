"""HBM traffic of the operators between the matmuls: norms, residual adds, rotary, the gated activation.

These kernels stream each token's activations through HBM and do almost no arithmetic, so they take
bytes / bandwidth, one after another, never hidden under a matmul. Per token they move a few hundred
kilobytes per layer of a 70B model: next to the weights at small decode batches they are nothing, but in a
long prefill, where the matmuls are compute-bound, they are the part of the pass that a faster HBM
shortens. That is why an H200 prefills a few percent faster than an H100 of the same compute.
Reasoning: docs/analyzer.md#activations
"""

from __future__ import annotations

from analyzer.model.deployment import Deployment
from fleet.models import ModelArch

_ELEMENT_BYTES = 2.0  # activations stay 16-bit between kernels whatever the weight precision
# Per layer, two fused residual-add + RMSNorm kernels each read the input and the residual and write the
# normalised output and the new residual: four hidden-sized vectors each.
_NORM_VECTORS_PER_LAYER = 8
# The gated activation (SwiGLU) reads the gate and up projections and writes their product.
_GATED_ACTIVATION_VECTORS = 3
# Rotary embedding reads and writes queries and keys.
_ROTARY_PASSES = 2
# An MoE layer copies each token's hidden state to its experts' order and back (permute, un-permute),
# reading and writing each copy.
_PERMUTE_VECTORS_PER_EXPERT = 4


def _ffn_width(m: ModelArch) -> float:
    """Mean FFN width one token passes through per layer (routed and shared experts for MoE layers)."""
    dense = m.dense_layers * (m.intermediate or 0)
    moe = m.moe_layers * (
        (m.experts_active or 0) * (m.moe_intermediate or 0)
        + m.shared_experts * (m.shared_expert_intermediate or m.moe_intermediate or 0)
    )
    return (dense + moe) / m.layers


def _mean_permute_vectors(m: ModelArch) -> float:
    return _PERMUTE_VECTORS_PER_EXPERT * (m.experts_active or 0) * m.moe_layers / m.layers


def activation_bytes_per_token(d: Deployment) -> float:
    """HBM bytes the non-matmul kernels of all layers move per token, on one GPU of the instance.

    Tensor parallelism splits the heads and the FFN over the GPUs but every GPU holds the whole hidden
    state after each all-reduce, so the norms are not split; under attention data parallelism each GPU
    holds only its own tokens."""
    m = d.model
    sharded = (
        _ROTARY_PASSES * (m.heads + m.kv_heads) * m.head_dim
        + _GATED_ACTIVATION_VECTORS * _ffn_width(m)
        + _mean_permute_vectors(m) * m.hidden
    ) / d.tp
    replicated = _NORM_VECTORS_PER_LAYER * m.hidden / (d.tp if d.attention_dp else 1)
    return m.layers * (sharded + replicated) * _ELEMENT_BYTES
