"""Under-utilised pool: demand is a small share of the pool's saturated capacity, so disaggregation's
benefit is masked and part of the fleet idles (at catalog prices where they are set)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.findings.base import Check, FindingInputs
from analyzer.findings.pool_condition import SegmentChecks, checked_segments, failed, pool_finding
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from analyzer.tunable import tunable
from fleet.contract import Finding, FindingKind

KINDS = (FindingKind.UNDERUTILISED_POOL,)
EVIDENCE = ("utilisation", "model-size", "output-length")


@dataclass(frozen=True)
class UnderutilisedParams:
    below: float = tunable(
        0.4, "A pool whose demand is under this share of its saturated capacity is under-utilised."
    )

    def __post_init__(self) -> None:
        if not 0 < self.below <= 1:
            raise ValueError(f"below must lie in (0, 1], got {self.below}")


def utilisation_check(analysis: PoolAnalysis, segment: SegmentAnalysis, p: UnderutilisedParams) -> Check:
    """Demand over saturated capacity."""
    capacity = segment.capacity_tokens_per_s
    demand = segment.mix.tokens_rate  # NaN where the segment's traffic is unknown: no claim either way
    value = demand / capacity if capacity > 0 and math.isfinite(demand) else None
    low = value is not None and value < p.below
    return Check(
        "utilisation",
        value,
        p.below,
        None if value is None else not low,
        "pool utilisation (demand over saturated capacity)"
        + (f": below ~{p.below:.0%} the benefit of disaggregation is masked" if low else ""),
    )


def detect(inputs: FindingInputs, checks: SegmentChecks) -> list[Finding]:
    out: list[Finding] = []
    for analysis in inputs.analyses:
        segments = checked_segments(analysis, checks)
        flags = [failed(c, "utilisation") for c in segments]

        def idle(last: int, analysis: PoolAnalysis = analysis) -> dict[str, float | str | None]:
            placement = analysis.segments[last].placement
            cost = placement.idle_cost_per_week_usd if placement else None
            return {
                "idle_cost_per_week_usd": round(cost, 2) if cost is not None else None,
                "idle_cost": f"${cost:,.0f} per week at catalog prices"
                if cost is not None
                else "price unknown",
            }

        out += pool_finding(KINDS[0], analysis, flags, segments, EVIDENCE, "investigate", idle)
    return out
