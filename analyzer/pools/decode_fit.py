"""A group's decode steps measured against the performance model: TPOT = scale x the model's step time.

Where batches reach the compute-bound regime, the decode matmuls' compute efficiency is fitted too.
Reasoning: docs/analyzer.md#decode_fit
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import EfficiencyParams
from analyzer.model.roofline import step_time
from analyzer.telemetry.frames import FloatArray


@dataclass(frozen=True)
class DecodeLine:
    """Measured decode steps against the model's: TPOT = ``scale`` x model step time at the same batch."""

    scale: float
    residual: float  # relative spread of the fit
    max_batch_seen: float
    points: int
    compute_efficiency: float | None = None  # of decode matmuls, where the batches seen reach that regime


_EFFICIENCY_GRID = np.geomspace(0.15, 1.0, 25)
_MAX_FIT_POINTS = 200
_BETTER_FIT = 0.5  # a fitted decode compute rate must at least halve the spread the prior leaves


def fit_decode_line(
    d: Deployment, params: EfficiencyParams, batch: FloatArray, context: FloatArray, tpot: FloatArray
) -> DecodeLine:
    """Fit measured TPOT as ``scale x model step`` at the batch and context each bucket ran.

    Where the largest batches seen reach the compute-bound regime, the decode matmuls' compute efficiency
    is fitted too (the value that makes one scale fit every batch size); otherwise the prior efficiency
    stays and the scale comes from the largest batches (closest to the saturated batch extrapolated to).
    """
    if batch.size > _MAX_FIT_POINTS:
        pick = np.argsort(batch, kind="stable")[np.linspace(0, batch.size - 1, _MAX_FIT_POINTS).astype(int)]
        batch, context, tpot = batch[pick], context[pick], tpot[pick]

    def ratios(efficiency: float) -> FloatArray:
        trial = replace(params, compute_efficiency=efficiency)
        model = np.array(
            [
                step_time(d, trial, decode_seqs=float(b), context_len=float(c)).total_s
                for b, c in zip(batch, context, strict=True)
            ]
        )
        out: FloatArray = tpot / model
        return out

    def spread(ratio: FloatArray) -> float:
        return float(np.median(np.abs(np.log(ratio / np.median(ratio)))))

    prior = ratios(params.compute_efficiency)
    fits = [(spread(r), e, r) for e in _EFFICIENCY_GRID if (r := ratios(float(e))) is not None]
    best_spread, best_efficiency, best = min(fits, key=lambda f: f[0])
    widest = int(np.argmax(batch))
    heavy = step_time(
        d,
        replace(params, compute_efficiency=float(best_efficiency)),
        decode_seqs=float(batch[widest]),
        context_len=float(context[widest]),
    )
    reached = heavy.matmul_compute_s >= heavy.weight_read_s
    top = batch >= np.quantile(batch, 0.75)
    # The line is carried from the largest batches seen to the saturated one: a fitted efficiency must also
    # explain those batches at least as well as the prior does (each scaled to them), not only the bulk.
    if reached and best_spread < _BETTER_FIT * spread(prior) and spread(best[top]) <= spread(prior[top]):
        scale = float(np.median(best))
        return DecodeLine(
            scale, 1.4826 * best_spread, float(batch.max()), int(batch.size), float(best_efficiency)
        )
    scale = float(np.median(prior[top]))
    residual = 1.4826 * float(np.median(np.abs(prior / scale - 1.0)))
    return DecodeLine(scale, residual, float(batch.max()), int(batch.size))
