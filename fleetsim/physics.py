"""Step times of a serving engine on a SKU: the simulator's own physics, richer than the analyzer's model.

One engine step of a tensor-parallel worker processes ``B`` decode tokens (one per running sequence)
and ``c`` prefill tokens. Its time on each GPU of the group is

    GEMMs      max(FLOPs x (M + M0) / M / (peak x e_gemm), weight bytes read / (HBM bw x e_bw))
    attention  decode: KV bytes of the B contexts / (bw x e_bw); both phases: FLOPs / (BF16 peak x e_attn)
    TP comm    2 all-reduces per layer: latency + activations x 2 (tp - 1) / tp / (link x e_link)
    launch     a fixed cost per layer (kernel launches, norms, sampling)

with M = B + c tokens in the GEMMs and M0 the tile-quantisation loss of small-M GEMMs (a GEMM of M rows
runs at M / (M + M0) of its large-M rate). ``speed`` is the group's per-GPU efficiency (its slowest GPU:
tensor parallelism waits for the last rank). The KV cache holds (HBM x utilisation - weights - runtime
reserve) x free fraction bytes per GPU; a decode batch is bounded by it, by the engine's maximum batch and
by the TPOT target. FLOP and byte counts come from fleet.models; peaks from fleet.gpus.

Everything is vectorised: the per-worker coefficients are arrays over workers and the traffic statistics
arrays over windows, broadcast to (windows, workers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleet.gpus import GpuSku
from fleet.models import (
    ModelArch,
    decode_flops_per_token,
    decode_weight_bytes_read,
    kv_bytes_per_token,
    prefill_flops,
    weight_bytes,
)
from fleet.precision import Precision

FloatArray = npt.NDArray[np.float64]
ArrayLike = FloatArray | float

# An all-reduce over PCIe when the SKU has no GPU-to-GPU link (PCIe Gen4 x16, one direction, achieved).
_PCIE_FALLBACK_BYTES_PER_S = 25e9
_ACTIVATION_BYTES = 2.0  # activations and all-reduce payloads are 16-bit


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of the SKU's peaks and the fixed costs of a step.

    Fitted (a grid search over these fields, scored by how many rows land within 25% and ratios within
    10%) to the TensorRT-LLM v0.14 perf-overview rows of data/benchmarks/published.csv; per-row
    errors in tests/fleetsim/test_published.py and benchmarks/sim_bench.py. They also give the
    batch-1 anchors: 70B FP8 TP2 H100 ITL 20.1 ms (NIM: 18.6-18.9 ms), TTFT of 5,000 tokens 398 ms
    (NIM: 407 ms). Priors: Hopper's measured max-achievable FP8 matmul is 71% of dense peak
    (stas00/ml-engineering); NVIDIA's aiconfigurator scales HBM bandwidth by 0.8; the NIM 2xH100 batch-1
    ITL implies ~57% of HBM peak once fixed costs are included.
    """

    gemm: float = 0.55  # of dense peak at the serving precision, large-M GEMMs
    gemm_tile_tokens: float = 64.0  # M0: a GEMM of M rows runs at M / (M + M0) of the large-M rate
    attention: float = 0.50  # of dense BF16 peak (flash attention)
    bandwidth: float = 0.70  # of HBM peak, weights and KV reads together
    launch_s_per_layer: float = 30e-6  # kernel launches, norms, rotary, sampling per layer and step
    allreduce_latency_s: float = 10e-6  # one all-reduce's latency at TP 2 ...
    allreduce_latency_s_per_rank: float = 6e-6  # ... growing with each further rank
    link: float = 0.70  # of the GPU link's one-direction bandwidth for all-reduce payloads


@dataclass(frozen=True)
class EngineConfig:
    """The engine's memory and batching knobs (vLLM names, TRT-LLM equivalents in the comments)."""

    max_batch: int = 256  # max_num_seqs / max_batch_size
    token_budget: int = 8192  # max_num_batched_tokens / max_num_tokens
    hbm_utilization: float = 0.90  # gpu_memory_utilization (TRT-LLM: the whole GPU, 1.0)
    kv_free_fraction: float = 1.0  # TRT-LLM kv_cache_free_gpu_mem_fraction (0.95 in trtllm-bench)
    runtime_reserve_bytes: float = 4e9  # activations, CUDA graphs, NCCL buffers, CUDA context
    reserve_full_sequence: bool = False  # TRT-LLM GUARANTEED_NO_EVICT holds ISL + OSL from admission


@dataclass(frozen=True)
class WorkerHardware:
    """What one worker runs on: a tensor-parallel group of ``tp`` GPUs of one SKU."""

    sku: GpuSku
    model: ModelArch
    precision: Precision
    kv_precision: Precision
    tp: int
    speed: float = 1.0
    ep: int = 1  # expert parallelism of a mixture-of-experts model (1: experts sharded by TP)


def _required(value: float | int | None, what: str, sku: GpuSku) -> float:
    if value is None or value <= 0:
        raise ValueError(f"GPU SKU {sku.key!r} has no {what} in the catalog: cannot simulate it")
    return float(value)


class StepModel:
    """Per-worker step-time coefficients for one pool (one model, precision and TP; SKUs may differ)."""

    def __init__(self, workers: Sequence[WorkerHardware], engine: EngineConfig, eff: Efficiency) -> None:
        if not workers:
            raise ValueError("a step model needs at least one worker")
        first = workers[0]
        for w in workers:
            if (w.model, w.precision, w.kv_precision, w.tp) != (
                first.model,
                first.precision,
                first.kv_precision,
                first.tp,
            ):
                raise ValueError("all workers of a step model run the same model, precision and TP")
        m, tp = first.model, first.tp
        self.engine = engine
        self.eff = eff
        self.tp = tp
        self.layers = m.layers
        speed = np.array([w.speed for w in workers], dtype=np.float64)
        peak = np.array(
            [_required(w.sku.peak_flops(w.precision), f"{w.precision} peak", w.sku) for w in workers]
        )
        bf16 = np.array([_required(w.sku.peak_flops(Precision.BF16), "BF16 peak", w.sku) for w in workers])
        bw = np.array([_required(w.sku.hbm_bandwidth_bytes_per_s, "HBM bandwidth", w.sku) for w in workers])
        hbm = np.array([_required(w.sku.hbm_bytes, "HBM capacity", w.sku) for w in workers])
        link = np.array(
            [(w.sku.interconnect_bytes_per_s or 2 * _PCIE_FALLBACK_BYTES_PER_S) / 2.0 for w in workers]
        )
        self.peak_flops = peak  # dense, at the serving precision (counters use the nominal peaks)
        self.peak_bf16 = bf16
        self.peak_bandwidth = bw
        self.hbm_bytes = hbm
        self.gemm_rate = peak * eff.gemm * speed
        self.attn_rate = bf16 * eff.attention * speed
        self.bw_rate = bw * eff.bandwidth * speed
        self.link_rate = link * eff.link

        # FLOPs per token from the catalog's formulas, split into GEMM and attention parts, per GPU.
        f_key = decode_flops_per_token(m, 1) - decode_flops_per_token(m, 0)
        self.flops_key = f_key / tp  # per (token, attended key)
        self.flops_prefill_token = (prefill_flops(m, 2) - prefill_flops(m, 1) - 2 * f_key) / tp
        self.flops_decode_token = decode_flops_per_token(m, 0) / tp  # includes its logits
        self.weights_gpu = weight_bytes(m, first.precision) / tp
        # Weight bytes a step reads: all dense weights, and the routed experts its tokens touch.
        read_one = decode_weight_bytes_read(m, first.precision, 1)
        if m.experts_total and m.experts_active and m.experts_total > m.experts_active:
            read_all = decode_weight_bytes_read(m, first.precision, 1_000_000)
            per_expert = (read_all - read_one) / (m.experts_total - m.experts_active)
            self._dense_read = (read_one - per_expert * m.experts_active) / tp
            self._expert_read = per_expert * m.experts_total / tp
            self._route_keep = 1.0 - m.experts_active / m.experts_total
        else:
            self._dense_read, self._expert_read, self._route_keep = read_one / tp, 0.0, 1.0
        self.kv_bytes_token = kv_bytes_per_token(m, first.kv_precision)  # whole model (what a handoff moves)
        self.kv_bytes_token_gpu = self.kv_bytes_token / min(tp, m.kv_heads)
        free = hbm * engine.hbm_utilization - self.weights_gpu - engine.runtime_reserve_bytes
        self.kv_capacity_tokens = np.maximum(free, 0.0) * engine.kv_free_fraction / self.kv_bytes_token_gpu
        self.allreduces = 2 * m.layers if tp > 1 else 0
        self.allreduce_bytes_token = m.hidden * _ACTIVATION_BYTES * 2.0 * (tp - 1) / tp
        self.allreduce_latency_s = eff.allreduce_latency_s + eff.allreduce_latency_s_per_rank * (tp - 1)
        self.fixed_s = m.layers * eff.launch_s_per_layer + self.allreduces * self.allreduce_latency_s

    # --- building blocks -------------------------------------------------------------------------

    def weights_read(self, tokens: ArrayLike) -> FloatArray:
        """Weight bytes per GPU one step of ``tokens`` tokens reads."""
        if self._expert_read == 0.0:
            return np.broadcast_to(np.float64(self._dense_read), np.shape(tokens)).astype(np.float64)
        touched = 1.0 - np.power(self._route_keep, np.maximum(tokens, 1.0))
        return np.asarray(self._dense_read + self._expert_read * touched, dtype=np.float64)

    def breakdown(
        self, decode: ArrayLike, prefill: ArrayLike, decode_context: ArrayLike, prefill_keys: ArrayLike
    ) -> StepBreakdown:
        """Time and work of one step with ``decode`` sequences and ``prefill`` prompt tokens."""
        b = np.asarray(decode, dtype=np.float64)
        c = np.asarray(prefill, dtype=np.float64)
        tokens = b + c
        gemm_flops = self.flops_prefill_token * c + self.flops_decode_token * b
        tile_flops = self.flops_prefill_token * self.eff.gemm_tile_tokens * (tokens > 0)
        w_read = self.weights_read(tokens)
        gemm_compute = (gemm_flops + tile_flops) / self.gemm_rate
        gemm_memory = w_read / self.bw_rate
        kv_read = b * decode_context * self.kv_bytes_token_gpu
        kv_write = tokens * self.kv_bytes_token_gpu
        attn_flops = self.flops_key * (b * decode_context + c * prefill_keys)
        attention = (kv_read + kv_write) / self.bw_rate + attn_flops / self.attn_rate
        comm = self.allreduces * tokens * self.allreduce_bytes_token / self.link_rate
        total = np.maximum(gemm_compute, gemm_memory) + attention + comm + self.fixed_s
        return StepBreakdown(
            seconds=total,
            gemm_flops=gemm_flops,
            attention_flops=attn_flops,
            hbm_bytes=w_read + kv_read + kv_write + 4.0 * tokens * self.allreduce_bytes_token,
            comm_seconds=comm + self.allreduces * self.allreduce_latency_s,
            fixed_seconds=np.broadcast_to(self.layers * self.eff.launch_s_per_layer, total.shape),
            link_bytes=self.allreduces * tokens * self.allreduce_bytes_token,
        )

    def _linear_pieces(
        self, ratio: ArrayLike, decode_context: ArrayLike, prefill_keys: ArrayLike, batch_hint: ArrayLike
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Step time as max(a_c + b_c B, a_m + b_m B) for B decode sequences and ``ratio`` B prefill tokens.

        Exact for dense models; for MoE the weights read are taken at ``batch_hint`` tokens.
        """
        rho = np.asarray(ratio, dtype=np.float64)
        tokens_per_seq = 1.0 + rho
        common_a = self.fixed_s
        common_b = (
            (np.asarray(decode_context) + tokens_per_seq) * self.kv_bytes_token_gpu / self.bw_rate
            + self.flops_key * (np.asarray(decode_context) + rho * np.asarray(prefill_keys)) / self.attn_rate
            + self.allreduces * tokens_per_seq * self.allreduce_bytes_token / self.link_rate
        )
        a_c = common_a + self.flops_prefill_token * self.eff.gemm_tile_tokens / self.gemm_rate
        b_c = common_b + (self.flops_prefill_token * rho + self.flops_decode_token) / self.gemm_rate
        a_m = common_a + self.weights_read(np.asarray(batch_hint) * tokens_per_seq) / self.bw_rate
        return (
            np.asarray(a_c, dtype=np.float64),
            np.asarray(b_c, dtype=np.float64),
            np.asarray(a_m, dtype=np.float64),
            np.asarray(common_b, dtype=np.float64),
        )

    # --- decode and colocated batches ------------------------------------------------------------

    def batch_limits(
        self,
        decode_context: ArrayLike,
        prefill_keys: ArrayLike,
        ratio: ArrayLike = 0.0,
        tpot_target_s: float | None = None,
        reserved_context: ArrayLike | None = None,
    ) -> BatchLimits:
        """The largest decode batch: KV capacity, the engine's batch and token limits, the TPOT target.

        ``ratio`` is prefill tokens per decode token in a step (0 for a disaggregated decode worker;
        prompt / output length for a colocated one). ``reserved_context`` is the KV a sequence holds in
        the capacity check (default: its mean live context ``decode_context``).
        """
        held = decode_context if reserved_context is None else reserved_context
        rho = np.asarray(ratio, dtype=np.float64)
        by_kv = self.kv_capacity_tokens / np.maximum(np.asarray(held, dtype=np.float64), 1.0)
        by_engine = np.minimum(
            float(self.engine.max_batch), self.engine.token_budget / (1.0 + rho)
        ) * np.ones_like(by_kv)
        by_tpot = np.full_like(by_kv, np.inf)
        if tpot_target_s is not None:
            a_c, b_c, a_m, b_m = self._linear_pieces(rho, decode_context, prefill_keys, by_engine)
            with np.errstate(divide="ignore"):
                by_tpot = np.minimum((tpot_target_s - a_c) / b_c, (tpot_target_s - a_m) / b_m)
            by_tpot = np.maximum(by_tpot, 1.0)
        batch = np.maximum(np.minimum(np.minimum(by_kv, by_engine), by_tpot), 1.0)
        kv_bound = by_kv <= np.minimum(by_engine, by_tpot)
        return BatchLimits(batch=batch, kv_bound=kv_bound, by_kv=by_kv)

    def decode_rate(
        self, batch: ArrayLike, decode_context: ArrayLike, prefill_keys: ArrayLike, ratio: ArrayLike = 0.0
    ) -> FloatArray:
        """Output tokens/s at a decode batch of ``batch`` sequences (with ``ratio`` prefill tokens each)."""
        b = np.asarray(batch, dtype=np.float64)
        step = self.breakdown(b, b * np.asarray(ratio), decode_context, prefill_keys)
        return np.asarray(b / step.seconds, dtype=np.float64)

    def batch_for_rate(
        self, rate: ArrayLike, decode_context: ArrayLike, prefill_keys: ArrayLike, ratio: ArrayLike = 0.0
    ) -> FloatArray:
        """The mean decode batch that serves ``rate`` output tokens/s (Little's law on B / t(B) = rate).

        Unbounded (inf) where the rate is beyond what any batch could reach; clip to the limits.
        """
        r = np.asarray(rate, dtype=np.float64)
        hint = np.ones_like(r)
        batch = np.zeros_like(r)
        for _ in range(8 if self._expert_read else 1):  # MoE: weights read depend on the batch
            a_c, b_c, a_m, b_m = self._linear_pieces(ratio, decode_context, prefill_keys, hint)
            with np.errstate(divide="ignore", invalid="ignore"):
                on_c = np.where(r * b_c < 1.0, r * a_c / (1.0 - r * b_c), np.inf)
                on_m = np.where(r * b_m < 1.0, r * a_m / (1.0 - r * b_m), np.inf)
            batch = np.maximum(on_c, on_m)
            hint = np.clip(batch, 1.0, 1e6)
        return np.asarray(np.where(r > 0, batch, 0.0), dtype=np.float64)

    # --- prefill ---------------------------------------------------------------------------------

    def prefill_rate(self, prefill_keys: ArrayLike, tokens: ArrayLike | None = None) -> FloatArray:
        """Prompt tokens/s of a prefill worker running batches of ``tokens`` (default: the token budget)."""
        t = float(self.engine.token_budget) if tokens is None else tokens
        step = self.breakdown(0.0, t, 0.0, prefill_keys)
        return np.asarray(np.asarray(t) / step.seconds, dtype=np.float64)

    def prefill_seconds(self, prompt_tokens: ArrayLike) -> FloatArray:
        """Time to prefill one prompt alone (a batch-1 TTFT, without queueing or KV transfer)."""
        p = np.asarray(prompt_tokens, dtype=np.float64)
        return np.asarray(self.breakdown(0.0, p, 0.0, (p + 1.0) / 2.0).seconds, dtype=np.float64)


@dataclass(frozen=True)
class StepBreakdown:
    """One step's time and work per GPU (arrays broadcast over windows and workers)."""

    seconds: FloatArray
    gemm_flops: FloatArray
    attention_flops: FloatArray
    hbm_bytes: FloatArray
    comm_seconds: FloatArray
    fixed_seconds: FloatArray
    link_bytes: FloatArray


@dataclass(frozen=True)
class BatchLimits:
    batch: FloatArray  # the largest decode batch
    kv_bound: npt.NDArray[np.bool_]  # KV capacity is the binding limit
    by_kv: FloatArray  # the batch KV capacity alone allows
