"""Findings that come from the placement model: misplaced workers, pool-ratio drift, under-used pools,
disaggregation that does not pay, an under-provisioned KV-transfer fabric.

A worker is misplaced when the best placement of the same GPUs changes its role (never otherwise: a fleet
without better hardware gets no misplacement finding, and the placement only assigns roles that fit).
Its kind says which way the SKU is wrong:

- decode -> prefill on a SKU while a higher-bandwidth SKU decodes in the best plan: decode on the
  lower-bandwidth SKU (or capacity-bound on the smaller memory, when capacity was the worker's dominant
  measured bottleneck over the segment: more often its limit than anything else);
- prefill -> decode on a SKU while a lower-bandwidth SKU that decodes now prefills in the best plan:
  prefill on the (costlier) high-bandwidth SKU;
- any other role change only re-balances the pool: it belongs to the pool's ratio-drift finding.

A worker finding needs a measured bottleneck: a worker the placement would move but whose counters could
not be read (no GPU telemetry, or busy-time counters that cannot decide) gets none and stays unjudged (its
share of the loss stays in the pool's figures). A finding whose worker was judged on busy-time counters
only (``ActivityEvidence.UTILISATION``) says so (``evidence["activity_evidence"]``, with what those
counters cannot tell) and is never critical.

Every finding that carries a loss states it as lost output tokens/s and requests/s (with a range; total
tokens/s is a secondary figure), its share of the placement's loss. Severity follows what the loss means:
a pool that serves its demand loses idle capacity, never critical (a warning at most, info when the share
is small); critical is kept for a supply-limited pool (requests waiting at its peak) losing at least
``critical_share`` of its capacity. A range that runs down to 0 names the uncertainty that takes it there.
Each finding spans the segments it held in (first/last seen) and is open only if it holds in the latest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from analyzer.findings.evidence import (
    UTILISATION_CAVEAT,
    activity_evidence,
    bottleneck_share,
    capacity_evidence,
    dominant_bottleneck,
    worker_evidence,
)
from analyzer.findings.recommend import (
    Check,
    RecommendParams,
    pair_swaps,
    recommended_ratio,
    rules_of_thumb,
    worker_recommendation,
)
from analyzer.pools.analysis import PoolAnalysis, SegmentAnalysis
from analyzer.pools.split_search import Change, PlacementResult
from analyzer.telemetry.bottleneck import BottleneckGrid
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import (
    ActivityEvidence,
    Bottleneck,
    Finding,
    FindingKind,
    FindingStatus,
    Recommendation,
    Role,
    Severity,
)

MISPLACEMENT_KINDS = (
    FindingKind.DECODE_ON_LOW_BANDWIDTH,
    FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    FindingKind.CAPACITY_ON_SMALL_MEMORY,
)


_MOST = 0.5  # "more often than not": a share of the time above this is the worker's usual state


@dataclass(frozen=True)
class FindingParams:
    critical_share: float = 0.10  # lost tokens over the pool's capacity for a critical finding
    warning_share: float = 0.02
    prefill_idle: float = 0.3  # prefill utilisation under this while decode is congested: not paying
    decode_congested: float = 0.9
    recommend: RecommendParams = field(default_factory=RecommendParams)


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def supply_limited(placement: PlacementResult, waiting_typical: float) -> bool:
    """The pool does not serve its demand: its peak demand exceeds its capacity and requests queue then."""
    return not placement.demand_limited and math.isfinite(waiting_typical) and waiting_typical >= 1.0


def severity(
    lost: float, capacity: float, params: FindingParams, *, supply_limited: bool = False
) -> Severity:
    """Critical only where the pool is supply-limited and loses at least ``critical_share`` of its capacity;
    otherwise the loss is capacity (idle where the pool serves its demand): warning at most."""
    share = lost / capacity if capacity > 0 else 0.0
    if supply_limited and share >= params.critical_share:
        return Severity.CRITICAL
    if share >= params.warning_share:
        return Severity.WARNING
    return Severity.INFO


def _severity_basis(placement: PlacementResult, waiting_typical: float) -> str:
    queue = (
        f"{waiting_typical:,.1f} requests waiting in the median bucket"
        if math.isfinite(waiting_typical)
        else "no queue reported"
    )
    if placement.demand_limited:
        return (
            "demand-limited (the pool served even its peak demand): the loss is idle capacity, "
            "at most a warning"
        )
    if supply_limited(placement, waiting_typical):
        return (
            f"supply-limited: peak demand exceeds the pool's capacity and {queue}: the loss is traffic "
            "not served"
        )
    return f"peak demand exceeds the modelled capacity but {queue}: the loss is capacity, at most a warning"


def _loss_fields(placement: PlacementResult, share: float) -> dict[str, float | None]:
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


def change_kind(
    change: Change,
    placement: PlacementResult,
    current_prefill: Sequence[int],
    capacity_bound: bool,
) -> FindingKind:
    """Which way the SKU is wrong for a worker the best plan moves (POOL_RATIO_DRIFT: neither way)."""
    groups = placement.groups
    sizes = placement.sizes
    mine = groups[change.group].group.sku
    bandwidth = mine.hbm_bandwidth_bytes_per_s or 0.0
    if change.to_role == "prefill":
        faster = [
            h
            for h, g in enumerate(groups)
            if (g.group.sku.hbm_bandwidth_bytes_per_s or 0.0) > bandwidth
            and sizes[h] - placement.best.prefill[h] > 0
        ]
        if not faster:
            return FindingKind.POOL_RATIO_DRIFT
        bigger = any((groups[h].group.sku.hbm_bytes or 0) > (mine.hbm_bytes or 0) for h in faster)
        if bigger and capacity_bound:
            return FindingKind.CAPACITY_ON_SMALL_MEMORY
        return FindingKind.DECODE_ON_LOW_BANDWIDTH
    slower = [
        h
        for h, g in enumerate(groups)
        if (g.group.sku.hbm_bandwidth_bytes_per_s or 0.0) < bandwidth
        and sizes[h] - current_prefill[h] > 0
        and placement.best.prefill[h] > current_prefill[h]
    ]
    return FindingKind.PREFILL_ON_HIGH_BANDWIDTH if slower else FindingKind.POOL_RATIO_DRIFT


@dataclass
class _Episode:
    kind: FindingKind
    row: int
    segments: list[int] = field(default_factory=list)


def placement_findings(
    analysis: PoolAnalysis, grid: WorkerGrid, bottlenecks: BottleneckGrid, params: FindingParams | None = None
) -> list[Finding]:
    p = params or FindingParams()
    episodes: dict[tuple[int, FindingKind], _Episode] = {}
    latest = len(analysis.segments) - 1
    kinds = classify_changes(analysis, grid, bottlenecks, p)
    for index, classified in enumerate(kinds):
        segment = analysis.segments[index]
        for change, kind in classified:
            if kind is FindingKind.POOL_RATIO_DRIFT or not judged(
                bottlenecks, grid.workers[change.row], segment.first, segment.last
            ):
                continue
            episodes.setdefault((change.row, kind), _Episode(kind, change.row)).segments.append(index)
    findings = [_worker_finding(analysis, grid, bottlenecks, e, latest, p) for e in episodes.values()]
    findings += _ratio_drift(analysis, grid, kinds, p)
    findings += _pool_health(analysis, bottlenecks, grid, p)
    return findings


def judged(bottlenecks: BottleneckGrid, worker_id: str, first: int, last: int) -> bool:
    """Whether the worker's bottleneck was measured over buckets [first, last): only then may it be found
    misplaced (the placement model alone does not judge a worker whose counters could not be read)."""
    return dominant_bottleneck(bottlenecks, worker_id, first, last) is not Bottleneck.UNKNOWN


def classify_changes(
    analysis: PoolAnalysis, grid: WorkerGrid, bottlenecks: BottleneckGrid, p: FindingParams
) -> list[list[tuple[Change, FindingKind]]]:
    """Per segment, each role change of the best plan with the kind of misplacement it mends."""
    out: list[list[tuple[Change, FindingKind]]] = []
    for segment in analysis.segments:
        placement = segment.placement
        classified = []
        for change in placement.changes if placement else ():
            assert placement is not None
            bound = dominant_bottleneck(bottlenecks, grid.workers[change.row], segment.first, segment.last)
            classified.append(
                (
                    change,
                    change_kind(change, placement, placement.current.prefill, bound is Bottleneck.CAPACITY),
                )
            )
        out.append(classified)
    return out


def _worker_finding(
    analysis: PoolAnalysis,
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    episode: _Episode,
    latest: int,
    p: FindingParams,
) -> Finding:
    last = analysis.segments[episode.segments[-1]]
    placement = last.placement
    assert placement is not None
    change = next(c for c in placement.changes if c.row == episode.row)
    pairs = pair_swaps(placement.changes, placement.groups)
    worker_id = grid.workers[episode.row]
    evidence = worker_evidence(
        analysis.pool,
        grid,
        bottlenecks,
        episode.row,
        last.first,
        last.last,
        isl=last.mix.isl,
        osl=last.mix.osl,
    )
    evidence.update(capacity_evidence(placement.groups[change.group], episode.row))
    recommendation, options = worker_recommendation(
        change,
        placement,
        grid.workers,
        pairs.get(episode.row),
        _float(evidence.get("requests_running")),
        p.recommend,
    )
    evidence.update(options)
    hours = sum(analysis.segments[i].hours for i in episode.segments)
    total = sum(s.hours for s in analysis.segments)
    evidence.update(_segment_evidence(last, placement))
    evidence["fraction_of_time"] = round(hours / total, 4) if total > 0 else None
    evidence["recommended_role"] = change.to_role
    lost = placement.lost_tokens_per_s * change.share
    losses = _loss_fields(placement, change.share)
    _loss_evidence(evidence, losses)
    group = placement.groups[change.group]
    role_now = Role.DECODE if change.to_role == "prefill" else Role.PREFILL
    rate_now = evidence.get("generation_tokens_per_s" if role_now is Role.DECODE else "prompt_tokens_per_s")
    level = severity(
        lost,
        placement.current.tokens_per_s,
        p,
        supply_limited=supply_limited(placement, last.waiting_typical),
    )
    weak = activity_evidence(bottlenecks, worker_id, last.first, last.last) is ActivityEvidence.UTILISATION
    if weak:
        # Busy-time counters cannot show that bandwidth (or compute) limited the worker: never critical.
        level = Severity.WARNING if level is Severity.CRITICAL else level
        evidence["severity_basis"] = f"{evidence.get('severity_basis', '')}; weak evidence: at most a warning"
        recommendation = recommendation.model_copy(
            update={"detail": f"Weak evidence ({UTILISATION_CAVEAT}). {recommendation.detail}"[:2000]}
        )
    return Finding(
        kind=episode.kind,
        worker_id=worker_id,
        pool=analysis.pool.key,
        severity=level,
        status=FindingStatus.OPEN if episode.segments[-1] == latest else FindingStatus.RESOLVED,
        gpu_sku=group.group.sku.key,
        role=role_now,
        bottleneck=dominant_bottleneck(bottlenecks, worker_id, last.first, last.last),
        evidence=evidence,
        tokens_per_s=_float(rate_now),
        lost_tokens_per_s=lost,
        lost_tokens_per_s_low=placement.lost_low * change.share,
        lost_tokens_per_s_high=placement.lost_high * change.share,
        **losses,
        recommendation=recommendation,
        first_seen=_ts(analysis.segments[episode.segments[0]].start),
        last_seen=_ts(last.end),
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _segment_evidence(segment: SegmentAnalysis, placement: PlacementResult) -> dict[str, float | str | None]:
    out: dict[str, float | str | None] = {
        "mean_prompt_tokens": round(segment.mix.isl, 1),
        "mean_output_tokens": round(segment.mix.osl, 1),
        "pool_tokens_per_s_now": round(placement.current.tokens_per_s, 1),
        "pool_tokens_per_s_best": round(placement.best.tokens_per_s, 1),
        "pool_bound_now": placement.current.bound,
        "utilisation": round(placement.utilisation, 4) if math.isfinite(placement.utilisation) else None,
        "demand_limited": "yes" if placement.demand_limited else "no",
        "requests_waiting_median": round(segment.waiting_typical, 2)
        if math.isfinite(segment.waiting_typical)
        else None,
        "severity_basis": _severity_basis(placement, segment.waiting_typical),
    }
    if placement.lost_tokens_per_s > 0 and placement.lost_low <= 0:
        out["loss_range_to_zero"] = "the low end of the loss reaches 0 through " + (
            placement.range_cause or "the capacities' uncertainty"
        )
    if placement.demand_limited:
        cost = placement.misplacement_cost_per_week_usd
        out["loss_meaning"] = "demand-limited: the loss is idle capacity, not undelivered tokens; " + (
            f"${cost:,.0f} per week at catalog prices" if cost is not None else "price unknown"
        )
        out["misplacement_cost_per_week_usd"] = round(cost, 2) if cost is not None else None
    return out


def _loss_evidence(evidence: dict[str, float | str | None], losses: Mapping[str, float | None]) -> None:
    """The loss in the units an SRE acts on, as evidence text: output tokens/s and requests/s with ranges."""
    out, req = losses["lost_output_tokens_per_s"], losses["lost_requests_per_s"]
    if out is None or req is None:
        return
    evidence["lost_output_tokens"] = (
        f"{out:,.0f} output tokens/s ({losses['lost_output_tokens_per_s_low'] or 0.0:,.0f}-"
        f"{losses['lost_output_tokens_per_s_high'] or 0.0:,.0f})"
    )
    evidence["lost_requests"] = (
        f"{req:,.2f} requests/s ({losses['lost_requests_per_s_low'] or 0.0:,.2f}-"
        f"{losses['lost_requests_per_s_high'] or 0.0:,.2f})"
    )


def _latest_run(flags: Sequence[bool]) -> tuple[int, int] | None:
    """Indices [first, last] of the last run of True flags."""
    last = max((i for i, f in enumerate(flags) if f), default=None)
    if last is None:
        return None
    first = last
    while first > 0 and flags[first - 1]:
        first -= 1
    return first, last


def _ratio_drift(
    analysis: PoolAnalysis, grid: WorkerGrid, kinds: list[list[tuple[Change, FindingKind]]], p: FindingParams
) -> list[Finding]:
    """The pool's prefill:decode split no longer matches its traffic: the best plan changes roles beyond
    mending misplaced SKUs. The finding spans the latest run of such segments; its start is when the
    shift began (a traffic change point when one opens the run)."""
    flags = [any(kind is FindingKind.POOL_RATIO_DRIFT for _, kind in classified) for classified in kinds]
    run = _latest_run(flags)
    if run is None:
        return []
    first, last = run
    segment = analysis.segments[last]
    placement = segment.placement
    assert placement is not None
    ratio = recommended_ratio(analysis, segment)
    assert ratio is not None
    began = analysis.segments[first].start
    cause = next(
        (
            cp
            for cp in analysis.change_points
            if abs(float(analysis.traffic.bucket_start[cp.index]) - began) < 1.0
        ),
        None,
    )
    ratio_changes = [c for c, kind in kinds[last] if kind is FindingKind.POOL_RATIO_DRIFT]
    share = sum(c.share for c in ratio_changes)
    gain = placement.lost_tokens_per_s * share
    evidence: dict[str, float | str | None] = {
        "prefill_decode_now": ratio.now,
        "prefill_decode_recommended": ratio.recommended,
        "shift_began": _ts(began).isoformat(),
        "shift": cause.describe() if cause else "placement wrong since the start of the analysed range",
        "per_sku": ratio.per_sku_text(),
        "workers_to_flip": ", ".join(f"{grid.workers[c.row]}->{c.to_role}" for c in ratio_changes),
        "pool_lost_tokens_per_s": round(placement.lost_tokens_per_s, 1),
    }
    evidence.update(_segment_evidence(segment, placement))
    losses = _loss_fields(placement, share)
    _loss_evidence(evidence, losses)
    output, requests = losses["lost_output_tokens_per_s"], losses["lost_requests_per_s"]
    gain_text = (
        f": +{output:,.0f} output tokens/s, +{requests:,.2f} requests/s "
        f"({gain:,.0f} prompt + output tokens/s)"
        if output is not None and requests is not None
        else ""
    )
    return [
        Finding(
            kind=FindingKind.POOL_RATIO_DRIFT,
            pool=analysis.pool.key,
            severity=severity(
                gain,
                placement.current.tokens_per_s,
                p,
                supply_limited=supply_limited(placement, segment.waiting_typical),
            ),
            status=FindingStatus.OPEN if last == len(analysis.segments) - 1 else FindingStatus.RESOLVED,
            evidence=evidence,
            tokens_per_s=placement.current.tokens_per_s,
            lost_tokens_per_s=gain,
            lost_tokens_per_s_low=placement.lost_low * share,
            lost_tokens_per_s_high=placement.lost_high * share,
            **losses,
            recommendation=Recommendation(
                action="rebalance-pool",
                detail=(
                    f"move the pool from {ratio.now} to {ratio.recommended} prefill:decode workers "
                    f"({evidence['workers_to_flip']}){gain_text}"
                )[:2000],
                expected_gain_tokens_per_s=gain,
            ),
            first_seen=_ts(began),
            last_seen=_ts(segment.end),
        )
    ]


def _pool_health(
    analysis: PoolAnalysis, bottlenecks: BottleneckGrid, grid: WorkerGrid, p: FindingParams
) -> list[Finding]:
    """Under-used pool, disaggregation not paying off and the KV handoff, per segment (latest run)."""
    out: list[Finding] = []
    checks = [
        {c.name: c for c in rules_of_thumb(analysis, s, p.recommend)} if s.capacity_tokens_per_s > 0 else {}
        for s in analysis.segments
    ]
    underused = [c.get("utilisation") is not None and c["utilisation"].passed is False for c in checks]
    fabric = [c.get("kv-handoff") is not None and c["kv-handoff"].passed is False for c in checks]
    not_paying = [
        _not_paying(analysis, s, c, bottlenecks, grid, p)
        for s, c in zip(analysis.segments, checks, strict=True)
    ]
    for kind, flags in (
        (FindingKind.UNDERUTILISED_POOL, underused),
        (FindingKind.KV_FABRIC_UNDERPROVISIONED, fabric),
        (FindingKind.DISAGGREGATION_NOT_PAYING, [bool(n) for n in not_paying]),
    ):
        run = _latest_run(flags)
        if run is None:
            continue
        first, last = run
        segment = analysis.segments[last]
        names = {
            FindingKind.UNDERUTILISED_POOL: ["utilisation", "model-size", "output-length"],
            FindingKind.KV_FABRIC_UNDERPROVISIONED: ["kv-handoff"],
            FindingKind.DISAGGREGATION_NOT_PAYING: [
                "colocated-vs-disaggregated",
                "model-size",
                "output-length",
                "utilisation",
            ],
        }[kind]
        evidence: dict[str, float | str | None] = {}
        for name in names:
            check = checks[last].get(name)
            if check is not None:
                evidence[f"{name}"] = check.value
                evidence[f"{name}_detail"] = check.detail
        if kind is FindingKind.DISAGGREGATION_NOT_PAYING:
            evidence["reason"] = not_paying[last]
        action = {
            FindingKind.UNDERUTILISED_POOL: "investigate",
            FindingKind.KV_FABRIC_UNDERPROVISIONED: "investigate",
            FindingKind.DISAGGREGATION_NOT_PAYING: "colocate",
        }[kind]
        placement = segment.placement
        idle = placement.idle_cost_per_week_usd if placement else None
        if kind is FindingKind.UNDERUTILISED_POOL:
            evidence["idle_cost_per_week_usd"] = round(idle, 2) if idle is not None else None
            evidence["idle_cost"] = (
                f"${idle:,.0f} per week at catalog prices" if idle is not None else "price unknown"
            )
        out.append(
            Finding(
                kind=kind,
                pool=analysis.pool.key,
                severity=Severity.WARNING,
                status=FindingStatus.OPEN if last == len(analysis.segments) - 1 else FindingStatus.RESOLVED,
                evidence=evidence,
                tokens_per_s=segment.mix.tokens_rate,
                recommendation=Recommendation(
                    action=action, detail=str(evidence.get(f"{names[0]}_detail", ""))[:2000]
                ),
                first_seen=_ts(analysis.segments[first].start),
                last_seen=_ts(segment.end),
            )
        )
    return out


def _not_paying(
    analysis: PoolAnalysis,
    segment: SegmentAnalysis,
    checks: Mapping[str, Check],
    bottlenecks: BottleneckGrid,
    grid: WorkerGrid,
    p: FindingParams,
) -> str:
    """Why disaggregation does not pay in this segment ("" when it does)."""
    placement = segment.placement
    if placement is None:
        return ""
    prompt_use = (
        segment.mix.prompt_rate / placement.current.prefill_tokens_per_s
        if placement.current.prefill_tokens_per_s > 0
        else 0.0
    )
    output_use = (
        segment.mix.output_rate / placement.current.decode_tokens_per_s
        if placement.current.decode_tokens_per_s > 0
        else 0.0
    )
    decode_rows = [row for row, role in segment.roles.items() if role == "decode"]
    shares = [
        bottleneck_share(bottlenecks, grid.workers[row], segment.first, segment.last, Bottleneck.CAPACITY)
        for row in decode_rows
    ]
    starved = float(np.mean(shares)) if shares else 0.0
    if prompt_use < p.prefill_idle and (output_use >= p.decode_congested or starved > _MOST):
        return (
            f"the prefill pool runs at {prompt_use:.0%} of its capacity while decode is congested "
            f"({output_use:.0%} of capacity, KV-bound {starved:.0%} of the time)"
        )
    colocated = checks.get("colocated-vs-disaggregated")
    against = [c for c in (checks.get("model-size"), checks.get("output-length")) if c and c.passed is False]
    if against and colocated is not None and colocated.passed is False:
        return "; ".join([colocated.detail, *(c.detail for c in against)])
    return ""
