"""Disaggregation not paying: the pool would do as well or better colocated.

Either the prefill workers idle while decode is congested (or KV-bound most of the time), or the same GPUs
colocated would beat the best split by ``colocate_margin`` while the model is small or the outputs short.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analyzer.findings.base import Check, FindingInputs
from analyzer.findings.evidence import bottleneck_share
from analyzer.findings.pool_condition import Checks, SegmentChecks, checked_segments, pool_finding
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis, colocated_tokens_per_s
from analyzer.telemetry.bottleneck import BottleneckGrid
from analyzer.telemetry.grid import WorkerGrid
from analyzer.tunable import tunable
from fleet.contract import Bottleneck, Finding, FindingKind
from fleet.models import active_params

KINDS = (FindingKind.DISAGGREGATION_NOT_PAYING,)
EVIDENCE = ("colocated-vs-disaggregated", "model-size", "output-length", "utilisation")


@dataclass(frozen=True)
class NotPayingParams:
    small_model_params: float = tunable(
        30e9, "Active parameters below which disaggregation gains little (the model-size check)."
    )
    short_output_tokens: float = tunable(
        32.0, "Mean output tokens below which colocated serving may be better (the output-length check)."
    )
    colocate_margin: float = tunable(
        0.1, "Colocated serving must beat the best split by this share for the check to favour it."
    )
    prefill_idle: float = tunable(
        0.3, "Prefill workers under this share of their capacity while decode is congested: not paying."
    )
    decode_congested: float = tunable(0.9, "Decode at this share of its capacity or more is congested.")
    kv_bound_most: float = tunable(
        0.5, "Decode workers KV-bound more than this share of the time are congested too."
    )


def model_size_check(analysis: PoolAnalysis, p: NotPayingParams) -> Check | None:
    arch = analysis.pool.arch
    if arch is None:
        return None
    active = active_params(arch)
    large = active >= p.small_model_params
    return Check(
        "model-size",
        active,
        p.small_model_params,
        large,
        f"{active / 1e9:,.1f}B active parameters: "
        + (
            "large enough for disaggregation to pay"
            if large
            else "small models gain little from disaggregation"
        ),
    )


def output_length_check(segment: SegmentAnalysis, p: NotPayingParams) -> Check | None:
    osl = segment.mix.osl
    if not math.isfinite(osl):
        return None
    long_enough = osl >= p.short_output_tokens
    return Check(
        "output-length",
        osl,
        p.short_output_tokens,
        long_enough,
        f"mean output {osl:,.0f} tokens: "
        + (
            "decode work justifies a decode pool"
            if long_enough
            else "very short outputs: colocated serving may be better"
        ),
    )


def colocated_check(analysis: PoolAnalysis, segment: SegmentAnalysis, p: NotPayingParams) -> Check | None:
    if segment.placement is None:
        return None
    colocated = colocated_tokens_per_s(analysis.pool, segment.capacities, segment.roles, segment.mix)
    best = segment.placement.best.tokens_per_s
    return Check(
        "colocated-vs-disaggregated",
        colocated / best if best > 0 else None,
        1.0 + p.colocate_margin,
        None if best <= 0 else colocated < best * (1.0 + p.colocate_margin),
        f"the same GPUs colocated would sustain ~{colocated:,.0f} tokens/s against {best:,.0f} "
        "for the best split",
    )


def detect(inputs: FindingInputs, p: NotPayingParams, checks: SegmentChecks) -> list[Finding]:
    out: list[Finding] = []
    for analysis in inputs.analyses:
        segments = checked_segments(analysis, checks)
        reasons = [
            _reason(analysis, s, c, inputs.bottlenecks, inputs.grid, p)
            for s, c in zip(analysis.segments, segments, strict=True)
        ]

        def reason(last: int, reasons: list[str] = reasons) -> dict[str, float | str | None]:
            return {"reason": reasons[last]}

        flags = [bool(r) for r in reasons]
        out += pool_finding(KINDS[0], analysis, flags, segments, EVIDENCE, "colocate", reason)
    return out


def _reason(
    analysis: PoolAnalysis,
    segment: SegmentAnalysis,
    checks: Checks,
    bottlenecks: BottleneckGrid,
    grid: WorkerGrid,
    p: NotPayingParams,
) -> str:
    """Why disaggregation does not pay in this segment ("" when it does)."""
    placement = segment.placement
    if placement is None:
        return ""
    current = placement.current
    # NaN (no claim either way) where a capacity is unknown: an unknown use is never 0% of capacity.
    prompt_use = (
        segment.mix.prompt_rate / current.prefill_tokens_per_s
        if current.prefill_tokens_per_s > 0
        else math.nan
    )
    output_use = (
        segment.mix.output_rate / current.decode_tokens_per_s if current.decode_tokens_per_s > 0 else math.nan
    )
    decode_rows = [row for row, role in segment.roles.items() if role == "decode"]
    shares = [
        bottleneck_share(bottlenecks, grid.workers[row], segment.first, segment.last, Bottleneck.CAPACITY)
        for row in decode_rows
    ]
    starved = float(np.mean(shares)) if shares else 0.0
    if prompt_use < p.prefill_idle and (output_use >= p.decode_congested or starved > p.kv_bound_most):
        return (
            f"the prefill pool runs at {prompt_use:.0%} of its capacity while decode is congested "
            f"({output_use:.0%} of capacity, KV-bound {starved:.0%} of the time)"
        )
    colocated = checks.get("colocated-vs-disaggregated")
    against = [c for c in (checks.get("model-size"), checks.get("output-length")) if c and c.passed is False]
    if against and colocated is not None and colocated.passed is False:
        return "; ".join([colocated.detail, *(c.detail for c in against)])
    return ""
