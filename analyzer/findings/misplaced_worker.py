"""Misplaced workers: the best placement of the same GPUs changes a worker's role, and its SKU is why.

Kinds: decode-on-low-bandwidth, capacity-on-small-memory, prefill-on-high-bandwidth; any other role change
is :mod:`analyzer.findings.ratio_drift`. Only workers whose bottleneck was measured are judged.
Reasoning: docs/analyzer.md#misplaced_worker
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.findings.base import FindingInputs, finite, utc
from analyzer.findings.evidence import (
    UTILISATION_CAVEAT,
    activity_evidence,
    capacity_evidence,
    dominant_bottleneck,
    worker_evidence,
)
from analyzer.findings.loss import (
    SeverityParams,
    known,
    loss_evidence,
    loss_fields,
    segment_evidence,
    severity,
    supply_limited,
)
from analyzer.findings.recommend import RecommendParams, pair_swaps, worker_recommendation
from analyzer.pools.analysis import PoolAnalysis
from analyzer.pools.attainment import worker_target_evidence
from analyzer.pools.split_search import PlacementResult
from analyzer.pools.worker_choice import Change
from analyzer.telemetry.bottleneck import BottleneckGrid
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import ActivityEvidence, Bottleneck, Finding, FindingKind, FindingStatus, Role, Severity

KINDS = (
    FindingKind.DECODE_ON_LOW_BANDWIDTH,
    FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    FindingKind.CAPACITY_ON_SMALL_MEMORY,
)


def change_kind(
    change: Change,
    placement: PlacementResult,
    current_prefill: tuple[int, ...] | list[int],
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


def judged(bottlenecks: BottleneckGrid, worker_id: str, first: int, last: int) -> bool:
    """Whether the worker's bottleneck was measured over buckets [first, last): only then may it be found
    misplaced (the placement model alone does not judge a worker whose counters could not be read)."""
    return dominant_bottleneck(bottlenecks, worker_id, first, last) is not Bottleneck.UNKNOWN


def classify_changes(
    analysis: PoolAnalysis, grid: WorkerGrid, bottlenecks: BottleneckGrid
) -> list[list[tuple[Change, FindingKind]]]:
    """Per segment, each role change of the best plan with the kind of misplacement it mends."""
    out: list[list[tuple[Change, FindingKind]]] = []
    for segment in analysis.segments:
        placement = segment.placement
        classified = []
        for change in placement.changes if placement else ():
            assert placement is not None
            bound = dominant_bottleneck(bottlenecks, grid.workers[change.row], segment.first, segment.last)
            kind = change_kind(change, placement, placement.current.prefill, bound is Bottleneck.CAPACITY)
            classified.append((change, kind))
        out.append(classified)
    return out


@dataclass
class _Episode:
    kind: FindingKind
    row: int
    segments: list[int] = field(default_factory=list)


def detect(inputs: FindingInputs, severity_params: SeverityParams, advice: RecommendParams) -> list[Finding]:
    findings: list[Finding] = []
    for analysis in inputs.analyses:
        episodes: dict[tuple[int, FindingKind], _Episode] = {}
        classified = classify_changes(analysis, inputs.grid, inputs.bottlenecks)
        for index, changes in enumerate(classified):
            segment = analysis.segments[index]
            for change, kind in changes:
                worker_id = inputs.grid.workers[change.row]
                if kind in KINDS and judged(inputs.bottlenecks, worker_id, segment.first, segment.last):
                    episodes.setdefault((change.row, kind), _Episode(kind, change.row)).segments.append(index)
        findings += [_finding(analysis, inputs, e, severity_params, advice) for e in episodes.values()]
    return findings


def _finding(
    analysis: PoolAnalysis,
    inputs: FindingInputs,
    episode: _Episode,
    severity_params: SeverityParams,
    advice: RecommendParams,
) -> Finding:
    grid, bottlenecks = inputs.grid, inputs.bottlenecks
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
        finite(evidence.get("requests_running")),
        advice,
    )
    evidence.update(options)
    hours = sum(analysis.segments[i].hours for i in episode.segments)
    total = sum(s.hours for s in analysis.segments)
    evidence.update(segment_evidence(last, placement))
    evidence["fraction_of_time"] = round(hours / total, 4) if total > 0 else None
    evidence["recommended_role"] = change.to_role
    lost = placement.lost_tokens_per_s * change.share
    losses = loss_fields(placement, change.share)
    loss_evidence(evidence, losses)
    group = placement.groups[change.group]
    role_now = Role.DECODE if change.to_role == "prefill" else Role.PREFILL
    rate_now = evidence.get("generation_tokens_per_s" if role_now is Role.DECODE else "prompt_tokens_per_s")
    limited = supply_limited(last)
    level = severity(lost, placement.current.tokens_per_s, severity_params, supply_limited=limited)
    weak = activity_evidence(bottlenecks, worker_id, last.first, last.last) is ActivityEvidence.UTILISATION
    if weak:
        # Busy-time counters cannot show that bandwidth (or compute) limited the worker: never critical.
        level = Severity.WARNING if level is Severity.CRITICAL else level
        evidence["severity_basis"] = f"{evidence.get('severity_basis', '')}; weak evidence: at most a warning"
        recommendation = recommendation.model_copy(
            update={"detail": f"Weak evidence ({UTILISATION_CAVEAT}). {recommendation.detail}"[:2000]}
        )
    slo, missed = worker_target_evidence(grid, episode.row, last.first, last.last, role_now, analysis.targets)
    evidence.update(slo)
    if missed is not None:
        detail = f"{missed} {recommendation.detail}"[:2000]
        recommendation = recommendation.model_copy(update={"detail": detail})
    latest = len(analysis.segments) - 1
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
        tokens_per_s=finite(rate_now),
        lost_tokens_per_s=known(lost),
        lost_tokens_per_s_low=known(placement.lost_low * change.share),
        lost_tokens_per_s_high=known(placement.lost_high * change.share),
        **losses,
        recommendation=recommendation,
        first_seen=utc(analysis.segments[episode.segments[0]].start),
        last_seen=utc(last.end),
    )
