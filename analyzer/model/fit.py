"""Fit the efficiency parameters on published measurements and report the model's errors.

The fit minimises log errors of rows and of same-release cross-GPU ratios under a weak physical prior.
Validation holds out whole models, releases or ISL/OSL points. Pure. Reasoning: docs/analyzer.md#fit
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analyzer.model.deployment import Deployment, DeploymentError, make_deployment
from analyzer.model.efficiency import (
    CALIBRATED,
    DEFAULT_LIMITS,
    LOWER_BOUNDS,
    PRIOR,
    UPPER_BOUNDS,
    EfficiencyParams,
    EngineLimits,
)
from analyzer.model.kv_budget import KvBudget, modelled_budget, trtllm_bench_settings
from analyzer.model.moe import step_time
from analyzer.model.perf_model import (
    Workload,
    colocated_step_s,
    kv_capacity_sequences,
    predict,
    regime_of,
    time_to_first_token_s,
)
from analyzer.model.published import PublishedRow, RowKind, match_gpu_label
from fleet.catalog import Catalog, EngineSettings
from fleet.contract import Bottleneck

ROW_WEIGHTS: dict[RowKind, float] = {
    RowKind.MAX_THROUGHPUT: 1.0,
    RowKind.FIXED_CONCURRENCY: 1.0,
    RowKind.LATENCY: 0.5,
    RowKind.STATIC_BATCH: 0.0,  # evaluated, not fitted (docs/analyzer.md#fit)
}
Loss = Literal["linear", "soft_l1", "huber"]
_ROBUST_SCALE = 0.05  # log-error beyond which a robust loss stops growing quadratically (5%)
_NOT_FITTING = math.log(10.0)  # residual charged for a row the parameters make infeasible
PRIOR_WEIGHT = 0.3  # residual per width of log deviation of a parameter from its documented prior
# How far (as a factor) each parameter may plausibly sit from its prior (docs/analyzer.md#fit).
PRIOR_WIDTHS = {
    "compute_efficiency": 1.5,
    "bandwidth_efficiency": 1.15,
    "step_overhead_s": 4.0,
    "allreduce_peer_latency_s": 3.0,
    "allreduce_bandwidth_efficiency": 1.5,
    "runtime_reserve_bytes": 2.0,
}
# Additive parameters whose prior deviation is measured as log((x + floor) / (prior + floor)), so 0 costs a
# finite amount: about a fifth of the prior each.
_PRIOR_FLOORS = {"step_overhead_s": 2e-4, "allreduce_peer_latency_s": 2e-6, "runtime_reserve_bytes": 5e8}


@dataclass(frozen=True)
class UsableRow:
    row: PublishedRow
    deployment: Deployment
    # The engine's KV-memory rule (None: the trtllm-bench rule at the row's or the limits' fraction) and
    # the fraction the row states (None: the rule's default).
    settings: EngineSettings | None = None
    kv_fraction: float | None = None

    def budget(self, params: EfficiencyParams, limits: EngineLimits = DEFAULT_LIMITS) -> KvBudget:
        """The KV budget the row's engine rule gives under ``params``."""
        settings = self.settings or trtllm_bench_settings(self.kv_fraction or limits.kv_memory_fraction)
        return modelled_budget(self.deployment, settings, params, fraction=self.kv_fraction)


_FRACTION = re.compile(
    r"(?:kv_cache_free_gpu_mem_fraction|free_gpu_memory_fraction|gpu[_-]memory[_-]utili[sz]ation|"
    r"mem[_-]fraction[_-]static)\s*[=:]?\s*(0?\.\d+|1(?:\.0+)?)",
    re.IGNORECASE,
)
_EP = re.compile(
    r"(?:\bEP\s*=?\s*|--ep[\s=]+|expert[ _-]parallel(?:ism)?(?:[ _-]size)?\s*[=:]?\s*)(\d+)", re.I
)
_ATTENTION_DP = re.compile(r"attention[ _-]?dp|enable_attention_dp|dp[ _-]attention", re.IGNORECASE)
_ENGINES = (("vllm", "vllm"), ("sglang", "sglang"))  # (word in the source, catalog engine)


def row_layout(row: PublishedRow) -> tuple[int, bool]:
    """(expert-parallel degree, attention data parallelism) as the row states them (tp column or notes);
    (1, False) where it says nothing."""
    text = f"{row.tp_text} {row.notes}"
    match = _EP.search(text)
    return (int(match.group(1)) if match else 1), bool(_ATTENTION_DP.search(text))


def row_engine(row: PublishedRow, catalog: Catalog) -> tuple[EngineSettings | None, float | None]:
    """The engine rule a row ran under (None: TensorRT-LLM's trtllm-bench rule) and the KV fraction it
    states (None where it states none)."""
    match = _FRACTION.search(row.notes)
    fraction = float(match.group(1)) if match else None
    source = row.source.lower()
    for word, key in _ENGINES:
        if word in source:
            return catalog.engines.resolve(key), fraction
    return None, fraction


@dataclass(frozen=True)
class SkippedRow:
    row: PublishedRow
    reason: str


@dataclass(frozen=True)
class RatioPair:
    """Two rows that differ only in the GPU (and TP, for per-GPU metrics): ``numerator / denominator``."""

    numerator: UsableRow
    denominator: UsableRow

    @property
    def measured(self) -> float:
        return self.numerator.row.value / self.denominator.row.value

    @property
    def label(self) -> str:
        n, d = self.numerator, self.denominator
        return (
            f"{n.row.model} {n.row.input_len}/{n.row.output_len} {n.row.metric} "
            f"{n.deployment.gpu.key} TP{n.row.tp} / {d.deployment.gpu.key} TP{d.row.tp}"
        )


def prepare_rows(rows: Sequence[PublishedRow], catalog: Catalog) -> tuple[list[UsableRow], list[SkippedRow]]:
    """Resolve each row's model and GPU; rows the catalog cannot describe are skipped with the reason."""
    usable, skipped = [], []
    for row in rows:
        sku = match_gpu_label(catalog, row.gpu)
        if sku is None:
            skipped.append(SkippedRow(row, f"GPU {row.gpu!r} not in the catalog"))
            continue
        ep, attention_dp = row_layout(row)
        try:
            deployment = make_deployment(
                catalog,
                model=row.model,
                gpu=sku.key,
                precision=row.precision,
                tp=row.tp,
                ep=ep,
                attention_dp=attention_dp,
            )
        except DeploymentError as exc:
            skipped.append(SkippedRow(row, str(exc).split(";")[0]))
            continue
        settings, fraction = row_engine(row, catalog)
        usable.append(UsableRow(row, deployment, settings, fraction))
    return usable, skipped


def ratio_pairs(rows: Sequence[UsableRow]) -> list[RatioPair]:
    """Same-release pairs that differ only in the GPU; the higher-bandwidth GPU is the numerator."""
    groups: dict[tuple[object, ...], list[UsableRow]] = defaultdict(list)
    for u in rows:
        r = u.row
        per_gpu = r.metric.endswith("_per_gpu") or r.kind is RowKind.STATIC_BATCH
        key = (r.release, u.deployment.model.key, r.precision, r.input_len, r.output_len, r.batch, r.metric,
               None if per_gpu else r.tp)  # fmt: skip
        groups[key].append(u)
    pairs = []
    for members in groups.values():
        ordered = sorted(members, key=lambda u: (-u.deployment.hbm_bandwidth, u.deployment.gpu.key))
        for i, high in enumerate(ordered):
            for low in ordered[i + 1 :]:
                if high.deployment.gpu.key != low.deployment.gpu.key:
                    pairs.append(RatioPair(high, low))
    return pairs


def predict_row(u: UsableRow, params: EfficiencyParams, limits: EngineLimits = DEFAULT_LIMITS) -> float:
    """The model's value for the row's metric, in the row's unit; NaN where the model does not fit."""
    r, d = u.row, u.deployment
    if r.metric == "ttft_ms":
        return 1e3 * time_to_first_token_s(d, r.input_len, params, limits)
    workload = Workload(r.input_len, r.output_len, r.batch)
    capacity = kv_capacity_sequences(d, u.budget(params, limits).bytes, r.input_len + r.output_len)
    if capacity < 1.0:
        return math.nan
    wanted = limits.max_batch if r.batch is None else r.batch
    batch = min(float(wanted), capacity)
    if r.metric == "tpot_ms":
        return 1e3 * step_time(d, params, decode_seqs=batch, context_len=workload.mean_context).total_s
    rate = batch / colocated_step_s(d, workload, params, limits, batch)
    if r.metric == "output_tokens_per_s_per_gpu":
        return rate / r.num_gpus
    if r.metric == "output_tokens_per_s":
        return rate
    raise ValueError(f"row {r.line}: unknown metric {r.metric!r}")


def _residuals(
    params: EfficiencyParams, rows: Sequence[UsableRow], pairs: Sequence[RatioPair], limits: EngineLimits
) -> np.ndarray:
    predicted = {id(u): predict_row(u, params, limits) for u in rows}
    out = []
    for u in rows:
        value = predicted[id(u)]
        error = math.log(value / u.row.value) if value > 0 else _NOT_FITTING
        out.append(ROW_WEIGHTS[u.row.kind] * error)
    for p in pairs:
        high, low = predicted[id(p.numerator)], predicted[id(p.denominator)]
        weight = min(ROW_WEIGHTS[p.numerator.row.kind], ROW_WEIGHTS[p.denominator.row.kind])
        error = math.log(high / low / p.measured) if high > 0 and low > 0 else _NOT_FITTING
        out.append(weight * error)
    return np.asarray(out)


@dataclass(frozen=True)
class FitResult:
    params: EfficiencyParams
    loss: Loss
    cost: float
    evaluations: int
    rows_used: int
    pairs_used: int


def prior_residuals(params: EfficiencyParams, weight: float = PRIOR_WEIGHT) -> np.ndarray:
    """``weight`` x the log deviation of each parameter from the documented prior, in widths (floored for
    additive parameters, see above)."""
    out = []
    for name in EfficiencyParams.field_names():
        floor = _PRIOR_FLOORS.get(name, 0.0)
        deviation = math.log((getattr(params, name) + floor) / (getattr(PRIOR, name) + floor))
        out.append(weight * deviation / math.log(PRIOR_WIDTHS[name]))
    return np.asarray(out)


def fit(
    rows: Sequence[UsableRow],
    *,
    loss: Loss = "soft_l1",
    start: EfficiencyParams = PRIOR,
    limits: EngineLimits = DEFAULT_LIMITS,
    max_evaluations: int | None = None,
    prior_weight: float = PRIOR_WEIGHT,
) -> FitResult:
    """Least squares on log errors (scipy), parameters scaled by the prior so all are of order one, with
    the weak prior of :func:`prior_residuals` (``prior_weight`` 0: the rows alone)."""
    from scipy.optimize import least_squares

    names = EfficiencyParams.field_names()
    scale = np.array([getattr(PRIOR, n) for n in names])
    lower = np.array([getattr(LOWER_BOUNDS, n) for n in names]) / scale
    upper = np.array([getattr(UPPER_BOUNDS, n) for n in names]) / scale
    x0 = np.clip(np.array([getattr(start, n) for n in names]) / scale, lower, upper)
    pairs = ratio_pairs(rows)

    def to_params(x: np.ndarray) -> EfficiencyParams:
        return EfficiencyParams(**{n: float(v) for n, v in zip(names, x * scale, strict=True)})

    def residuals(x: np.ndarray) -> np.ndarray:
        params = to_params(x)
        data = _residuals(params, rows, pairs, limits)
        return np.concatenate([data, prior_residuals(params, prior_weight)]) if prior_weight > 0 else data

    result = least_squares(
        residuals,
        x0,
        bounds=(lower, upper),
        loss=loss,
        f_scale=_ROBUST_SCALE,
        x_scale=1.0,
        diff_step=1e-3,
        max_nfev=max_evaluations,
    )
    return FitResult(to_params(result.x), loss, float(result.cost), int(result.nfev), len(rows), len(pairs))


# --- reporting -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowError:
    row: PublishedRow
    gpu_key: str
    predicted: float
    error: float  # predicted / measured - 1 (NaN when the model says it does not fit)


@dataclass(frozen=True)
class RatioError:
    label: str
    gpus: tuple[str, str]  # (numerator SKU, denominator SKU)
    measured: float
    predicted: float
    error: float


@dataclass(frozen=True)
class ErrorSummary:
    count: int
    median: float
    p90: float
    max: float

    @classmethod
    def of(cls, errors: Sequence[float]) -> ErrorSummary:
        values = np.abs(np.asarray([e if not math.isnan(e) else math.inf for e in errors], dtype=float))
        if values.size == 0:
            return cls(0, math.nan, math.nan, math.nan)
        return cls(
            int(values.size), float(np.median(values)), float(np.percentile(values, 90)), float(values.max())
        )


@dataclass(frozen=True)
class CalibrationReport:
    rows: tuple[RowError, ...]
    ratios: tuple[RatioError, ...]
    skipped: tuple[SkippedRow, ...]
    absolute_all: ErrorSummary  # every usable row
    absolute_throughput: ErrorSummary  # throughput rows only
    ratio: ErrorSummary  # every same-release GPU pair

    def ratio_for(self, numerator: str, denominator: str) -> ErrorSummary:
        """Ratio errors of one GPU pair, e.g. ("H200-SXM", "H100-SXM")."""
        return ErrorSummary.of([r.error for r in self.ratios if r.gpus == (numerator, denominator)])


def evaluate(
    rows: Sequence[UsableRow],
    params: EfficiencyParams = CALIBRATED,
    *,
    skipped: Sequence[SkippedRow] = (),
    limits: EngineLimits = DEFAULT_LIMITS,
) -> CalibrationReport:
    """Per-row and per-ratio errors of ``params`` and their summaries."""
    predicted = {id(u): predict_row(u, params, limits) for u in rows}
    row_errors = tuple(
        RowError(u.row, u.deployment.gpu.key, predicted[id(u)], predicted[id(u)] / u.row.value - 1.0)
        for u in rows
    )
    ratio_errors = []
    for p in ratio_pairs(rows):
        model_ratio = predicted[id(p.numerator)] / predicted[id(p.denominator)]
        gpus = (p.numerator.deployment.gpu.key, p.denominator.deployment.gpu.key)
        ratio_errors.append(
            RatioError(p.label, gpus, p.measured, model_ratio, model_ratio / p.measured - 1.0)
        )
    throughput = [e.error for e in row_errors if e.row.kind is not RowKind.LATENCY]
    return CalibrationReport(
        rows=row_errors,
        ratios=tuple(ratio_errors),
        skipped=tuple(skipped),
        absolute_all=ErrorSummary.of([e.error for e in row_errors]),
        absolute_throughput=ErrorSummary.of(throughput),
        ratio=ErrorSummary.of([e.error for e in ratio_errors]),
    )


# --- regimes and held-out validation ---------------------------------------------------------------------


def row_regime(
    u: UsableRow, params: EfficiencyParams = CALIBRATED, limits: EngineLimits = DEFAULT_LIMITS
) -> str:
    """The regime the model puts a row in (:func:`analyzer.model.perf_model.regime_of`): a TTFT row by its
    prefill, a TPOT row by its decode step, a throughput row by the colocated instance."""
    r, d = u.row, u.deployment
    workload = Workload(r.input_len, max(1, r.output_len), r.batch)
    p = predict(d, workload, params, limits, budget=u.budget(params, limits), with_range=False)
    if r.metric == "ttft_ms":
        return regime_of(d, p.prefill_bottleneck)
    if r.metric == "tpot_ms":
        return regime_of(d, p.decode_bottleneck if p.fits else Bottleneck.CAPACITY)
    return regime_of(d, p.bottleneck)


def pair_regime(numerator: str, denominator: str) -> str:
    """A ratio's regime from its two rows': MoE, else KV-starved where either side is, else
    bandwidth-bound where either side is, else compute-bound."""
    for regime in ("moe", "kv-starved", "bandwidth-bound"):
        if regime in (numerator, denominator):
            return regime
    return "compute-bound"


HOLDOUTS: dict[str, Callable[[UsableRow], str]] = {
    "model": lambda u: u.deployment.model.key,
    "release": lambda u: u.row.release,
    "isl/osl": lambda u: f"{u.row.input_len}/{u.row.output_len}",
}
MIN_TRAINING_ROWS = 10


@dataclass(frozen=True)
class HeldOutError:
    """One held-out figure: a row's (or a ratio's) error under a fit that never saw its group."""

    scheme: str  # "model", "release" or "isl/osl"
    group: str  # the value held out
    label: str
    regime: str
    error: float
    kind: Literal["absolute", "ratio"]
    gpus: tuple[str, str] | None = None  # a ratio's (numerator, denominator) SKUs
    # Throughput measured with in-flight batching (max-throughput or fixed concurrency; for a ratio, both
    # rows): what serving engines do today. Latency anchors and static batching are other measurements.
    inflight: bool = True


@dataclass(frozen=True)
class HeldOutReport:
    errors: tuple[HeldOutError, ...]
    skipped: tuple[str, ...]  # groups that could not be held out (too few rows left to fit)

    def summary(
        self,
        kind: Literal["absolute", "ratio"],
        *,
        scheme: str | None = None,
        regime: str | None = None,
        gpus: tuple[str, str] | None = ("H200-SXM", "H100-SXM"),
        inflight_only: bool = True,
    ) -> ErrorSummary:
        """|error| summary of held-out figures of one kind, optionally one scheme and one regime (ratios of
        the ``gpus`` pair; in-flight-batching throughput only unless ``inflight_only`` is False)."""
        chosen = [
            e.error
            for e in self.errors
            if e.kind == kind
            and (scheme is None or e.scheme == scheme)
            and (regime is None or e.regime == regime)
            and (kind == "absolute" or gpus is None or e.gpus == gpus)
            and (not inflight_only or e.inflight)
        ]
        return ErrorSummary.of(chosen)


_INFLIGHT = (RowKind.MAX_THROUGHPUT, RowKind.FIXED_CONCURRENCY)


def in_sample_errors(
    rows: Sequence[UsableRow], params: EfficiencyParams = CALIBRATED, limits: EngineLimits = DEFAULT_LIMITS
) -> HeldOutReport:
    """The same figures for the fit on every row (scheme "in-sample"), for comparison."""
    return HeldOutReport(tuple(_errors("in-sample", "all", rows, params, limits, params)), ())


def _errors(
    scheme: str,
    group: str,
    test: Sequence[UsableRow],
    params: EfficiencyParams,
    limits: EngineLimits,
    reference: EfficiencyParams,
) -> list[HeldOutError]:
    report = evaluate(test, params, limits=limits)
    regimes = {id(u.row): row_regime(u, reference, limits) for u in test}
    out = [
        HeldOutError(
            scheme,
            group,
            e.row.label,
            regimes[id(e.row)],
            e.error,
            "absolute",
            inflight=e.row.kind in _INFLIGHT,
        )
        for e in report.rows
    ]
    for pair, ratio in zip(ratio_pairs(test), report.ratios, strict=True):
        regime = pair_regime(regimes[id(pair.numerator.row)], regimes[id(pair.denominator.row)])
        inflight = pair.numerator.row.kind in _INFLIGHT and pair.denominator.row.kind in _INFLIGHT
        out.append(
            HeldOutError(scheme, group, ratio.label, regime, ratio.error, "ratio", ratio.gpus, inflight)
        )
    return out


def cross_validate(
    rows: Sequence[UsableRow],
    *,
    schemes: Sequence[str] = tuple(HOLDOUTS),
    loss: Loss = "soft_l1",
    limits: EngineLimits = DEFAULT_LIMITS,
    prior_weight: float = PRIOR_WEIGHT,
    reference: EfficiencyParams = CALIBRATED,
) -> HeldOutReport:
    """Leave one group out for each scheme (a model, a release, an ISL/OSL point): fit on the rest, predict
    the held-out rows and ratios. Regimes are the model's classification under ``reference`` (the stored
    parameters), so every scheme files a row under the same regime. A group whose removal leaves fewer
    than ``MIN_TRAINING_ROWS`` rows to fit is skipped and named."""
    errors: list[HeldOutError] = []
    skipped: list[str] = []
    for scheme in schemes:
        key = HOLDOUTS[scheme]
        for group in sorted({key(u) for u in rows}):
            train = [u for u in rows if key(u) != group]
            test = [u for u in rows if key(u) == group]
            if len(train) < MIN_TRAINING_ROWS:
                skipped.append(f"{scheme} {group}: {len(train)} rows left to fit")
                continue
            params = fit(train, loss=loss, limits=limits, prior_weight=prior_weight).params
            errors += _errors(scheme, group, test, params, limits, reference)
    return HeldOutReport(tuple(errors), tuple(skipped))
