"""Throughput of one serving instance: prefill, decode and colocated, in max-throughput or
fixed-concurrency mode.

The batch is what the engine would run: in max-throughput mode (trtllm-bench's offline run) as many
sequences as the KV cache holds, up to the engine's cap; with a fixed concurrency, that many or fewer
when the KV cache is smaller. Every sequence reserves KV for its whole length (input + output), as
TensorRT-LLM's guaranteed-no-evict scheduler does.

Three throughputs answer three questions:
- ``output_tokens_per_s``: a colocated instance serving the ISL/OSL mix (what benchmarks publish). In
  steady state B sequences decode while B/OSL prompts arrive per iteration; their prefill chunks are fused
  into the decode iterations (two iteration sizes around the mean, so a batch smaller than OSL pays for
  whole prompts in the few iterations that carry one).
- ``prefill_tokens_per_s``: a prefill-only worker of a disaggregated pool, prompt tokens per second.
- ``decode_tokens_per_s``: a decode-only worker, generated tokens per second at the mean context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from analyzer.deployment import Deployment
from analyzer.efficiency import CALIBRATED, DEFAULT_LIMITS, EfficiencyParams, EngineLimits
from analyzer.roofline import StepTime, kv_capacity_sequences, step_time
from fleet.contract import Bottleneck
from fleet.models import prefill_flops

# A batch is capacity-bound when doubling the KV memory would raise throughput by more than this.
CAPACITY_GAIN_THRESHOLD = 0.10


class Mode(StrEnum):
    MAX_THROUGHPUT = "max-throughput"
    FIXED_CONCURRENCY = "fixed-concurrency"


@dataclass(frozen=True)
class Workload:
    """Fixed input and output lengths; ``concurrency`` None means the engine chooses the batch."""

    isl: int
    osl: int
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.isl < 1 or self.osl < 1:
            raise ValueError(f"isl and osl must be >= 1, got {self.isl}/{self.osl}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")

    @property
    def mode(self) -> Mode:
        return Mode.MAX_THROUGHPUT if self.concurrency is None else Mode.FIXED_CONCURRENCY

    @property
    def mean_context(self) -> float:
        """Mean context a decode step attends over during the output."""
        return self.isl + self.osl / 2


@dataclass(frozen=True)
class ThroughputPrediction:
    """Predicted performance of one instance of ``tp`` GPUs (token rates are for the whole instance)."""

    deployment: Deployment
    workload: Workload
    fits: bool  # weights, reserve and at least one sequence's KV fit in memory
    max_batch: float  # sequences of isl + osl tokens the KV cache holds (fractional)
    batch: float  # mean concurrent sequences the engine runs (fractional when the KV cache limits it)
    output_tokens_per_s: float  # colocated instance
    colocated_prompt_tokens_per_s: float
    prefill_tokens_per_s: float  # prefill-only instance
    decode_tokens_per_s: float  # decode-only instance
    ttft_s: float  # one prompt on an idle instance
    tpot_s: float  # one decode iteration at ``batch``
    bottleneck: Bottleneck
    prefill_bottleneck: Bottleneck
    decode_bottleneck: Bottleneck
    prefill_step: StepTime | None
    decode_step: StepTime | None
    notes: tuple[str, ...] = field(default=())

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.deployment.tp


def _prefill_cost(d: Deployment, isl: int) -> float:
    return prefill_flops(d.model, isl)


def colocated_step_s(
    d: Deployment, w: Workload, params: EfficiencyParams, limits: EngineLimits, batch: float
) -> float:
    """Mean iteration time of a colocated instance decoding ``batch`` sequences of the workload."""
    chunk = min(w.isl, limits.prefill_chunk_tokens)
    flops_per_prompt_token = _prefill_cost(d, w.isl) / w.isl
    chunks_per_step = batch * w.isl / (w.osl * chunk)
    low = math.floor(chunks_per_step)
    share_high = chunks_per_step - low
    total = 0.0
    for chunks, weight in ((low, 1.0 - share_high), (low + 1, share_high)):
        if weight <= 0.0:
            continue
        tokens = chunks * chunk
        step = step_time(
            d,
            params,
            decode_seqs=batch,
            context_len=w.mean_context,
            prefill_tokens=tokens,
            prefill_flops=tokens * flops_per_prompt_token,
        )
        total += weight * step.total_s
    return total


def _prefill_only(
    d: Deployment, w: Workload, params: EfficiencyParams, limits: EngineLimits
) -> tuple[float, StepTime]:
    """Prompt tokens/s of a prefill-only instance and one of its iterations."""
    chunk = limits.prefill_chunk_tokens
    if w.isl <= chunk:
        # As many whole prompts as the chunk, the concurrency and the KV cache (prompts in flight) allow.
        room = max(1, math.floor(kv_capacity_sequences(d, params, limits, w.isl)))
        prompts = min(max(1, chunk // w.isl), room, w.concurrency or room)
        step = step_time(
            d,
            params,
            decode_seqs=0,
            context_len=0,
            prefill_tokens=prompts * w.isl,
            prefill_flops=prompts * _prefill_cost(d, w.isl),
        )
        return prompts * w.isl / step.total_s, step
    steps = math.ceil(w.isl / chunk)
    step = step_time(
        d,
        params,
        decode_seqs=0,
        context_len=0,
        prefill_tokens=w.isl / steps,
        prefill_flops=_prefill_cost(d, w.isl) / steps,
    )
    return w.isl / (steps * step.total_s), step


def time_to_first_token_s(d: Deployment, isl: int, params: EfficiencyParams, limits: EngineLimits) -> float:
    """Prefill of one prompt on an idle instance, chunk by chunk."""
    steps = math.ceil(isl / limits.prefill_chunk_tokens)
    step = step_time(
        d,
        params,
        decode_seqs=0,
        context_len=0,
        prefill_tokens=isl / steps,
        prefill_flops=_prefill_cost(d, isl) / steps,
    )
    return steps * step.total_s


def _colocated_bottleneck(
    d: Deployment, w: Workload, params: EfficiencyParams, limits: EngineLimits, *, batch: float, wanted: int
) -> Bottleneck:
    if batch < wanted:
        larger = min(wanted, 2 * batch)
        now = batch / colocated_step_s(d, w, params, limits, batch)
        more = larger / colocated_step_s(d, w, params, limits, larger)
        if more > now * (1.0 + CAPACITY_GAIN_THRESHOLD):
            return Bottleneck.CAPACITY
    tokens = batch * w.isl / w.osl  # mean prompt tokens per iteration
    step = step_time(
        d,
        params,
        decode_seqs=batch,
        context_len=w.mean_context,
        prefill_tokens=tokens,
        prefill_flops=tokens * _prefill_cost(d, w.isl) / w.isl,
    )
    return step.bottleneck()


def predict(
    d: Deployment,
    w: Workload,
    params: EfficiencyParams = CALIBRATED,
    limits: EngineLimits = DEFAULT_LIMITS,
) -> ThroughputPrediction:
    """Predict one instance's throughputs for the workload (pure; no I/O)."""
    capacity = kv_capacity_sequences(d, params, limits, w.isl + w.osl)
    wanted = limits.max_batch if w.concurrency is None else w.concurrency
    ttft = time_to_first_token_s(d, w.isl, params, limits)
    if capacity < 1.0:
        return ThroughputPrediction(
            deployment=d,
            workload=w,
            fits=False,
            max_batch=capacity,
            batch=0,
            output_tokens_per_s=0.0,
            colocated_prompt_tokens_per_s=0.0,
            prefill_tokens_per_s=0.0,
            decode_tokens_per_s=0.0,
            ttft_s=ttft,
            tpot_s=math.inf,
            bottleneck=Bottleneck.CAPACITY,
            prefill_bottleneck=Bottleneck.CAPACITY,
            decode_bottleneck=Bottleneck.CAPACITY,
            prefill_step=None,
            decode_step=None,
            notes=(
                f"{d.model.key} at {d.precision} on {d.tp} x {d.gpu.key} leaves no room for the KV cache "
                f"of one {w.isl + w.osl}-token sequence",
            ),
        )
    batch = min(float(wanted), capacity)  # fractional: the mean batch of a KV-limited engine
    notes: list[str] = []
    if batch < wanted:
        notes.append(f"batch limited by KV capacity to {batch:.1f} sequences (wanted {wanted})")
    if d.tp > 1 and d.gpu.interconnect_bytes_per_s is None:
        notes.append("no GPU interconnect in the catalog: all-reduces assumed over PCIe Gen4 x16")
    output = batch / colocated_step_s(d, w, params, limits, batch)
    decode = step_time(d, params, decode_seqs=batch, context_len=w.mean_context)
    prefill_rate, prefill = _prefill_only(d, w, params, limits)
    return ThroughputPrediction(
        deployment=d,
        workload=w,
        fits=True,
        max_batch=capacity,
        batch=batch,
        output_tokens_per_s=output,
        colocated_prompt_tokens_per_s=output * w.isl / w.osl,
        prefill_tokens_per_s=prefill_rate,
        decode_tokens_per_s=batch / decode.total_s,
        ttft_s=ttft,
        tpot_s=decode.total_s,
        bottleneck=_colocated_bottleneck(d, w, params, limits, batch=batch, wanted=wanted),
        prefill_bottleneck=prefill.bottleneck(),
        decode_bottleneck=(
            Bottleneck.CAPACITY
            if batch < wanted and _capacity_limits_decode(d, w, params, batch=batch, wanted=wanted)
            else decode.bottleneck()
        ),
        prefill_step=prefill,
        decode_step=decode,
        notes=tuple(notes),
    )


def _capacity_limits_decode(
    d: Deployment, w: Workload, params: EfficiencyParams, *, batch: float, wanted: int
) -> bool:
    larger = min(wanted, 2 * batch)
    now = batch / step_time(d, params, decode_seqs=batch, context_len=w.mean_context).total_s
    more = larger / step_time(d, params, decode_seqs=larger, context_len=w.mean_context).total_s
    return more > now * (1.0 + CAPACITY_GAIN_THRESHOLD)
