"""What to do about a placement, and what it costs; recommended prefill:decode ratios.

Per worker the best plan moves: swap roles in place or move across GPU models, each with its gain,
disruption and why this worker. The ratio per pool and SKU follows NVIDIA Dynamo's planner.
Reasoning: docs/analyzer.md#recommend
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.split_search import PlacementResult
from analyzer.pools.worker_choice import Change
from analyzer.results.summary import GroupRecommendation
from analyzer.tunable import tunable
from fleet.contract import Recommendation


@dataclass(frozen=True)
class RecommendParams:
    restart_s: float = tunable(300.0, "Seconds a role swap in place takes: drain, restart, warm up.")
    cold_start_s: float = tunable(
        900.0, "Seconds a move to other GPUs takes: schedule, load weights, warm up."
    )


def pair_swaps(changes: tuple[Change, ...], groups: tuple[GroupCapacity, ...]) -> dict[int, int]:
    """Pair each decode->prefill change with a prefill->decode change (row -> counterpart row, both ways):
    the same-node partner the placement chose where there is one, else one on a higher-bandwidth SKU."""
    to_prefill = [c for c in changes if c.to_role == "prefill"]
    to_decode = [c for c in changes if c.to_role == "decode"]
    pairs: dict[int, int] = {c.row: c.partner for c in changes if c.partner is not None}
    for a in to_prefill:
        if a.row in pairs:
            continue
        bandwidth = groups[a.group].group.sku.hbm_bandwidth_bytes_per_s or 0.0
        for b in to_decode:
            if b.row in pairs:
                continue
            if (groups[b.group].group.sku.hbm_bandwidth_bytes_per_s or 0.0) > bandwidth:
                pairs[a.row], pairs[b.row] = b.row, a.row
                break
    return pairs


def worker_recommendation(
    change: Change,
    placement: PlacementResult,
    worker_ids: tuple[str, ...],
    counterpart: int | None,
    sessions: float | None,
    params: RecommendParams | None = None,
) -> tuple[Recommendation, dict[str, float | str | None]]:
    """The recommended action for one changed worker, and the options considered (as evidence)."""
    p = params or RecommendParams()
    group = placement.groups[change.group]
    # The recommended move's own gain (not a larger move held back that the pool's loss may count)
    gain = placement.recommended_gain * change.share
    requests = placement.requests_for(gain)
    output = requests * placement.osl
    now_role = "decode" if change.to_role == "prefill" else "prefill"
    rate_now = (group.decode if now_role == "decode" else group.prefill).tokens_per_s
    swap_cost = rate_now * p.restart_s  # tokens not served while it restarts
    options: dict[str, float | str | None] = {
        "option_swap_roles_in_place_gain_tokens_per_s": round(gain, 1),
        "option_swap_roles_in_place_gain_output_tokens_per_s": _round(output, 1),
        "option_swap_roles_in_place_gain_requests_per_s": _round(requests, 3),
        "option_swap_roles_in_place_cost_tokens": round(swap_cost, 0),
        "option_swap_roles_in_place_payback_s": round(swap_cost / gain, 0) if gain > 0 else None,
        "sessions_in_flight": round(sessions, 1) if sessions is not None else None,
        "option_move_same_sku": "not applicable: the same GPU model does not change the bottleneck",
    }
    why = change.reason
    if change.partner is not None:
        where = f" ({change.node})" if change.node else ""
        why = f"swap in place with {worker_ids[change.partner]} on the same node{where}: no data moves"
    options["chosen_because"] = why or None
    idle = (
        "; the pool serves today's demand, so this is idle capacity, not lost traffic"
        if placement.demand_limited
        else ""
    )
    detail = (
        f"restart {worker_ids[change.row]} as {change.to_role} on its {group.group.tp} x "
        f"{group.group.sku.name} (about {p.restart_s / 60:.0f} min"
        + (f"; ~{sessions:.0f} in-flight sessions drain first" if sessions and now_role == "decode" else "")
        + f"): +{_text(output, ',.0f')} output tokens/s, +{_text(requests, ',.2f')} requests/s expected "
        f"({gain:,.0f} prompt + output tokens/s){idle}" + (f". Why this worker: {why}" if why else "")
    )
    target_sku = None
    if counterpart is not None:
        other = next(g for g in placement.groups if counterpart in g.group.members)
        cold_cost = rate_now * p.cold_start_s
        options["option_move_across_sku_counterpart"] = worker_ids[counterpart]
        options["option_move_across_sku_cost_tokens"] = round(cold_cost, 0)
        options["option_move_across_sku"] = (
            f"alternative: move {worker_ids[change.row]} ({now_role}) onto {worker_ids[counterpart]}'s "
            f"{other.group.sku.name} GPUs and back: same gain, cold start, sessions lost"
        )
        target_sku = other.group.sku.key
        detail += (
            f"; with {worker_ids[counterpart]} swapped the other way this moves {now_role} work onto "
            f"{other.group.sku.name}. Moving the processes across GPU models instead gives the same gain "
            "with a cold start and lost sessions (a checkpoint cannot cross GPU models)"
        )
    return (
        Recommendation(
            action="swap-roles-in-place",
            detail=detail[:2000],
            counterpart_worker_id=worker_ids[counterpart] if counterpart is not None else None,
            target_sku=target_sku,
            expected_gain_tokens_per_s=max(0.0, gain),
        ),
        options,
    )


def _round(value: float, digits: int) -> float | None:
    return round(value, digits) if math.isfinite(value) else None


def _text(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else "?"


@dataclass(frozen=True)
class RatioRecommendation:
    prefill_now: int
    decode_now: int
    prefill_best: int
    decode_best: int
    peak_requests_per_s: float  # NaN where the traffic was not measured (null in the summary)
    per_sku: dict[str, GroupRecommendation]

    @property
    def now(self) -> str:
        return f"{self.prefill_now}:{self.decode_now}"

    @property
    def recommended(self) -> str:
        return f"{self.prefill_best}:{self.decode_best}"

    @property
    def ratio_now(self) -> float:
        return self.prefill_now / max(1, self.decode_now)

    @property
    def ratio_recommended(self) -> float:
        return self.prefill_best / max(1, self.decode_best)

    def per_sku_text(self) -> str:
        return "; ".join(
            f"{key}: {v.prefill_now}P/{v.decode_now}D -> {v.prefill_best}P/{v.decode_best}D"
            for key, v in self.per_sku.items()
        )


def _replicas(rate: float, length: float, per_worker: float | None) -> int | None:
    """Dynamo planner: replicas = ceil(requests/s x tokens per request / per-worker tokens/s); None where
    the peak or the per-worker figure is unknown."""
    if per_worker is None or not (per_worker > 0 and math.isfinite(rate) and math.isfinite(length)):
        return None
    return math.ceil(rate * length / per_worker)


def _per_worker(capacity: RoleCapacity) -> float | None:
    """A role's tokens/s per worker, rounded; None where it is unknown (it does not fit, or no figure): an
    unknown capacity is never 0."""
    value = capacity.tokens_per_s
    return round(value, 1) if capacity.fits and math.isfinite(value) and value > 0 else None


def recommended_ratio(
    analysis: PoolAnalysis, segment: SegmentAnalysis, peak_quantile: float = 0.95
) -> RatioRecommendation | None:
    """The pool's prefill:decode recommendation for a segment (None where no placement was searched)."""
    placement = segment.placement
    mix = segment.mix
    if placement is None or not (mix.isl > 0 and mix.osl > 0):
        return None
    peak_tokens = analysis.traffic.peak(segment.first, segment.last, peak_quantile)
    seen = analysis.traffic.tokens_rate[segment.first : segment.last]
    if peak_tokens > 0:
        peak_rate = peak_tokens / (mix.isl + mix.osl)
    else:  # 0 where the traffic was measured and nil; unknown (NaN, null in the summary) where not measured
        peak_rate = 0.0 if bool(np.isfinite(seen).any()) else math.nan
    per_sku = {}
    for g, cap in enumerate(placement.groups):
        size = placement.sizes[g]
        per_sku[cap.group.key] = GroupRecommendation(
            prefill_now=placement.current.prefill[g],
            decode_now=size - placement.current.prefill[g],
            prefill_best=placement.best.prefill[g],
            decode_best=size - placement.best.prefill[g],
            prefill_tokens_per_s_per_worker=_per_worker(cap.prefill),
            decode_tokens_per_s_per_worker=_per_worker(cap.decode),
            prefill_replicas_for_peak=_replicas(peak_rate, mix.isl, _per_worker(cap.prefill)),
            decode_replicas_for_peak=_replicas(peak_rate, mix.osl, _per_worker(cap.decode)),
            prefill_source=cap.prefill.source,
            decode_source=cap.decode.source,
        )
    serving = sum(placement.sizes)
    now_p, best_p = sum(placement.current.prefill), sum(placement.best.prefill)
    return RatioRecommendation(now_p, serving - now_p, best_p, serving - best_p, peak_rate, per_sku)
