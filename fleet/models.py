"""Model architectures and the pure arithmetic the performance model needs: parameters, bytes and FLOPs.

Parameter counts follow the configs: Q/K/V/O projections (MLA: low-rank Q and KV projections), gated
FFNs with three matrices (dense, routed and shared experts), routers, RMSNorm weights and untied
embeddings. They reproduce the published totals (data/benchmarks/models.csv).

FLOPs count multiply-adds as 2 FLOPs. A token costs 2 x (the active weights it multiplies), not
2 x active_params: the input embedding is a table lookup and norms are element-wise. Attention over the
context is counted explicitly: per layer and per attended key, 2 x heads x (qk_dim + v_dim) (Q.K^T and
the weighted sum of V); softmax and element-wise work are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from fleet.precision import Precision, bytes_per_param

AttentionKind = Literal["gqa", "mla"]
_BF16_BYTES = 2.0


@dataclass(frozen=True)
class ModelArch:
    """A served model's architecture, as its config describes it.

    ``dense_layers`` is the number of layers with a dense FFN of width ``intermediate``; the others are
    MoE layers (``experts_total`` routed experts of width ``moe_intermediate``, ``experts_active`` per
    token, plus ``shared_experts`` always-on experts). For a dense model it always equals ``layers``.
    MLA (DeepSeek) caches one latent of ``kv_lora_rank + qk_rope_head_dim`` per token and layer.
    Llama 4 attends in chunks of ``attention_chunk_size`` tokens except on every
    ``global_attention_every``-th layer, which attends to the whole context.
    """

    key: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    hf_ids: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    intermediate: int | None = None
    moe_intermediate: int | None = None
    experts_total: int | None = None
    experts_active: int | None = None
    shared_experts: int = 0
    shared_expert_intermediate: int | None = None
    dense_layers: int = 0
    attention: AttentionKind = "gqa"
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    q_lora_rank: int | None = None
    qkv_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    attention_chunk_size: int | None = None
    global_attention_every: int | None = None
    published_total_params: float | None = None
    published_active_params: float | None = None
    sources: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model {self.key!r}: {field} must be positive")
        if self.experts_total is None:
            if self.dense_layers not in (0, self.layers):
                raise ValueError(f"model {self.key!r}: a dense model has no MoE layers (dense_layers)")
            object.__setattr__(self, "dense_layers", self.layers)
        else:
            if self.experts_active is None or not 0 < self.experts_active <= self.experts_total:
                raise ValueError(f"model {self.key!r}: experts_active must be in 1..experts_total")
            if self.moe_intermediate is None:
                raise ValueError(f"model {self.key!r}: an MoE model needs moe_intermediate")
            if not 0 <= self.dense_layers <= self.layers:
                raise ValueError(f"model {self.key!r}: dense_layers must be in 0..layers")
        if self.dense_layers and self.intermediate is None:
            raise ValueError(f"model {self.key!r}: dense layers need intermediate")
        if self.attention == "mla" and None in (
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            self.qk_nope_head_dim,
            self.v_head_dim,
        ):
            raise ValueError(
                f"model {self.key!r}: MLA needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim"
            )
        if self.global_attention_every is not None and self.attention_chunk_size is None:
            raise ValueError(f"model {self.key!r}: global_attention_every needs attention_chunk_size")

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers


# --- parameters -------------------------------------------------------------------------------------


def _mla_dims(m: ModelArch) -> tuple[int, int, int, int]:
    assert m.kv_lora_rank and m.qk_rope_head_dim and m.qk_nope_head_dim and m.v_head_dim
    return m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim


def _attention_matmul_params(m: ModelArch) -> int:
    """Weights of one layer's attention projections (the matmuls), without biases and norms."""
    if m.attention == "gqa":
        return 2 * m.hidden * m.heads * m.head_dim + 2 * m.hidden * m.kv_heads * m.head_dim
    kv_lora, rope, nope, v_dim = _mla_dims(m)
    qk_dim = nope + rope
    if m.q_lora_rank:
        q = m.hidden * m.q_lora_rank + m.q_lora_rank * m.heads * qk_dim
    else:
        q = m.hidden * m.heads * qk_dim
    kv = m.hidden * (kv_lora + rope) + kv_lora * m.heads * (nope + v_dim)
    return q + kv + m.heads * v_dim * m.hidden


def _attention_other_params(m: ModelArch) -> int:
    """One layer's attention biases and norm weights (element-wise, no matmul FLOPs)."""
    if m.attention == "mla":
        return (m.q_lora_rank or 0) + _mla_dims(m)[0]
    bias = (m.heads + 2 * m.kv_heads) * m.head_dim if m.qkv_bias else 0
    return bias + (2 * m.head_dim if m.qk_norm else 0)


def _expert_params(m: ModelArch) -> int:
    return 3 * m.hidden * (m.moe_intermediate or 0)


def _moe_layer_params(m: ModelArch, routed_experts: int) -> int:
    shared_width = m.shared_expert_intermediate or m.moe_intermediate or 0
    router = m.hidden * (m.experts_total or 0)
    return routed_experts * _expert_params(m) + m.shared_experts * 3 * m.hidden * shared_width + router


def _block_matmul_params(m: ModelArch, routed_experts: int) -> int:
    dense_ffn = 3 * m.hidden * (m.intermediate or 0)
    return (
        m.layers * _attention_matmul_params(m)
        + m.dense_layers * dense_ffn
        + m.moe_layers * _moe_layer_params(m, routed_experts)
    )


def _embedding_params(m: ModelArch) -> int:
    """Input embedding table plus the LM head (one shared table when tied)."""
    return m.vocab * m.hidden * (1 if m.tie_word_embeddings else 2)


def _params(m: ModelArch, routed_experts: int) -> float:
    norms = m.layers * (2 * m.hidden + _attention_other_params(m)) + m.hidden
    return float(_block_matmul_params(m, routed_experts) + norms + _embedding_params(m))


def total_params(m: ModelArch) -> float:
    """Every weight of the model (text model only; vision towers and MTP modules excluded)."""
    return _params(m, m.experts_total or 0)


def active_params(m: ModelArch) -> float:
    """Weights one token uses: attention, dense FFNs, ``experts_active`` routed and the shared experts,
    routers, norms and the embeddings (equal to ``total_params`` for a dense model)."""
    return _params(m, m.experts_active or 0)


def weight_bytes(m: ModelArch, precision: Precision, *, quantized_embeddings: bool = False) -> float:
    """Bytes of the weights at ``precision``.

    Quantised checkpoints (FP8, FP4, INT4) keep the embedding table and LM head in 16-bit (ModelOpt,
    llm-compressor, AWQ and DeepSeek's FP8 release all do); pass ``quantized_embeddings=True`` for a
    format that quantises them too. Block scales of 4-bit formats (about 6% more) are not counted.
    """
    per_param = bytes_per_param(precision)
    if per_param >= _BF16_BYTES or quantized_embeddings:
        return total_params(m) * per_param
    embeddings = _embedding_params(m)
    return (total_params(m) - embeddings) * per_param + embeddings * _BF16_BYTES


def experts_touched(m: ModelArch, tokens: float, *, experts: float | None = None) -> float:
    """Expected distinct routed experts one MoE layer runs for ``tokens`` tokens (0 for a dense model).

    Each token picks ``experts_active`` (k) of the layer's E experts; with uniform, independent routing an
    expert is missed by one token with probability 1 - k/E, so E x (1 - (1 - k/E)^tokens) are touched.
    ``experts`` replaces E by the number the load really spreads over (skewed routing concentrates the
    tokens on fewer experts, so fewer are touched): uniform routing is the upper bound.
    """
    if not m.experts_total or not m.experts_active:
        return 0.0
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    spread = float(m.experts_total) if experts is None else min(float(m.experts_total), experts)
    if spread < m.experts_active:
        raise ValueError(f"routing must spread over at least experts_active ({m.experts_active}) experts")
    missed: float = (1.0 - m.experts_active / spread) ** tokens
    return spread * (1.0 - missed)


def routed_expert_bytes(m: ModelArch, precision: Precision) -> float:
    """Bytes of ONE routed expert of one layer at ``precision`` (gate, up and down projections)."""
    return _expert_params(m) * bytes_per_param(precision)


def routed_weight_bytes(m: ModelArch, precision: Precision) -> float:
    """Bytes of every routed expert of every MoE layer: what expert parallelism divides among GPUs."""
    return m.moe_layers * (m.experts_total or 0) * routed_expert_bytes(m, precision)


def decode_weight_bytes_read(
    m: ModelArch, precision: Precision, batch: int, *, experts: float | None = None
) -> float:
    """Weight bytes one decode step of ``batch`` tokens reads from HBM.

    Everything but the input embedding table (a lookup of ``batch`` rows) and the routed experts no
    token picked: a MoE layer reads :func:`experts_touched` of its experts (uniform routing, or routing
    spread over ``experts`` experts). Uniform routing touches the most experts, so for MoE this is an
    upper bound; it is exact for dense models.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    per_param = bytes_per_param(precision)
    head_bytes = m.vocab * m.hidden * (_BF16_BYTES if per_param < _BF16_BYTES else per_param)
    dense_part = _block_matmul_params(m, 0) * per_param + head_bytes
    if not m.experts_total or not m.experts_active:
        return dense_part
    touched = experts_touched(m, batch, experts=experts)
    return dense_part + m.moe_layers * touched * routed_expert_bytes(m, precision)


# --- KV cache ---------------------------------------------------------------------------------------


def _attention_layers(m: ModelArch) -> tuple[int, int]:
    """(layers attending to the whole context, layers attending within a chunk)."""
    if m.attention_chunk_size is None:
        return m.layers, 0
    full = m.layers // m.global_attention_every if m.global_attention_every else 0
    return full, m.layers - full


def _kv_bytes_per_token_per_layer(m: ModelArch, kv_precision: Precision) -> float:
    per_element = bytes_per_param(kv_precision)
    if m.attention == "mla":
        kv_lora, rope, _, _ = _mla_dims(m)
        return (kv_lora + rope) * per_element
    return 2 * m.kv_heads * m.head_dim * per_element


def kv_bytes_per_token(m: ModelArch, kv_precision: Precision) -> float:
    """KV-cache bytes one token adds over all layers, attention windows ignored.

    GQA: 2 (K and V) x layers x kv_heads x head_dim x bytes. MLA: layers x (kv_lora_rank +
    qk_rope_head_dim) x bytes (the compressed latent and the shared RoPE key). Scale factors of
    quantised caches are not counted.
    """
    return m.layers * _kv_bytes_per_token_per_layer(m, kv_precision)


def kv_bytes_for_context(
    m: ModelArch, context_len: int, kv_precision: Precision, *, windowed: bool = True
) -> float:
    """KV-cache bytes one sequence of ``context_len`` tokens holds.

    Chunked-attention layers (Llama 4) hold at most ``attention_chunk_size`` tokens when the engine frees
    KV outside the window (``windowed``, as vLLM's hybrid KV-cache manager does); an engine without
    that holds every token on every layer, which ``windowed=False`` gives.
    """
    _check_len("context_len", context_len)
    full, chunked = _attention_layers(m)
    held = min(context_len, m.attention_chunk_size) if windowed and m.attention_chunk_size else context_len
    return _kv_bytes_per_token_per_layer(m, kv_precision) * (full * context_len + chunked * held)


def attention_kv_read_bytes_per_token(m: ModelArch, context_len: int, kv_precision: Precision) -> float:
    """KV bytes a decode step reads for one sequence whose new token is the ``context_len``-th.

    Full-attention layers read the whole context; chunked layers only the keys of the token's chunk.
    """
    _check_len("context_len", context_len)
    full, chunked = _attention_layers(m)
    keys = full * context_len + chunked * _keys_in_chunk(m, context_len)
    return _kv_bytes_per_token_per_layer(m, kv_precision) * keys


# --- FLOPs ------------------------------------------------------------------------------------------


def _check_len(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _keys_in_chunk(m: ModelArch, position: int) -> int:
    """Keys the token at 1-based ``position`` attends to in a chunked layer."""
    if position == 0 or m.attention_chunk_size is None:
        return position
    return (position - 1) % m.attention_chunk_size + 1


def _causal_keys(n: int) -> int:
    """Sum over positions 1..n of the keys each attends to under a causal mask."""
    return n * (n + 1) // 2


def _chunked_causal_keys(n: int, chunk: int) -> int:
    whole, rest = divmod(n, chunk)
    return whole * _causal_keys(chunk) + _causal_keys(rest)


def _attention_flops_per_key(m: ModelArch, *, absorbed: bool) -> int:
    """FLOPs one layer spends per (query token, attended key): Q.K^T plus the weighted sum of V.

    MLA in prefill attends with up-projected heads (qk = nope + rope, v = v_head_dim); in decode the
    engines absorb the up-projections and attend over the latent (qk = kv_lora + rope, v = kv_lora).
    """
    if m.attention == "gqa":
        return 2 * m.heads * 2 * m.head_dim
    kv_lora, rope, nope, v_dim = _mla_dims(m)
    if absorbed:
        return 2 * m.heads * (kv_lora + rope + kv_lora)
    return 2 * m.heads * (nope + rope + v_dim)


def prefill_flops(m: ModelArch, prompt_tokens: int, cached_tokens: int = 0) -> float:
    """FLOPs to prefill a prompt whose first ``cached_tokens`` are already in the KV cache.

    = 2 x new x (active matmul weights: attention projections, dense FFN, routed and shared experts,
      router)
    + 2 x vocab x hidden (logits of the last position only, as serving engines compute)
    + attention: per layer, 2 x heads x (qk_dim + v_dim) x sum over new positions p of the keys p sees
      (causal: p for full attention, its position within the chunk for chunked layers)
    + MLA only: 2 x cached x layers x kv_lora_rank x heads x (qk_nope + v_head) to up-project the cached
      latents the new tokens attend to.
    """
    _check_len("prompt_tokens", prompt_tokens)
    _check_len("cached_tokens", cached_tokens)
    if cached_tokens > prompt_tokens:
        raise ValueError(f"cached_tokens ({cached_tokens}) exceeds prompt_tokens ({prompt_tokens})")
    new = prompt_tokens - cached_tokens
    if new == 0:
        return 0.0
    linear = 2 * new * _block_matmul_params(m, m.experts_active or 0) + 2 * m.vocab * m.hidden
    full, chunked = _attention_layers(m)
    keys = full * (_causal_keys(prompt_tokens) - _causal_keys(cached_tokens))
    if chunked and m.attention_chunk_size:
        chunk = m.attention_chunk_size
        keys += chunked * (
            _chunked_causal_keys(prompt_tokens, chunk) - _chunked_causal_keys(cached_tokens, chunk)
        )
    attention = keys * _attention_flops_per_key(m, absorbed=False)
    up_projection = 0
    if m.attention == "mla" and cached_tokens:
        kv_lora, _, nope, v_dim = _mla_dims(m)
        up_projection = 2 * cached_tokens * m.layers * kv_lora * m.heads * (nope + v_dim)
    return float(linear + attention + up_projection)


def decode_flops_per_token(m: ModelArch, context_len: int) -> float:
    """FLOPs to generate the token at position ``context_len`` (it attends to ``context_len`` keys).

    = 2 x (active matmul weights + vocab x hidden for the logits) + per layer 2 x heads x (qk_dim +
    v_dim) x keys attended (MLA absorbed: qk over the latent and RoPE key, v over the latent).
    For GQA models this equals ``prefill_flops(m, context_len, context_len - 1)``.
    """
    _check_len("context_len", context_len)
    linear = 2 * (_block_matmul_params(m, m.experts_active or 0) + m.vocab * m.hidden)
    full, chunked = _attention_layers(m)
    keys = full * context_len + chunked * _keys_in_chunk(m, context_len)
    return float(linear + keys * _attention_flops_per_key(m, absorbed=True))


# --- catalog ----------------------------------------------------------------------------------------


def _normalise_model_id(served_model_id: str) -> str:
    last = served_model_id.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    return re.sub(r"[\s_:]+", "-", last)


class ModelCatalog:
    """The known architectures and resolution of the model ids engines report.

    An id resolves when its last path component (case ignored; ``_``, ``:`` and spaces read as ``-``)
    equals a model's key, an ``hf_ids`` entry's last component or an alias, after dropping
    trailing ``-``-separated variant tokens that fully match one of ``variant_suffixes``
    ("-Instruct", "-FP8", "-AWQ", "-2507", ...). Anything else resolves to ``None``.
    """

    def __init__(self, models: Mapping[str, ModelArch], *, variant_suffixes: Sequence[str]) -> None:
        self._models: Mapping[str, ModelArch] = MappingProxyType(dict(models))
        self._suffixes = [re.compile(s, re.IGNORECASE) for s in variant_suffixes]
        self._index: dict[str, str] = {}
        for key, model in self._models.items():
            if key != model.key:
                raise ValueError(f"model registered as {key!r} carries key {model.key!r}")
            for name in (model.key, *model.hf_ids, *model.aliases):
                normalised = _normalise_model_id(name)
                claimed_by = self._index.setdefault(normalised, key)
                if claimed_by != key:
                    raise ValueError(f"model id {name!r} is claimed by both {claimed_by!r} and {key!r}")

    @property
    def models(self) -> Mapping[str, ModelArch]:
        return self._models

    def get(self, key: str) -> ModelArch:
        """The model with this catalog key; ``KeyError`` naming the known keys otherwise."""
        try:
            return self._models[key]
        except KeyError:
            raise KeyError(f"unknown model {key!r}; known: {', '.join(sorted(self._models))}") from None

    def resolve(self, served_model_id: str) -> ModelArch | None:
        """The architecture of a served model id, or ``None`` when the catalog does not know it."""
        candidate = _normalise_model_id(served_model_id)
        while candidate:
            key = self._index.get(candidate)
            if key is not None:
                return self._models[key]
            head, sep, last = candidate.rpartition("-")
            if not sep or not any(s.fullmatch(last) for s in self._suffixes):
                return None
            candidate = head
        return None
