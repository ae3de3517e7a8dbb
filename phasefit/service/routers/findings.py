"""``GET /v1/findings`` (the analyzer's conclusions, paginated) and ``GET /v1/lost-tokens`` (over time)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import Connection

from fleet.contract import FindingKind, FindingStatus
from fleet.store.analysis import list_analysis_runs
from fleet.store.findings import StoredFinding, list_findings
from fleet.store.stored_summary import StoredFleet, StoredSummary
from phasefit.service.deps import StateDep
from phasefit.service.models import FindingOut, FindingPage, LostTokensPoint, LostTokensSeries
from phasefit.service.routers.common import (
    READ_RESPONSES,
    From,
    Limit,
    Offset,
    Step,
    To,
    invalid,
    next_link,
    page_limit,
    read_store,
    text_query,
    time_range,
)
from phasefit.service.series import Episode, RunTotals, lost_from_episodes, lost_from_runs, parse_step

router = APIRouter(tags=["findings"])
MAX_EPISODES = 100_000


# Lost capacity in the units an SRE acts on (None: not a throughput loss); passed on where the response
# model declares them (phasefit.service.models.FindingOut).
_LOST_UNITS = tuple(
    f"lost_{unit}_per_s{bound}" for unit in ("output_tokens", "requests") for bound in ("", "_low", "_high")
)


def finding_out(stored: StoredFinding) -> FindingOut:
    f = stored.finding
    units = {name: getattr(f, name) for name in _LOST_UNITS if name in FindingOut.model_fields}
    return FindingOut(
        **units,
        id=stored.id, kind=f.kind.value, status=f.status.value, severity=f.severity.value,
        worker_id=f.worker_id, pool=f.pool, gpu_sku=f.gpu_sku, role=f.role.value,
        bottleneck=f.bottleneck.value, evidence=dict(f.evidence), tokens_per_s=f.tokens_per_s,
        lost_tokens_per_s=f.lost_tokens_per_s, lost_tokens_per_s_low=f.lost_tokens_per_s_low,
        lost_tokens_per_s_high=f.lost_tokens_per_s_high, recommendation=f.recommendation,
        first_seen=f.first_seen, last_seen=f.last_seen, resolved_at=stored.resolved_at,
        updated_at=stored.updated_at,
    )  # fmt: skip


@router.get("/v1/findings", response_model=FindingPage, responses=READ_RESPONSES, summary="Analyzer findings")
async def findings(
    *,
    request: Request,
    state: StateDep,
    status: Annotated[FindingStatus | None, Query(description="open or resolved.")] = None,
    kind: Annotated[FindingKind | None, Query(description="A finding kind.")] = None,
    worker: Annotated[str | None, text_query(253, "Only this worker's findings.")] = None,
    pool: Annotated[str | None, text_query(253, "Only this pool's findings.")] = None,
    start: From = None,
    end: To = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> FindingPage:
    """Findings, latest ``last_seen`` first; ``from``/``to`` keep episodes overlapping [from, to).

    A rule between parameters, which JSON Schema cannot state: 'from' must be before 'to' when both are given
    (422 naming 'from')."""
    limit = page_limit(state, limit)
    if start is not None and end is not None and start >= end:
        raise invalid("from", "'from' must be before 'to'", start.isoformat())
    found = await read_store(
        state,
        lambda c: list_findings(
            c,
            status=status,
            kind=kind,
            worker_id=worker,
            pool=pool,
            since=start,
            until=end,
            limit=limit + 1,
            offset=offset,
        ),
    )
    return FindingPage(
        items=[finding_out(f) for f in found[:limit]],
        limit=limit,
        offset=offset,
        next=next_link(request, offset=offset, limit=limit, more=len(found) > limit),
    )


@router.get(
    "/v1/lost-tokens",
    response_model=LostTokensSeries,
    response_model_by_alias=True,
    responses=READ_RESPONSES,
    summary="Tokens per second lost to placement, over time",
)
async def lost_tokens(
    state: StateDep, start: From = None, end: To = None, step: Step = None
) -> LostTokensSeries:
    """The analyzer runs' fleet totals per bucket (mean over the runs whose analysed window ends in it); when
    the range holds no run, the sum over findings (per worker or pool, the largest loss of its episodes
    overlapping the bucket).

    Rules between parameters, which JSON Schema cannot state: 'from' must be before 'to' ('to' defaults to
    now, 'from' to 24 h before 'to'; 422 naming 'from'); the (to - from) / step buckets requested must not
    exceed PHASEFIT_MAX_POINTS (10,000 by default; 422 naming 'step')."""
    begin, finish = time_range(state, start, end, timedelta(hours=24))
    span = (finish - begin).total_seconds()
    try:
        step_s = parse_step(step) if step is not None else max(60.0, span / 200)
    except ValueError as exc:
        raise invalid("step", str(exc), step) from None
    if span / step_s > state.settings.max_points:
        raise invalid(
            "step", f"{span / step_s:.0f} buckets requested; at most {state.settings.max_points}", step
        )
    t0, t1 = begin.timestamp(), finish.timestamp()

    def load(connection: Connection) -> LostTokensSeries:
        runs = list_analysis_runs(connection, since=begin, until=finish)
        if runs:
            totals = [_totals(run.to_ts, run.summary) for run in runs]
            points = lost_from_runs(totals, t0, t1, step_s)
            source = "analysis-runs"
        else:
            stored = list_findings(connection, since=begin, until=finish, limit=MAX_EPISODES)
            # A finding that estimates no loss (null total) is no episode of loss: left out, never a 0.
            episodes = [
                _episode(s, lost)
                for s in stored
                if (lost := s.finding.lost_tokens_per_s) is not None and lost > 0
            ]
            points = lost_from_episodes(episodes, t0, t1, step_s)
            source = "findings"
        return LostTokensSeries.model_validate({
            "from": begin, "to": finish, "step_s": step_s, "source": source,
            "points": [LostTokensPoint.model_validate(p) for p in points],
        })  # fmt: skip

    return await read_store(state, load)


def _episode(stored: StoredFinding, lost: float) -> Episode:
    """The span of a finding that states a loss (``lost``: its total tokens/s, known)."""
    f = stored.finding
    end = stored.resolved_at or f.last_seen
    subject = f"worker:{f.worker_id}" if f.worker_id else f"pool:{f.pool}" if f.pool else "fleet"
    return Episode(
        subject=subject, pool=f.pool, start=f.first_seen.timestamp(), end=end.timestamp(),
        lost=lost, low=f.lost_tokens_per_s_low, high=f.lost_tokens_per_s_high,
        output=f.lost_output_tokens_per_s, requests=f.lost_requests_per_s,
    )  # fmt: skip


def _totals(at: datetime, summary: StoredSummary) -> RunTotals:
    lost = (summary.fleet or StoredFleet()).lost
    return RunTotals(
        at=at.timestamp(),
        lost=lost.tokens_per_s.value,
        low=lost.tokens_per_s.low,
        high=lost.tokens_per_s.high,
        output=lost.output_tokens_per_s.value,
        requests=lost.requests_per_s.value,
        pools={
            p.pool: p.lost.tokens_per_s.value
            for p in summary.pools
            if p.pool and p.lost.tokens_per_s.value is not None
        },
    )
