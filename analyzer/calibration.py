"""Fit the efficiency parameters on published measurements and report the model's errors.

The fit minimises log errors of every usable row plus the log error of every same-release H200/H100-style
ratio (a pair of rows that differ only in the GPU), because ratios cancel most software effects and are
what misplacement decisions rest on. Rows are weighted by how they were measured (reference/performance.md
section 5): in-flight-batching throughput 1.0, latency anchors 0.5, static batching 0.25. Nothing is fitted
per row or per model: the same six parameters serve every row.

Pure: rows and the catalog in, parameters and reports out (``analyzer.published.load_published`` reads
the file).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analyzer.deployment import Deployment, DeploymentError, make_deployment
from analyzer.efficiency import (
    CALIBRATED,
    DEFAULT_LIMITS,
    LOWER_BOUNDS,
    PRIOR,
    UPPER_BOUNDS,
    EfficiencyParams,
    EngineLimits,
)
from analyzer.perf_model import Workload, colocated_step_s, time_to_first_token_s
from analyzer.published import PublishedRow, RowKind, match_gpu_label
from analyzer.roofline import kv_capacity_sequences, step_time
from fleet.catalog import Catalog

ROW_WEIGHTS: dict[RowKind, float] = {
    RowKind.MAX_THROUGHPUT: 1.0,
    RowKind.FIXED_CONCURRENCY: 1.0,
    RowKind.LATENCY: 0.5,
    RowKind.STATIC_BATCH: 0.25,
}
Loss = Literal["linear", "soft_l1", "huber"]
_ROBUST_SCALE = 0.05  # log-error beyond which a robust loss stops growing quadratically (5%)
_NOT_FITTING = math.log(10.0)  # residual charged for a row the parameters make infeasible


@dataclass(frozen=True)
class UsableRow:
    row: PublishedRow
    deployment: Deployment


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
        try:
            deployment = make_deployment(
                catalog, model=row.model, gpu=sku.key, precision=row.precision, tp=row.tp
            )
        except DeploymentError as exc:
            skipped.append(SkippedRow(row, str(exc).split(";")[0]))
            continue
        usable.append(UsableRow(row, deployment))
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
    capacity = kv_capacity_sequences(d, params, limits, r.input_len + r.output_len)
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


def fit(
    rows: Sequence[UsableRow],
    *,
    loss: Loss = "soft_l1",
    start: EfficiencyParams = PRIOR,
    limits: EngineLimits = DEFAULT_LIMITS,
    max_evaluations: int | None = None,
) -> FitResult:
    """Least squares on log errors (scipy), parameters scaled by the prior so all are of order one."""
    from scipy.optimize import least_squares

    names = EfficiencyParams.field_names()
    scale = np.array([getattr(PRIOR, n) for n in names])
    lower = np.array([getattr(LOWER_BOUNDS, n) for n in names]) / scale
    upper = np.array([getattr(UPPER_BOUNDS, n) for n in names]) / scale
    x0 = np.clip(np.array([getattr(start, n) for n in names]) / scale, lower, upper)
    pairs = ratio_pairs(rows)

    def to_params(x: np.ndarray) -> EfficiencyParams:
        return EfficiencyParams(**{n: float(v) for n, v in zip(names, x * scale, strict=True)})

    result = least_squares(
        lambda x: _residuals(to_params(x), rows, pairs, limits),
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
