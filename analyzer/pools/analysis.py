"""One model pool, end to end: traffic, calibration, segments, capacities and the best placement per segment.

Segments are cut where the traffic mix or the serving workers change (:mod:`analyzer.telemetry.drift`).
Each gets its capacities, routing, worker loads, peak queue and best placement.
Reasoning: docs/analyzer.md#analysis
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from analyzer.pools.calibration import CapacityParams, PoolCalibration, calibrate
from analyzer.pools.capacity import GroupCapacity, group_capacity, lengths_from_kv, ttft_unmet
from analyzer.pools.peer_evidence import PeerEvidence, peer_note
from analyzer.pools.phase_evidence import (
    infer_routing,
    measured_notes,
    measured_phases,
    routing_notes,
    worker_loads,
)
from analyzer.pools.plan_choice import ACT, CONFIDENCE, DOMINANCE, HEADROOM, MIN_GAIN
from analyzer.pools.pool import Pool
from analyzer.pools.pool_state import (
    NOT_MODELLED,
    PoolState,
    StateEvidence,
    pool_state,
    queue_growth,
    queued_requests,
    queued_share,
)
from analyzer.pools.reported_budgets import ReportedBudgets
from analyzer.pools.saturation import colocated_at_limit
from analyzer.pools.split_search import DECISION_SEED, PlacementResult, place
from analyzer.pools.workload import PoolTraffic, TrafficMix, acting_roles, pool_traffic
from analyzer.telemetry.drift import ChangePoint, DriftParams, change_points, segments, state_changes
from analyzer.telemetry.frames import ROLES
from analyzer.telemetry.grid import WorkerGrid
from analyzer.tunable import tunable
from fleet.contract import Role
from fleet.targets import NO_TARGETS, PoolTargets

_DOWN = -2
_PREFILL, _DECODE, _MIXED = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE), ROLES.index(Role.MIXED)


@dataclass(frozen=True)
class PoolParams:
    capacity: CapacityParams = field(default_factory=CapacityParams)
    drift: DriftParams = field(default_factory=DriftParams)
    tolerance: float = tunable(
        0.0,
        "A materiality floor: a plan with more role changes must also sustain this share more on average "
        "(0: beating the current plan in most capacity draws decides alone).",
    )
    confidence: float = tunable(
        CONFIDENCE,
        "Share of the capacity draws a plan with more role changes must win to replace the current one.",
    )
    act: float = tunable(
        ACT,
        "Share of the capacity draws the chosen plan must win against the current one to be recommended (the "
        "low end of its gain positive); a recommended plan stays while it wins more than 1 - act of them.",
    )
    min_gain: float = tunable(
        MIN_GAIN,
        "Share of the current rate a move must gain on average to be recommended (the least loss that is a "
        "warning): below it the pool is at its best split within what matters.",
    )
    headroom: float = tunable(
        HEADROOM,
        "Spare capacity of the non-binding phase a plan must add to be worth more changes at the same rate.",
    )
    dominance: float = tunable(
        DOMINANCE,
        "Share more on average a confident move with no more role changes must sustain to replace the "
        "search's pick (the path never ends on a plan a smaller move beats in expectation).",
    )
    peak_quantile: float = tunable(0.95, "The quantile of a segment's hourly demand taken as its peak.")
    backlog_per_worker: float = tunable(
        1.0,
        "Requests per serving worker the pool's queues may hold in the median bucket and still serve what "
        "arrives (an engine's own slack between iterations); more is a backlog: supply-limited.",
    )
    serving_share: float = tunable(
        0.5, "A worker serves in a bucket when its engine reported for at least this share of it."
    )
    routing_load_tolerance: float = tunable(
        0.05, "Work per worker within this share across SKU groups is spread equally (round-robin)."
    )
    routing_speed_gap: float = tunable(
        0.10, "SKU groups this much apart in speed tell a round-robin router from a load-aware one."
    )


@dataclass(frozen=True)
class SegmentAnalysis:
    first: int  # bucket range [first, last)
    last: int
    start: float  # epoch seconds
    end: float
    mix: TrafficMix
    roles: dict[int, str]  # grid row -> role held most in the segment, for serving workers
    capacities: tuple[GroupCapacity, ...]
    placement: PlacementResult | None  # None for colocated pools or where the model is unknown
    capacity_tokens_per_s: float  # current saturated tokens/s (placement's, or colocated estimate)
    notes: tuple[str, ...] = ()
    # Requests waiting in the pool's queues in the segment's median bucket (the pool's total); NaN where no
    # engine reports a queue. >= 1: the pool queues most of the time: supply-limited.
    waiting_typical: float = float("nan")
    # Prompt and generated tokens/s each phase delivered while seen saturated (None: never seen so).
    measured: tuple[float | None, float | None] = (None, None)
    # Requests/s that arrived and were not served: how fast the pool's queues grew over the segment (0 when
    # they did not; NaN where no engine reports a queue). Measured, never modelled.
    backlog_growth: float = float("nan")
    # Supply-limited, demand-limited or unknown, from the queues and the phases seen at their limit.
    state: StateEvidence = NOT_MODELLED

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600.0


@dataclass(frozen=True)
class PoolAnalysis:
    pool: Pool
    traffic: PoolTraffic
    calibration: PoolCalibration
    change_points: tuple[ChangePoint, ...]
    segments: tuple[SegmentAnalysis, ...]
    serving: str  # "disaggregated", "colocated" or "unknown"
    notes: tuple[str, ...]
    # The latency targets that applied (analyzer.pools.targets): its TPOT target sized the decode batches.
    targets: PoolTargets = NO_TARGETS

    @property
    def latest(self) -> SegmentAnalysis | None:
        return self.segments[-1] if self.segments else None

    def time_weighted(self, name: str) -> float:
        """Mean over segments, weighted by duration, of a placement figure (0 where no placement)."""
        total = sum(s.hours for s in self.segments)
        if total <= 0:
            return 0.0
        return (
            sum(
                s.hours * float(getattr(s.placement, name, 0.0) if s.placement else 0.0)
                for s in self.segments
            )
            / total
        )


def worker_states(pool: Pool, grid: WorkerGrid, serving_share: float = 0.5) -> np.ndarray:
    """Per pool member and bucket: its role code while serving, ``_DOWN`` otherwise."""
    rows = np.array(pool.members, dtype=np.int64)
    # A bucket's length is what its best-covered worker reported (the range may end mid-bucket).
    length = np.maximum(grid.engine_s.max(axis=0, initial=0.0), 1e-9)
    serving = (grid.engine_s[rows] >= serving_share * length[None, :]) & ~(
        np.nan_to_num(grid.lost_share[rows]) >= 0.5
    )
    return np.where(serving, grid.role[rows].astype(np.int64), _DOWN)


def _serving_kind(roles: Counter[int]) -> str:
    if roles[_PREFILL] and roles[_DECODE]:
        return "disaggregated"
    if roles[_MIXED] and not roles[_PREFILL] and not roles[_DECODE]:
        return "colocated"
    return "unknown"


def analyze_pool(
    pool: Pool,
    grid: WorkerGrid,
    params: PoolParams | None = None,
    nodes: Mapping[int, str] | None = None,
    budgets: ReportedBudgets | None = None,
    peers: PeerEvidence | None = None,
) -> PoolAnalysis:
    """``nodes`` (grid row -> node name, where known) lets a decode and a prefill worker on one node that
    trade roles be paired as a swap in place. ``budgets`` (the KV budgets the fleet's engines report and
    each worker's engine, :meth:`ReportedBudgets.from_workers`) come before any modelled budget; ``peers``
    (what other pools measured on the same deployments) before a figure resting on the model."""
    p = params or PoolParams()
    grid, acting = acting_roles(pool, grid)
    notes = [*pool.notes, *acting]
    traffic = pool_traffic(pool, grid)
    calibration = calibrate(pool, grid, traffic, p.capacity, budgets, peers)
    if not traffic.requests_counted:
        lengths = lengths_from_kv(pool, grid, traffic, calibration)
        if lengths is not None:
            isl, osl = lengths
            notes.append(
                f"no engine counts requests: mean lengths estimated from KV occupancy (prompt {isl:,.0f}, "
                f"output {osl:,.0f} tokens)"
            )
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = np.where(traffic.prompt_rate > 0, traffic.prompt_rate / isl, np.nan)
            traffic = replace(traffic, request_rate=rate)
            calibration = calibrate(pool, grid, traffic, p.capacity, budgets, peers)
        else:
            notes.append("mean prompt and output lengths unknown: no placement analysis")
    notes += [
        peer_note(g, phase, peers_of[g.key])
        for phase, peers_of in (("prefill", calibration.prefill_peers), ("decode", calibration.decode_peers))
        for g in pool.groups
        if g.key in peers_of
    ]
    states = worker_states(pool, grid, p.serving_share)
    kind = _serving_kind(Counter(states[states >= 0].ravel().tolist()))
    points = change_points(
        {
            "prompt_tokens": traffic.isl,
            "output_tokens": traffic.osl,
            "prompt_per_output": traffic.prompt_per_output,
        },
        p.drift,
    )
    cuts = [cp.index for cp in points] + state_changes(states, p.drift.min_size)
    result: list[SegmentAnalysis] = []
    for first, last in segments(grid.shape[1], cuts, p.drift.min_size):
        standing = _standing(result[-1]) if result else None
        result.append(
            _segment(pool, grid, traffic, calibration, states, (first, last), kind, p, nodes or {}, standing)
        )
    return PoolAnalysis(pool, traffic, calibration, tuple(points), tuple(result), kind, tuple(notes))


def _segment(
    pool: Pool,
    grid: WorkerGrid,
    traffic: PoolTraffic,
    calibration: PoolCalibration,
    states: np.ndarray,
    span: tuple[int, int],
    kind: str,
    p: PoolParams,
    nodes: Mapping[int, str],
    standing: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> SegmentAnalysis:
    first, last = span
    start = float(grid.bucket_start[first])
    end = float(grid.bucket_start[last - 1] + grid.bucket_s)
    mix = traffic.window(first, last)
    roles = _roles_held(pool, states, first, last)
    notes: list[str] = []
    # Supply-limited means queueing most of the time, not at a diurnal peak: the median bucket's queue.
    waiting = queued_requests(grid, pool.members, first, last, 0.5)
    growth = queue_growth(grid, pool.members, first, last)
    queued = queued_share(grid, pool.members, first, last)
    peak_waiting = queued_requests(grid, pool.members, first, last, 0.9)  # said where it fell behind at peaks
    if not (math.isfinite(mix.isl) and math.isfinite(mix.osl)) or mix.isl <= 0 or mix.osl <= 0:
        notes.append("no traffic with known lengths in this segment")
        return SegmentAnalysis(
            first, last, start, end, mix, roles, (), None, 0.0, tuple(notes), waiting, backlog_growth=growth
        )
    capacities = tuple(group_capacity(g, calibration, mix.isl, mix.osl, p.capacity) for g in pool.groups)
    notes += _unplaceable_notes(pool, capacities)
    unmet, none_can = ttft_unmet(pool.groups, capacities, p.capacity.ttft_slo_s)
    notes += unmet
    if none_can and kind == "disaggregated":  # a goodput of 0 is no capacity to place: unknown, with why
        return SegmentAnalysis(
            first, last, start, end, mix, roles, capacities, None, math.nan, tuple(notes), waiting,
            (None, None), growth,
        )  # fmt: skip
    if kind != "disaggregated" or any(g.deployment is None for g in pool.groups):
        colocated = colocated_tokens_per_s(pool, capacities, roles, mix)
        if kind == "disaggregated":
            notes.append("a group's GPU or model lacks catalog figures: placement not searched")
        state = NOT_MODELLED
        if kind == "colocated":  # no placement to search, but its queues still say whether it kept up
            state = _colocated_state(
                grid, roles, span, calibration, (waiting, growth, queued, peak_waiting), p
            )
            notes.append(f"pool state from its queues: {state.state.value} ({state.evidence})")
        return SegmentAnalysis(
            first, last, start, end, mix, roles, capacities, None, colocated, tuple(notes), waiting,
            (None, None), growth, state,
        )  # fmt: skip
    current_roles = [
        [(row, roles[row]) for row in group.members if roles.get(row) in ("prefill", "decode")]
        for group in pool.groups
    ]
    skipped = sum(1 for row, role in roles.items() if role not in ("prefill", "decode"))
    if skipped:
        notes.append(f"{skipped} worker(s) with role mixed/unknown kept out of the placement search")
    routing = infer_routing(
        grid,
        current_roles,
        capacities,
        first,
        last,
        load_tolerance=p.routing_load_tolerance,
        speed_gap=p.routing_speed_gap,
    )
    notes += routing_notes(routing)
    measured = measured_phases(
        grid, current_roles, first, last, routing, p.capacity, calibration.caps_reported
    )
    notes += measured_notes(measured, p.capacity.ttft_slo_s)
    sizes = tuple(len(members) for members in current_roles)
    # A saturated prefill phase queues: what it delivered then is raw throughput, whatever its TTFT, so
    # under a TTFT target the current plan counts its target-bounded capacity instead (which the buckets
    # seen within the target raise to what they show: a loose target that queueing met bounds little).
    in_plan = (None if p.capacity.ttft_slo_s is not None else measured[0], measured[1])
    state = pool_state(
        waiting, growth, measured, workers=max(1, len(roles)), backlog_per_worker=p.backlog_per_worker,
        queued=queued, peak_waiting=peak_waiting,
    )  # fmt: skip
    placement = place(
        capacities,
        current_roles,
        isl=mix.isl,
        osl=mix.osl,
        demand_tokens_per_s=mix.tokens_rate,
        peak_demand_tokens_per_s=traffic.peak(first, last, p.peak_quantile),
        tolerance=p.tolerance,
        confidence=p.confidence,
        headroom=p.headroom,
        act=p.act,
        min_gain=p.min_gain,
        dominance=p.dominance,
        routing=routing,
        measured=in_plan,
        seed=DECISION_SEED,
        standing=standing[1] if standing is not None and standing[0] == sizes else None,
        loads=worker_loads(
            grid, [row for members in current_roles for row, _ in members], first, last, nodes
        ),
        supply_limited=state.state is PoolState.SUPPLY_LIMITED,
    )
    placement = replace(placement, demand_limited=state.state is PoolState.DEMAND_LIMITED)
    notes.append(f"pool state from its queues: {state.state.value} ({state.evidence})")
    return SegmentAnalysis(
        first, last, start, end, mix, roles, capacities, placement, placement.current.tokens_per_s,
        tuple(notes), waiting, measured, growth, state,
    )  # fmt: skip


def _roles_held(pool: Pool, states: np.ndarray, first: int, last: int) -> dict[int, str]:
    """Grid row -> the role each worker held most over buckets [first, last), for those that served most of
    them (a worker down for half the segment or more holds none)."""
    roles: dict[int, str] = {}
    for i, row in enumerate(pool.members):
        held = Counter(states[i, first:last].tolist())
        state, count = held.most_common(1)[0]
        if state != _DOWN and count * 2 >= (last - first):
            roles[row] = str(ROLES[state])
    return roles


def _unplaceable_notes(pool: Pool, capacities: tuple[GroupCapacity, ...]) -> list[str]:
    """A note per group that cannot hold the model with room for its KV cache in either role."""
    return [
        f"{len(group.members)} worker(s) on {group.tp} x {group.sku.name} cannot hold "
        f"{pool.model_id} with room for its KV cache in either role: kept as they are, and no role "
        "is ever recommended onto it"
        for group, cap in zip(pool.groups, capacities, strict=True)
        if group.deployment is not None and not cap.prefill.fits and not cap.decode.fits
    ]


def _colocated_state(
    grid: WorkerGrid,
    roles: Mapping[int, str],
    span: tuple[int, int],
    calibration: PoolCalibration,
    queues: tuple[float, float, float, float],
    p: PoolParams,
) -> StateEvidence:
    """A colocated pool's state from its queues (waiting in the median bucket, growth, queued share, waiting
    in the 90th-percentile bucket), its workers standing in for the phases."""
    rows = np.array([row for row, role in roles.items() if role == "mixed"], dtype=np.int64)
    seen = colocated_at_limit(grid, rows, *span, p.capacity, calibration.caps_reported)
    waiting, growth, queued, peak_waiting = queues
    return pool_state(
        waiting, growth, (None, None), workers=max(1, len(roles)),
        backlog_per_worker=p.backlog_per_worker, colocated_at_limit=seen, queued=queued,
        peak_waiting=peak_waiting,
    )  # fmt: skip


def _standing(previous: SegmentAnalysis) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The move recommended in the previous segment (workers per group, prefill workers per group), for
    the hysteresis of the next; None where it recommended none."""
    placement = previous.placement
    if placement is None or placement.best.prefill == placement.current.prefill:
        return None
    return placement.sizes, placement.best.prefill


def colocated_tokens_per_s(
    pool: Pool, capacities: tuple[GroupCapacity, ...], roles: dict[int, str], mix: TrafficMix
) -> float:
    """Tokens/s a colocated pool sustains: each worker splits its time between the phases in the mix's
    proportion (prompt tokens at prefill speed, output tokens at decode speed)."""
    total = 0.0
    for group, cap in zip(pool.groups, capacities, strict=True):
        # A TTFT objective's queueing bound is a disaggregated prefill worker's: not applied here (a colocated
        # instance's goodput is not modelled, docs/analyzer.md#goodput).
        prefill = cap.prefill.unbounded_tokens_per_s or cap.prefill.tokens_per_s
        if prefill <= 0 or cap.decode.tokens_per_s <= 0:
            continue
        seconds_per_request = mix.isl / prefill + mix.osl / cap.decode.tokens_per_s
        serving = sum(1 for row in group.members if row in roles)
        total += serving * (mix.isl + mix.osl) / seconds_per_request
    return total
