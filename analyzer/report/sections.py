"""The report's sections from one analyzer run: ranked actions, pool rows, hourly loss, ratio segments, and
the one-sentence verdict. Pure functions over the pipeline's findings and summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from analyzer.findings.loss import states_loss
from analyzer.report.model import Action, HourlyLost, PoolRow, RatioPoint, WeekFigures
from analyzer.report.style import evidence_line, output_range, output_rate, requests_rate, tokens_rate
from analyzer.results.summary import PoolSummary, SegmentSummary, Summary
from fleet.contract import Finding, FindingStatus

NO_ACTION = {"none", "investigate"}


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _share(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def rank_key(f: Finding) -> tuple[int, float, int, float, int, float, str, str]:
    """Largest output tokens/s first, then requests/s, then total tokens/s (secondary); at each level a
    finding whose figure is unknown after every sized one (an unknown is not ranked as 0 nor above a known
    loss)."""
    r = f.recommendation
    total = (r.expected_gain_tokens_per_s if r else None) or (f.lost_tokens_per_s if states_loss(f) else None)
    output, requests = f.lost_output_tokens_per_s, f.lost_requests_per_s
    return (
        0 if output is not None else 1,
        -(output or 0.0),
        0 if requests is not None else 1,
        -(requests or 0.0),
        0 if total is not None else 1,
        -(total or 0.0),
        f.kind.value,
        f.worker_id or f.pool or "",
    )


def actions_of(
    findings: Sequence[Finding], previous: set[tuple[str, str]]
) -> tuple[list[Action], list[Action], list[Action]]:
    """(ranked actions, considered but not recommended, every finding) from one run's findings."""
    ranked = sorted((f for f in findings if f.status is FindingStatus.OPEN), key=rank_key)
    actions, considered, appendix = [], [], []
    for f in ranked:
        r = f.recommendation
        subject = f.worker_id or f.pool or "fleet"
        row = Action(
            rank=0,
            status="persisting" if (f.kind.value, subject) in previous else "new",
            kind=f.kind.value,
            subject=subject,
            pool=f.pool or "",
            sku=f.gpu_sku,
            role=f.role.value,
            bottleneck=f.bottleneck.value,
            action=r.action if r else "none",
            detail=r.detail if r else "",
            counterpart=r.counterpart_worker_id if r else None,
            lost_tokens_per_s=f.lost_tokens_per_s if states_loss(f) else None,
            lost_low=f.lost_tokens_per_s_low if states_loss(f) else None,
            lost_high=f.lost_tokens_per_s_high if states_loss(f) else None,
            expected_gain_tokens_per_s=r.expected_gain_tokens_per_s if r else None,
            evidence=evidence_line(dict(f.evidence)),
            share_of_week=_share(f.evidence.get("fraction_of_time")),
            lost_output_tokens_per_s=f.lost_output_tokens_per_s,
            lost_output_low=f.lost_output_tokens_per_s_low,
            lost_output_high=f.lost_output_tokens_per_s_high,
            lost_requests_per_s=f.lost_requests_per_s,
        )
        appendix.append(row)
        if r is None or r.action in NO_ACTION:
            considered.append(row)
        else:
            actions.append(row)
    numbered = [replace(a, rank=i + 1) for i, a in enumerate(actions)]
    ranks = {(a.kind, a.subject): a.rank for a in numbered}
    return numbered, considered, [replace(a, rank=ranks.get((a.kind, a.subject), 0)) for a in appendix]


def pool_rows(pools: Sequence[PoolSummary]) -> list[PoolRow]:
    """The report's pool rows from the summary's pools."""
    return [
        PoolRow(
            pool=p.pool,
            model=p.model,
            precision=p.precision,
            serving=p.serving,
            gpus=p.gpus,
            workers_by_sku_role=p.workers_by_sku_role,
            mean_prompt_tokens=p.traffic.mean_prompt_tokens,
            mean_output_tokens=p.traffic.mean_output_tokens,
            requests_per_s=p.traffic.requests_per_s,
            bound=p.bound,
            utilisation=p.utilisation,
            ratio_now=p.prefill_decode_now,
            ratio_recommended=p.prefill_decode_recommended,
            per_sku=dict(p.recommended or {}),
            ratio_drift=p.ratio_drift,
            lost_tokens_per_s=p.lost.tokens_per_s.value,
            checks=list(p.checks),
            notes=list(p.notes),
            lost_output_tokens_per_s=p.lost.output_tokens_per_s.value,
            lost_requests_per_s=p.lost.requests_per_s.value,
            demand_limited=p.demand_limited,
            targets=p.targets,
            loss_basis=p.loss_basis,
        )
        for p in pools
    ]


def _lost_figures(s: SegmentSummary, output: bool) -> tuple[float | None, float | None, float | None]:
    """The segment's lost output tokens/s (else total tokens/s, secondary) and its range."""
    loss = s.lost.output_tokens_per_s if output else s.lost.tokens_per_s
    return loss.value, loss.low, loss.high


def hourly_lost(summary: Summary, end: float, shift: timedelta = timedelta(0)) -> list[HourlyLost]:
    """Lost output tokens/s per hour (all pools), from the run's segments; total (prompt + output) tokens/s
    only where no segment estimated output tokens. ``shift`` moves last week onto this one."""
    segments = [s for pool in summary.pools for s in pool.segments]
    output = any(s.lost.output_tokens_per_s.value is not None for s in segments)
    hours: dict[datetime, list[float]] = {}
    for s in segments:
        t, stop = _parse(s.start), min(_parse(s.end), datetime.fromtimestamp(end, tz=UTC))
        while t < stop:
            slot = hours.setdefault(t + shift, [0.0, 0.0, 0.0])
            for i, value in enumerate(_lost_figures(s, output)):
                slot[i] += float(value or 0.0)
            t += timedelta(hours=1)
    return [HourlyLost(ts, lost, low, high, output) for ts, (lost, low, high) in sorted(hours.items())]


def _ratio(counts: dict[str, dict[str, int]] | None) -> float | None:
    if not counts:
        return None
    prefill = sum(r.get("prefill", 0) for r in counts.values())
    decode = sum(r.get("decode", 0) for r in counts.values())
    return prefill / decode if decode else None


def ratio_points(summary: Summary) -> list[RatioPoint]:
    return [
        RatioPoint(
            p.pool, _parse(s.start), _parse(s.end), _ratio(s.current_placement), _ratio(s.best_placement)
        )
        for p in summary.pools
        for s in p.segments
        if s.utilisation is not None
    ]


def verdict(figures: WeekFigures, actions: Sequence[Action]) -> str:
    """One sentence from the week's top action and the demand- or supply-limited state."""
    if not actions:
        if figures.unjudged_workers:
            reasons = "; ".join(f"{reason} ({n})" for reason, n in figures.unjudged_reasons.items())
            judged = figures.judged_workers if figures.judged_workers is not None else "the"
            return (
                f"No misplaced worker among {judged} judged worker(s); {figures.unjudged_workers} could not "
                f"be judged: {reasons}."
            )
        return "No worker was misplaced this week: every pool ran the split its traffic needed."
    top = actions[0]
    total = top.expected_gain_tokens_per_s or top.lost_tokens_per_s
    if top.lost_output_tokens_per_s is not None:
        requests = (
            f" and {requests_rate(top.lost_requests_per_s)}" if top.lost_requests_per_s is not None else ""
        )
        gain = (
            f"≈ {output_rate(top.lost_output_tokens_per_s)} "
            f"({output_range(top.lost_output_low, top.lost_output_high)}){requests}; secondary, total "
            f"prompt + output: {tokens_rate(total)}"
        )
    else:
        gain = (
            f"output tokens/s unknown; secondary, total prompt + output: {tokens_rate(total)}"
            if total is not None
            else "its loss not estimated"
        )
    first = (
        f"{figures.misplaced_workers} misplaced worker(s) and {len(actions)} recommended action(s); "
        f"the largest: {top.action} for {top.subject} ({top.kind}), {gain}."
    )
    if figures.demand_limited:
        return first + (
            " The fleet was demand-limited, so no request went unserved: the loss is capacity (GPUs "
            "busy for less work) and its cost, not undelivered tokens."
        )
    return first + " The fleet was supply-limited at times: that capacity was tokens users did not get."
