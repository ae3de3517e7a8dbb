"""Throughput of one serving instance: prefill, decode and colocated, each with its low/high range.

Max-throughput or fixed-concurrency mode. The batch is what the engine would run, every sequence reserving
KV for its whole length. Reasoning: docs/analyzer.md#perf_model
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from analyzer.model import uncertainty, validation
from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import CALIBRATED, DEFAULT_LIMITS, EfficiencyParams, EngineLimits
from analyzer.model.kv_budget import KvBudget, modelled_budget, trtllm_bench_settings
from analyzer.model.moe import kv_bytes_per_sequence, routing_experts, step_time
from analyzer.model.roofline import StepTime
from fleet.catalog import EngineSettings
from fleet.contract import Bottleneck
from fleet.models import prefill_flops

# A batch is capacity-bound when doubling the KV memory would raise throughput by more than this.
CAPACITY_GAIN_THRESHOLD = 0.10
# Above this TP degree the all-reduce latency dominates small decode steps; predictions say what it rests on.
TP_COMM_CAVEAT_ABOVE = 2


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


def kv_capacity_sequences(d: Deployment, budget_bytes: float, seq_len: int) -> float:
    """Sequences of ``seq_len`` tokens whose KV fits at once in ``budget_bytes`` (fractional)."""
    return budget_bytes / kv_bytes_per_sequence(d, max(1, seq_len))


def regime_of(d: Deployment, bottleneck: Bottleneck) -> str:
    """The regime of a prediction (:data:`analyzer.model.uncertainty.REGIMES`): MoE first, then KV-starved
    (capacity-bound), compute-bound, else bandwidth-bound (fixed-cost-bound iterations included)."""
    if d.is_moe:
        return "moe"
    if bottleneck is Bottleneck.CAPACITY:
        return "kv-starved"
    if bottleneck is Bottleneck.COMPUTE:
        return "compute-bound"
    return "bandwidth-bound"


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
    kv_budget: KvBudget | None = None
    regime: str = ""
    # Low/high of each throughput (output, prefill, decode) and the parts of the band, as relative
    # half-widths in log space ("model": the regime's held-out error; "validation": the measured-kernel
    # p90 that replaces it where wider, else 0; "kv_budget": the budget's range; "routing": the MoE
    # routing band).
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    uncertainty_parts: Mapping[str, float] = field(default_factory=dict)
    # Why a throughput's band is wider than the held-out one, per range name (widened ones only).
    widenings: Mapping[str, str] = field(default_factory=dict)

    @property
    def widened(self) -> str | None:
        """Why the output throughput's band (:attr:`uncertainty`) is wider than the held-out one, if it is."""
        return self.widenings.get("output")

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.deployment.tp

    @property
    def uncertainty(self) -> float:
        """The output throughput's band as one relative half-width (the wider side)."""
        low, high = self.ranges.get("output", (self.output_tokens_per_s, self.output_tokens_per_s))
        central = self.output_tokens_per_s
        if central <= 0:
            return 1.0
        down = 1.0 - low / central
        up = high / central - 1.0
        return max(down, up)


def _prefill_cost(d: Deployment, isl: int) -> float:
    return prefill_flops(d.model, isl)


def colocated_step_s(
    d: Deployment,
    w: Workload,
    params: EfficiencyParams,
    limits: EngineLimits,
    batch: float,
    *,
    experts: float | None = None,
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
            experts=experts,
        )
        total += weight * step.total_s
    return total


def _prefill_only(
    d: Deployment,
    w: Workload,
    params: EfficiencyParams,
    limits: EngineLimits,
    budget_bytes: float,
    experts: float | None = None,
) -> tuple[float, StepTime]:
    """Prompt tokens/s of a prefill-only instance and one of its iterations."""
    chunk = limits.prefill_chunk_tokens
    if w.isl <= chunk:
        # As many whole prompts as the chunk, the concurrency and the KV cache (prompts in flight) allow.
        room = max(1, math.floor(kv_capacity_sequences(d, budget_bytes, w.isl)))
        prompts = min(max(1, chunk // w.isl), room, w.concurrency or room)
        step = step_time(
            d,
            params,
            decode_seqs=0,
            context_len=0,
            prefill_tokens=prompts * w.isl,
            prefill_flops=prompts * _prefill_cost(d, w.isl),
            experts=experts,
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
        experts=experts,
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
    d: Deployment,
    w: Workload,
    params: EfficiencyParams,
    limits: EngineLimits,
    *,
    batch: float,
    wanted: int,
    experts: float | None = None,
) -> Bottleneck:
    if batch < wanted:
        larger = min(wanted, 2 * batch)
        now = batch / colocated_step_s(d, w, params, limits, batch, experts=experts)
        more = larger / colocated_step_s(d, w, params, limits, larger, experts=experts)
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
        experts=experts,
    )
    return step.bottleneck()


@dataclass(frozen=True)
class _Core:
    """One evaluation of the model at one KV budget and routing."""

    fits: bool
    capacity: float
    batch: float
    output: float
    prefill: float
    decode: float
    prefill_step: StepTime | None
    decode_step: StepTime | None
    bottleneck: Bottleneck
    prefill_bottleneck: Bottleneck
    decode_bottleneck: Bottleneck


def _evaluate(
    d: Deployment,
    w: Workload,
    params: EfficiencyParams,
    limits: EngineLimits,
    budget_bytes: float,
    experts: float | None = None,
) -> _Core:
    capacity = kv_capacity_sequences(d, budget_bytes, w.isl + w.osl)
    wanted = limits.max_batch if w.concurrency is None else w.concurrency
    if capacity < 1.0:
        return _Core(
            False, capacity, 0.0, 0.0, 0.0, 0.0, None, None,
            Bottleneck.CAPACITY, Bottleneck.CAPACITY, Bottleneck.CAPACITY,
        )  # fmt: skip
    batch = min(float(wanted), capacity)  # fractional: the mean batch of a KV-limited engine
    output = batch / colocated_step_s(d, w, params, limits, batch, experts=experts)
    decode = step_time(d, params, decode_seqs=batch, context_len=w.mean_context, experts=experts)
    prefill_rate, prefill = _prefill_only(d, w, params, limits, budget_bytes, experts)
    return _Core(
        fits=True,
        capacity=capacity,
        batch=batch,
        output=output,
        prefill=prefill_rate,
        decode=batch / decode.total_s,
        prefill_step=prefill,
        decode_step=decode,
        bottleneck=_colocated_bottleneck(d, w, params, limits, batch=batch, wanted=wanted, experts=experts),
        prefill_bottleneck=prefill.bottleneck(),
        decode_bottleneck=(
            Bottleneck.CAPACITY
            if batch < wanted
            and _capacity_limits_decode(d, w, params, batch=batch, wanted=wanted, experts=experts)
            else decode.bottleneck()
        ),
    )


def default_budget(
    d: Deployment,
    params: EfficiencyParams = CALIBRATED,
    limits: EngineLimits = DEFAULT_LIMITS,
    settings: EngineSettings | None = None,
) -> KvBudget:
    """The modelled budget: the engine's rule where ``settings`` name one, else the rule of the
    trtllm-bench measurements the model is calibrated on (``limits.kv_memory_fraction`` of free memory)."""
    return modelled_budget(d, settings or trtllm_bench_settings(limits.kv_memory_fraction), params)


def _log_ratio(a: float, b: float) -> float:
    """|ln(a / b)|, infinite where one side is 0 and the other is not."""
    if a <= 0 and b <= 0:
        return 0.0
    if a <= 0 or b <= 0:
        return math.inf
    return abs(math.log(a / b))


def model_bands(d: Deployment, held_out: float) -> dict[str, validation.Widening]:
    """The model's band per throughput: the held-out one, widened where the measured-kernel validation of
    the phase is wider (the colocated output takes the wider of its decode and prefill steps)."""
    return {
        "output": validation.widest(d.tp, d.is_moe, held_out),
        "prefill": validation.widen(d.tp, d.is_moe, "prefill", held_out),
        "decode": validation.widen(d.tp, d.is_moe, "decode", held_out),
    }


def _ranges(
    central: _Core,
    low: _Core,
    high: _Core,
    routed: _Core | None,
    model_band: float,
    bands: Mapping[str, validation.Widening],
) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """Low/high per throughput: its model band (``bands``; the regime's held-out ``model_band`` where not
    widened), the budget's two ends and the routing band combined in log space; a budget whose low end
    holds no sequence takes the low end to 0."""
    out: dict[str, tuple[float, float]] = {}
    parts = {"model": model_band, "validation": 0.0, "kv_budget": 0.0, "routing": 0.0}
    for name in ("output", "prefill", "decode"):
        value = getattr(central, name)
        if value <= 0:
            out[name] = (0.0, 0.0)
            continue
        s_model = math.log1p(bands[name].band)
        s_low = _log_ratio(value, getattr(low, name)) if getattr(low, name) < value else 0.0
        s_high = _log_ratio(getattr(high, name), value) if getattr(high, name) > value else 0.0
        s_route = _log_ratio(getattr(routed, name), value) if routed is not None else 0.0
        down = math.sqrt(s_model**2 + s_low**2 + s_route**2)
        up = math.sqrt(s_model**2 + s_high**2 + s_route**2)
        out[name] = (0.0 if math.isinf(down) else value * math.exp(-down), value * math.exp(up))
        if name == "output":
            parts["validation"] = bands[name].band if bands[name].reason else 0.0
            parts["kv_budget"] = math.expm1(max(s_low, s_high)) if math.isfinite(max(s_low, s_high)) else 1.0
            parts["routing"] = math.expm1(s_route) if math.isfinite(s_route) else 1.0
    return out, parts


def predict(
    d: Deployment,
    w: Workload,
    params: EfficiencyParams = CALIBRATED,
    limits: EngineLimits = DEFAULT_LIMITS,
    *,
    budget: KvBudget | None = None,
    settings: EngineSettings | None = None,
    with_range: bool = True,
) -> ThroughputPrediction:
    """Predict one instance's throughputs for the workload (pure; no I/O).

    ``budget`` is the instance's KV cache where known (an engine's report, an operator's figure); else it
    is modelled with the engine ``settings`` (see :func:`default_budget`). ``with_range`` False skips the
    extra evaluations the low/high ranges need (for callers that use the central figures only)."""
    kv = budget or default_budget(d, params, limits, settings)
    ttft = time_to_first_token_s(d, w.isl, params, limits)
    core = _evaluate(d, w, params, limits, kv.bytes)
    wanted = limits.max_batch if w.concurrency is None else w.concurrency
    regime = regime_of(d, core.bottleneck)
    ranges: dict[str, tuple[float, float]] = {}
    parts: dict[str, float] = {}
    widenings: dict[str, str] = {}
    if with_range:
        low = _evaluate(d, w, params, limits, kv.low_bytes) if kv.low_bytes < kv.bytes else core
        high = _evaluate(d, w, params, limits, kv.high_bytes) if kv.high_bytes > kv.bytes else core
        alternative = routing_experts(d)
        routed = _evaluate(d, w, params, limits, kv.bytes, alternative) if alternative is not None else None
        held_out = uncertainty.band(regime)
        bands = model_bands(d, held_out)
        ranges, parts = _ranges(core, low, high, routed, held_out, bands)
        widenings = {name: b.reason for name, b in bands.items() if b.reason is not None and core.fits}
    if not core.fits:
        return ThroughputPrediction(
            deployment=d,
            workload=w,
            fits=False,
            max_batch=core.capacity,
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
                f"of one {w.isl + w.osl}-token sequence ({kv.detail})",
            ),
            kv_budget=kv,
            regime="kv-starved",
            ranges=MappingProxyType(ranges),
            uncertainty_parts=MappingProxyType(parts),
        )
    notes: list[str] = []
    if core.batch < wanted:
        notes.append(f"batch limited by KV capacity to {core.batch:.1f} sequences (wanted {wanted})")
    if d.tp > 1 and d.gpu.interconnect_bytes_per_s is None:
        notes.append("no GPU interconnect in the catalog: all-reduces assumed over PCIe Gen4 x16")
    if d.tp > TP_COMM_CAVEAT_ABOVE:
        notes.append(
            f"tensor parallelism {d.tp}: each all-reduce waits {d.tp - 1} x the fitted "
            f"{params.allreduce_peer_latency_s * 1e6:.0f} us per-peer latency of end-to-end measurements, "
            "several times what isolated collective kernels take; decode steps run longer than "
            "measured-kernel sums while H200/H100 ratios hold (docs/analyzer.md#communication)"
        )
    if d.is_moe:
        notes.append(
            f"mixture of experts ({d.layout}): experts read as uniform routing touches them; the range "
            "includes routing concentrated on half the experts"
        )
    assert core.prefill_step is not None and core.decode_step is not None
    return ThroughputPrediction(
        deployment=d,
        workload=w,
        fits=True,
        max_batch=core.capacity,
        batch=core.batch,
        output_tokens_per_s=core.output,
        colocated_prompt_tokens_per_s=core.output * w.isl / w.osl,
        prefill_tokens_per_s=core.prefill,
        decode_tokens_per_s=core.decode,
        ttft_s=ttft,
        tpot_s=core.decode_step.total_s,
        bottleneck=core.bottleneck,
        prefill_bottleneck=core.prefill_bottleneck,
        decode_bottleneck=core.decode_bottleneck,
        prefill_step=core.prefill_step,
        decode_step=core.decode_step,
        notes=tuple(notes),
        kv_budget=kv,
        regime=regime,
        ranges=MappingProxyType(ranges),
        uncertainty_parts=MappingProxyType(parts),
        widenings=MappingProxyType(widenings),
    )


def _capacity_limits_decode(
    d: Deployment,
    w: Workload,
    params: EfficiencyParams,
    *,
    batch: float,
    wanted: int,
    experts: float | None = None,
) -> bool:
    larger = min(wanted, 2 * batch)
    now = batch / step_time(d, params, decode_seqs=batch, context_len=w.mean_context, experts=experts).total_s
    more = (
        larger / step_time(d, params, decode_seqs=larger, context_len=w.mean_context, experts=experts).total_s
    )
    return more > now * (1.0 + CAPACITY_GAIN_THRESHOLD)
