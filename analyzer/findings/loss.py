"""How a finding states its loss and how severe it is.

A loss is stated as lost output tokens/s and requests/s, each with its range (total tokens/s is secondary).
Severity follows what the loss means: a pool that serves its demand loses idle capacity (a warning at
most); critical is kept for a supply-limited pool losing at least ``critical_share`` of its capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from analyzer.pools.analysis import SegmentAnalysis
from analyzer.pools.loss_basis import loss_basis
from analyzer.pools.pool_state import PoolState
from analyzer.pools.split_search import PlacementResult
from analyzer.tunable import tunable
from fleet.contract import Finding, Severity


@dataclass(frozen=True)
class SeverityParams:
    critical_share: float = tunable(
        0.10, "A supply-limited pool losing at least this share of its capacity is critical."
    )
    warning_share: float = tunable(0.02, "A loss of at least this share of the pool's capacity is a warning.")

    def __post_init__(self) -> None:
        if not 0 <= self.warning_share <= self.critical_share <= 1:
            raise ValueError("0 <= warning_share <= critical_share <= 1")


def supply_limited(segment: SegmentAnalysis) -> bool:
    """The pool does not serve its demand, from the evidence: requests wait and its bound is seen at its limit
    or its queues grow (:mod:`analyzer.pools.pool_state`)."""
    return segment.state.state is PoolState.SUPPLY_LIMITED


def severity(
    lost: float, capacity: float, params: SeverityParams, *, supply_limited: bool = False
) -> Severity:
    """Critical only where the pool is supply-limited and loses at least ``critical_share`` of its capacity;
    otherwise the loss is capacity (idle where the pool serves its demand): warning at most."""
    share = lost / capacity if capacity > 0 else 0.0
    if supply_limited and share >= params.critical_share:
        return Severity.CRITICAL
    if share >= params.warning_share:
        return Severity.WARNING
    return Severity.INFO


def severity_basis(segment: SegmentAnalysis) -> str:
    state = segment.state
    if state.state is PoolState.DEMAND_LIMITED:
        return f"demand-limited ({state.evidence}): the loss is idle capacity, at most a warning"
    if state.state is PoolState.SUPPLY_LIMITED:
        return f"supply-limited ({state.evidence}): the loss is traffic not served"
    return f"pool state unknown ({state.evidence}): the loss is capacity, at most a warning"


def states_loss(finding: Finding) -> bool:
    """Whether a finding estimates a loss: an output or requests figure, or a total above 0. A finding that
    is not a throughput loss (telemetry degraded, not serving, pool condition, ...) carries null total,
    output and requests figures; one written before ``Finding.lost_tokens_per_s`` was nullable carries a
    total of 0 beside null output and requests figures: that 0 is unknown too, never "loses nothing", and
    readers show it as unknown."""
    total = finding.lost_tokens_per_s
    return (
        finding.lost_output_tokens_per_s is not None
        or finding.lost_requests_per_s is not None
        or (total is not None and total > 0)
    )


def known(value: float) -> float | None:
    """A finding's loss figure: None where it is not a finite number (never NaN, never 0 for unknown)."""
    return max(0.0, value) if math.isfinite(value) else None


def loss_fields(placement: PlacementResult, share: float) -> dict[str, float | None]:
    """The finding's share of the placement's loss in output tokens/s and requests/s, with their range."""

    def value(x: float) -> float | None:
        return max(0.0, x * share) if math.isfinite(x) else None

    return {
        "lost_output_tokens_per_s": value(placement.lost_output_tokens()),
        "lost_output_tokens_per_s_low": value(placement.lost_output_tokens("low")),
        "lost_output_tokens_per_s_high": value(placement.lost_output_tokens("high")),
        "lost_requests_per_s": value(placement.lost_requests()),
        "lost_requests_per_s_low": value(placement.lost_requests("low")),
        "lost_requests_per_s_high": value(placement.lost_requests("high")),
    }


def loss_evidence(evidence: dict[str, float | str | None], losses: Mapping[str, float | None]) -> None:
    """The loss in the units an SRE acts on, as evidence text: output tokens/s and requests/s with ranges."""
    out, req = losses["lost_output_tokens_per_s"], losses["lost_requests_per_s"]
    if out is None or req is None:
        return
    evidence["lost_output_tokens"] = (
        f"{out:,.0f} output tokens/s ({_bound(losses['lost_output_tokens_per_s_low'], ',.0f')}-"
        f"{_bound(losses['lost_output_tokens_per_s_high'], ',.0f')})"
    )
    evidence["lost_requests"] = (
        f"{req:,.2f} requests/s ({_bound(losses['lost_requests_per_s_low'], ',.2f')}-"
        f"{_bound(losses['lost_requests_per_s_high'], ',.2f')})"
    )


def _bound(value: float | None, spec: str) -> str:
    """A bound of a range as text: "?" where it is unknown (never 0)."""
    return "?" if value is None else format(value, spec)


def range_to_zero(placement: PlacementResult | None) -> str | None:
    """Why the low end of the placement's loss reaches 0 while the loss does not; None otherwise (the
    finding's evidence and the summary's ``loss_range_to_zero`` say it in these words)."""
    if placement is not None and placement.unsure is not None:  # a move held back is the loss: why
        return placement.range_cause or None
    if placement is None or not (placement.lost_high > 0 and placement.lost_low <= 0):
        return None
    if placement.lost_tokens_per_s <= 0:  # no move recommended, one might help: the range runs from 0
        return placement.range_cause or None
    cause = placement.range_cause or "the capacities' uncertainty"
    return f"the low end of the loss reaches 0 through {cause}"


def segment_evidence(segment: SegmentAnalysis, placement: PlacementResult) -> dict[str, float | str | None]:
    """The pool's state over the segment a placement finding stands on, and what its loss means."""
    out: dict[str, float | str | None] = {
        "mean_prompt_tokens": round(segment.mix.isl, 1),
        "mean_output_tokens": round(segment.mix.osl, 1),
        "pool_tokens_per_s_now": round(placement.current.tokens_per_s, 1),
        "pool_tokens_per_s_best": round(placement.best.tokens_per_s, 1),
        "pool_bound_now": placement.current.bound,
        "utilisation": round(placement.utilisation, 4) if math.isfinite(placement.utilisation) else None,
        "demand_limited": {PoolState.DEMAND_LIMITED: "yes", PoolState.SUPPLY_LIMITED: "no"}.get(
            segment.state.state, "unknown"
        ),
        "pool_state": segment.state.state.value,
        "requests_waiting_median": round(segment.waiting_typical, 2)
        if math.isfinite(segment.waiting_typical)
        else None,
        "severity_basis": severity_basis(segment),
    }
    cause = range_to_zero(placement)
    if cause is not None:
        out["loss_range_to_zero"] = cause
    basis = loss_basis(placement)
    if basis is not None:
        out["loss_basis"] = basis.source
        out["loss_basis_detail"] = basis.detail
    if placement.demand_limited:
        cost = placement.misplacement_cost_per_week_usd
        out["loss_meaning"] = "demand-limited: the loss is idle capacity, not undelivered tokens; " + (
            f"${cost:,.0f} per week at catalog prices" if cost is not None else "price unknown"
        )
        out["misplacement_cost_per_week_usd"] = round(cost, 2) if cost is not None else None
    return out
