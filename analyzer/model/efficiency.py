"""The performance model's few interpretable efficiency parameters, and the engine limits it assumes.

A roofline says what the hardware could do; these parameters say how much of it a serving engine gets.
They are fitted once (``analyzer.model.fit``, run by ``benchmarks/perf_model_accuracy.py --refit``) on
published measurements and stored here as constants with the fit's provenance, so predicting never
refits. Each one has a physical meaning and a plausible range stated below; a fit that leaves those
ranges means the model, not the parameter, is wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

_GB = 1e9


@dataclass(frozen=True)
class EfficiencyParams:
    """How much of the catalog's peaks a serving engine achieves.

    compute_efficiency: achieved fraction of dense tensor-core peak for matmuls and attention math
        (MAMF on H100 is 0.71-0.80; a whole forward pass with softmax, norms and quantisation lands lower).
    bandwidth_efficiency: achieved fraction of peak HBM bandwidth for streaming weights and the KV cache
        (aiconfigurator uses 0.8).
    step_overhead_s: fixed cost of one engine iteration (scheduling, kernel launches, sampling set-up).
    allreduce_hop_latency_s: latency per ring step of a tensor-parallel all-reduce (alpha of the
        alpha-beta model; a ring all-reduce over n GPUs takes 2(n-1) steps).
    allreduce_bandwidth_efficiency: achieved fraction of the catalog's per-GPU interconnect bandwidth
        (NVLink figures are both directions together, so about 0.5 is the ceiling one direction gives).
    runtime_reserve_bytes: memory per GPU the engine keeps beyond weights and KV cache (CUDA context,
        activations, communication and sampling buffers).
    """

    compute_efficiency: float
    bandwidth_efficiency: float
    step_overhead_s: float
    allreduce_hop_latency_s: float
    allreduce_bandwidth_efficiency: float
    runtime_reserve_bytes: float

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "bandwidth_efficiency", "allreduce_bandwidth_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        for name in ("step_overhead_s", "allreduce_hop_latency_s", "runtime_reserve_bytes"):
            value = getattr(self, name)
            if value < 0.0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class EngineLimits:
    """Engine settings the model assumes rather than fits (trtllm-bench's defaults; vLLM's are close).

    kv_memory_fraction: share of the memory left after weights and reserve given to the KV cache in the
        published trtllm-bench rows the fit uses (``kv_cache_free_gpu_mem_fraction`` 0.95). A live engine's
        budget is its reported one, else its own rule (``analyzer/model/kv_budget.py``, the catalog's
        ``engines:``).
    max_batch: cap on concurrent sequences in max-throughput mode (trtllm-bench caps at 4096).
    prefill_chunk_tokens: prompt tokens a prefill-only worker batches into one iteration.
    """

    kv_memory_fraction: float = 0.95
    max_batch: int = 4096
    prefill_chunk_tokens: int = 8192

    def __post_init__(self) -> None:
        if not 0.0 < self.kv_memory_fraction <= 1.0:
            raise ValueError(f"kv_memory_fraction must be in (0, 1], got {self.kv_memory_fraction}")
        if self.max_batch < 1 or self.prefill_chunk_tokens < 1:
            raise ValueError("max_batch and prefill_chunk_tokens must be >= 1")


DEFAULT_LIMITS = EngineLimits()


@dataclass(frozen=True)
class CalibrationAccuracy:
    """How far the calibrated model is from published measurements, as |predicted / measured - 1|.

    In-sample figures are over every usable row (absolute) and every same-release H200/H100 pair (ratio);
    held-out figures come from leave-one-group-out cross-validation (hold out a model, a release or an
    ISL/OSL point, fit on the rest; ``benchmarks/perf_model_accuracy.py`` prints them per regime): use those
    for error bands on fleets the fit never saw.
    """

    absolute_median: float
    absolute_p90: float
    ratio_median: float
    ratio_p90: float
    heldout_absolute_median: float
    heldout_absolute_p90: float
    heldout_ratio_median: float
    heldout_ratio_p90: float


# Starting point and plausible bounds of the fit (the ranges in EfficiencyParams' docstring).
PRIOR = EfficiencyParams(
    compute_efficiency=0.5,
    bandwidth_efficiency=0.8,
    step_overhead_s=1e-3,
    allreduce_hop_latency_s=10e-6,
    allreduce_bandwidth_efficiency=0.4,
    runtime_reserve_bytes=3 * _GB,
)
LOWER_BOUNDS = EfficiencyParams(0.1, 0.3, 0.0, 0.0, 0.05, 0.0)
UPPER_BOUNDS = EfficiencyParams(1.0, 1.0, 0.05, 200e-6, 1.0, 20 * _GB)

# --- fitted constants (generated by `benchmarks/perf_model_accuracy.py --write`; do not edit by hand) ---
CALIBRATED = EfficiencyParams(
    compute_efficiency=0.46435,
    bandwidth_efficiency=0.766311,
    step_overhead_s=0.0012153,
    allreduce_hop_latency_s=1.50704e-05,
    allreduce_bandwidth_efficiency=0.507836,
    runtime_reserve_bytes=2842200000.0,
)
CALIBRATION_PROVENANCE: dict[str, str] = {
    "method": (
        "scipy.optimize.least_squares, soft_l1 loss (f_scale 0.05) on weighted log errors"
        " of rows and of same-release GPU ratios (analyzer.model.fit.fit)"
    ),
    "data": (
        "data/benchmarks/published.csv sha256 "
        "320cf38119e99968b73a75c432949035c81e54427f34725e156dd6136e8ec52b"
    ),
    "rows_used": "60",
    "rows_skipped": "line 58: unknown model 'GPT-J-6B'; line 59: unknown model 'GPT-J-6B'",
    "fitted_at": "2026-12-01T18:34:45Z",
    "absolute_error": "median 0.0541 p90 0.1884",
    "h200_h100_ratio_error": "median 0.0274 p90 0.0933 max 0.2763",
}
CALIBRATION_ACCURACY = CalibrationAccuracy(
    absolute_median=0.0541,
    absolute_p90=0.1884,
    ratio_median=0.0274,
    ratio_p90=0.0933,
    heldout_absolute_median=0.0766,
    heldout_absolute_p90=0.1791,
    heldout_ratio_median=0.0329,
    heldout_ratio_p90=0.0939,
)
# --- end of fitted constants ---
