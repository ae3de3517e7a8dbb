"""Pool-ratio drift: the pool's prefill:decode split no longer matches its traffic.

The best plan changes roles beyond mending misplaced SKUs (:mod:`analyzer.findings.misplaced_worker`). The
finding spans the latest run of such segments; its start is when the shift began (a traffic change point
when one opens the run). It also carries the moves of misplaced SKUs whose workers cannot be judged (no
measured bottleneck): no worker finding names them, and the pool's loss must not go unreported.
"""

from __future__ import annotations

import math

from analyzer.findings import misplaced_worker
from analyzer.findings.base import FindingInputs, latest_run, utc
from analyzer.findings.loss import (
    SeverityParams,
    known,
    loss_evidence,
    loss_fields,
    segment_evidence,
    severity,
    supply_limited,
)
from analyzer.findings.recommend import recommended_ratio
from analyzer.pools.analysis import PoolAnalysis
from analyzer.pools.worker_choice import Change
from fleet.contract import Finding, FindingKind, FindingStatus, Recommendation

KINDS = (FindingKind.POOL_RATIO_DRIFT,)


def detect(inputs: FindingInputs, severity_params: SeverityParams) -> list[Finding]:
    out: list[Finding] = []
    for analysis in inputs.analyses:
        out += _pool(analysis, inputs, severity_params)
    return out


def _pool(analysis: PoolAnalysis, inputs: FindingInputs, severity_params: SeverityParams) -> list[Finding]:
    carried = _carried(analysis, inputs)
    run = latest_run([bool(changes) for changes in carried])
    if run is None:
        return []
    first, last = run[0], run[1] - 1
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
    ratio_changes = [c for c, _ in carried[last]]
    share = sum(c.share for c in ratio_changes)
    gain = placement.lost_tokens_per_s * share
    evidence: dict[str, float | str | None] = {
        "prefill_decode_now": ratio.now,
        "prefill_decode_recommended": ratio.recommended,
        "shift_began": utc(began).isoformat(),
        "shift": cause.describe() if cause else "placement wrong since the start of the analysed range",
        "per_sku": ratio.per_sku_text(),
        "workers_to_flip": ", ".join(f"{inputs.grid.workers[c.row]}->{c.to_role}" for c in ratio_changes),
        "pool_lost_tokens_per_s": round(placement.lost_tokens_per_s, 1)
        if math.isfinite(placement.lost_tokens_per_s)
        else None,
    }
    unjudged = [
        f"{inputs.grid.workers[c.row]}->{c.to_role}"
        for c, kind in carried[last]
        if kind is not FindingKind.POOL_RATIO_DRIFT
    ]
    if unjudged:
        evidence["moves_without_worker_verdict"] = (
            f"{', '.join(unjudged)}: their bottleneck was not measured (no profiling fields), so no worker "
            "is found misplaced; the pool's capacities say the move gains"
        )
    evidence.update(segment_evidence(segment, placement))
    losses = loss_fields(placement, share)
    loss_evidence(evidence, losses)
    output, requests = losses["lost_output_tokens_per_s"], losses["lost_requests_per_s"]
    gain_text = (
        f": +{output:,.0f} output tokens/s, +{requests:,.2f} requests/s "
        f"({gain:,.0f} prompt + output tokens/s)"
        if output is not None and requests is not None and math.isfinite(gain)
        else ""
    )
    limited = supply_limited(segment)
    return [
        Finding(
            kind=FindingKind.POOL_RATIO_DRIFT,
            pool=analysis.pool.key,
            severity=severity(gain, placement.current.tokens_per_s, severity_params, supply_limited=limited),
            status=FindingStatus.OPEN if last == len(analysis.segments) - 1 else FindingStatus.RESOLVED,
            evidence=evidence,
            tokens_per_s=placement.current.tokens_per_s,
            lost_tokens_per_s=known(gain),
            lost_tokens_per_s_low=known(placement.lost_low * share),
            lost_tokens_per_s_high=known(placement.lost_high * share),
            **losses,
            recommendation=Recommendation(
                action="rebalance-pool",
                detail=move_text(ratio.now, ratio.recommended, str(evidence["workers_to_flip"]), gain_text),
                expected_gain_tokens_per_s=known(gain),
            ),
            first_seen=utc(began),
            last_seen=utc(segment.end),
        )
    ]


def move_text(now: str, recommended: str, workers: str, gain_text: str) -> str:
    """The recommendation's words. Where the pool's prefill:decode split stays (the moves swap roles across
    its SKUs, their workers unjudged), it says so: "from 4:4 to 4:4" read as a move that changes nothing."""
    if now == recommended:
        text = f"keep the pool's {now} prefill:decode split and swap these workers' roles across its SKUs"
    else:
        text = f"move the pool from {now} to {recommended} prefill:decode workers"
    return f"{text} ({workers}){gain_text}"[:2000]


def _carried(analysis: PoolAnalysis, inputs: FindingInputs) -> list[list[tuple[Change, FindingKind]]]:
    """Per segment, the recommended role changes this finding carries: those no misplaced SKU explains, and
    those of misplaced SKUs whose workers :mod:`analyzer.findings.misplaced_worker` cannot judge."""
    classified = misplaced_worker.classify_changes(analysis, inputs.grid, inputs.bottlenecks)
    return [
        [
            (c, kind)
            for c, kind in changes
            if kind is FindingKind.POOL_RATIO_DRIFT
            or (
                kind in misplaced_worker.KINDS
                and not misplaced_worker.judged(
                    inputs.bottlenecks, inputs.grid.workers[c.row], segment.first, segment.last
                )
            )
        ]
        for segment, changes in zip(analysis.segments, classified, strict=True)
    ]
