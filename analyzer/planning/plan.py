"""The plan: the concrete changes the analysis recommends per pool, for an operator (or an advisor) to apply.

Pure, from :class:`analyzer.pools.analysis.PoolAnalysis`: replicas per (SKU, TP, role) now and recommended,
the workers that change role, the expected gain. Nothing here applies anything (docs/plan.md).
Reasoning: docs/analyzer.md#plan
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analyzer.findings.recommend import pair_swaps
from analyzer.pools.analysis import PoolAnalysis
from analyzer.pools.split_search import PlacementResult
from fleet.targets import PoolTargets

PLAN_VERSION = 1


@dataclass(frozen=True)
class Figure:
    """An expected figure with its low/high range (10th/90th percentiles over the capacity draws)."""

    value: float
    low: float
    high: float

    def as_dict(self, digits: int = 1) -> dict[str, float]:
        return {
            k: round(v, digits) for k, v in (("value", self.value), ("low", self.low), ("high", self.high))
        }


@dataclass(frozen=True)
class Gain:
    """Throughput a change adds (negative: loses), in the three units the analyzer reports."""

    output_tokens_per_s: Figure
    requests_per_s: Figure
    tokens_per_s: Figure  # prompt + output: secondary

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {
            "output_tokens_per_s": self.output_tokens_per_s.as_dict(),
            "requests_per_s": self.requests_per_s.as_dict(3),
            "tokens_per_s": self.tokens_per_s.as_dict(),
        }


def gain_from_tokens(tokens: Figure, isl: float, osl: float) -> Gain:
    """Every plan's tokens are requests x (prompt + output): requests and output tokens follow from it."""
    per_request = isl + osl

    def scale(factor: float) -> Figure:
        return Figure(tokens.value * factor, tokens.low * factor, tokens.high * factor)

    return Gain(scale(osl / per_request), scale(1.0 / per_request), tokens)


@dataclass(frozen=True)
class Replicas:
    """Workers of one role on one SKU at one TP degree: now and recommended."""

    sku: str
    tp: int
    role: str  # "prefill" or "decode"
    current: int
    recommended: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "sku": self.sku,
            "tp": self.tp,
            "role": self.role,
            "current": self.current,
            "recommended": self.recommended,
            "delta": self.recommended - self.current,
        }


@dataclass(frozen=True)
class RoleChange:
    """One worker restarted in the other role on its own GPUs."""

    worker_id: str
    node: str | None
    sku: str
    tp: int
    from_role: str
    to_role: str
    reason: str
    counterpart_worker_id: str | None  # the worker that trades roles with it (same node, or across SKUs)
    work_moves_to_sku: str | None  # where the pairing moves this worker's current work to another GPU model

    def as_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "node": self.node,
            "sku": self.sku,
            "tp": self.tp,
            "from_role": self.from_role,
            "to_role": self.to_role,
            "reason": self.reason,
            "counterpart_worker_id": self.counterpart_worker_id,
            "work_moves_to_sku": self.work_moves_to_sku,
        }


@dataclass(frozen=True)
class PoolPlan:
    pool: str
    cluster: str
    deployment: str | None
    model: str
    status: str  # "change", "no-change" or "unknown"
    reason: str | None  # why "unknown", or what "no-change" rests on
    replicas: tuple[Replicas, ...]
    changes: tuple[RoleChange, ...]
    gain: Gain | None  # None: not estimable (``reason`` says why), never 0
    capacity_now_tokens_per_s: float | None
    capacity_recommended_tokens_per_s: float | None
    bound_now: str | None
    bound_recommended: str | None
    demand_limited: (
        bool | None
    )  # True: the gain is idle capacity (the pool serves its peak), not lost traffic
    segment_start: float | None  # epoch seconds of the segment the plan is for
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "cluster": self.cluster,
            "deployment": self.deployment,
            "model": self.model,
            "status": self.status,
            "reason": self.reason,
            "replicas": [r.as_dict() for r in self.replicas],
            "changes": [c.as_dict() for c in self.changes],
            "gain": self.gain.as_dict() if self.gain is not None else None,
            "capacity_now_tokens_per_s": _round(self.capacity_now_tokens_per_s),
            "capacity_recommended_tokens_per_s": _round(self.capacity_recommended_tokens_per_s),
            "bound_now": self.bound_now,
            "bound_recommended": self.bound_recommended,
            "demand_limited": self.demand_limited,
            "notes": list(self.notes),
        }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def replicas_of(prefill: Sequence[int], sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(prefill, decode) workers per group of a plan."""
    return [(int(p), int(n) - int(p)) for p, n in zip(prefill, sizes, strict=True)]


def _replicas(placement: PlacementResult) -> tuple[Replicas, ...]:
    now = replicas_of(placement.current.prefill, placement.sizes)
    best = replicas_of(placement.best.prefill, placement.sizes)
    out = []
    for group, (p_now, d_now), (p_best, d_best) in zip(placement.groups, now, best, strict=True):
        sku, tp = group.group.sku.key, group.group.tp
        out.append(Replicas(sku, tp, "prefill", p_now, p_best))
        out.append(Replicas(sku, tp, "decode", d_now, d_best))
    return tuple(out)


def _changes(placement: PlacementResult, worker_ids: Sequence[str]) -> tuple[RoleChange, ...]:
    pairs = pair_swaps(placement.changes, placement.groups)
    group_of_row = {row: g for g, cap in enumerate(placement.groups) for row in cap.group.members}
    out = []
    for change in placement.changes:
        group = placement.groups[change.group].group
        counterpart = pairs.get(change.row)
        moves_to = None
        if counterpart is not None and counterpart in group_of_row:
            other = placement.groups[group_of_row[counterpart]].group.sku.key
            moves_to = other if other != group.sku.key else None
        out.append(
            RoleChange(
                worker_id=worker_ids[change.row],
                node=change.node,
                sku=group.sku.key,
                tp=group.tp,
                from_role="decode" if change.to_role == "prefill" else "prefill",
                to_role=change.to_role,
                reason=change.reason,
                counterpart_worker_id=worker_ids[counterpart] if counterpart is not None else None,
                work_moves_to_sku=moves_to,
            )
        )
    return tuple(out)


def loss_gain(placement: PlacementResult) -> Gain:
    """The gain of moving to the recommended plan: the placement's loss and its range (0 up to the range's
    high end where the move is held back: nothing is recommended, though the pool likely loses its gain)."""
    tokens = Figure(placement.recommended_gain, placement.lost_low, placement.lost_high)
    return gain_from_tokens(tokens, placement.isl, placement.osl)


GOODPUT_BASIS = "capacities and gains count goodput within the pool's latency targets"


def _basis(targets: PoolTargets) -> tuple[str, ...]:
    """What the plan's figures count where the pool has latency targets that size its capacity."""
    applied = [
        f"{name} p90 {value:g} s"
        for name, value in (("TTFT", targets.ttft_p90_s), ("TPOT", targets.tpot_p90_s))
        if value is not None
    ]
    if not applied:
        return ()
    return (f"{GOODPUT_BASIS} ({', '.join(applied)}; {targets.source} rule {targets.rule})",)


def pool_plan(analysis: PoolAnalysis, worker_ids: Sequence[str]) -> PoolPlan:
    """The plan for one pool (``worker_ids``: the grid's worker ids, by row)."""
    pool = analysis.pool
    segment = analysis.latest
    placement = segment.placement if segment is not None else None
    notes = (
        tuple(analysis.notes)
        + (tuple(segment.notes) if segment is not None else ())
        + _basis(analysis.targets)
    )
    if segment is None or placement is None:
        reason = (
            f"the pool serves {analysis.serving}: no prefill/decode placement to search"
            if analysis.serving != "disaggregated"
            else "the placement could not be searched (see the notes)"
        )
        return PoolPlan(
            pool.key,
            pool.cluster,
            pool.deployment,
            pool.model_id,
            "unknown",
            reason,
            (),
            (),
            None,
            segment.capacity_tokens_per_s
            if segment is not None and segment.capacity_tokens_per_s > 0
            else None,
            None,
            None,
            None,
            None,
            segment.start if segment is not None else None,
            notes,
        )
    changed = placement.best.prefill != placement.current.prefill
    settled = "the current split is the best the analyzer can tell apart from its uncertainty"
    if placement.unsure is not None:  # held back: why, and what the pool most likely loses meanwhile
        settled = placement.range_cause
    return PoolPlan(
        pool.key,
        pool.cluster,
        pool.deployment,
        pool.model_id,
        "change" if changed else "no-change",
        None if changed else settled,
        _replicas(placement),
        _changes(placement, worker_ids),
        loss_gain(placement),
        placement.current.tokens_per_s,
        placement.best.tokens_per_s,
        placement.current.bound,
        placement.best.bound,
        placement.demand_limited,
        segment.start,
        notes,
    )


def fleet_plan(analyses: Sequence[PoolAnalysis], worker_ids: Sequence[str]) -> list[PoolPlan]:
    """The plan of every pool, in the analysis's order."""
    return [pool_plan(a, worker_ids) for a in analyses]
