"""``GET /v1/reports`` (weekly placement audits, newest first) and ``GET /v1/reports/{week}``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request

from fleet.store.reports import ReportInfo as StoredReportInfo
from fleet.store.reports import check_week, get_report, list_reports
from phasefit.service.deps import StateDep
from phasefit.service.models import Report, ReportInfo, ReportPage
from phasefit.service.routers.common import (
    READ_RESPONSES,
    Limit,
    Offset,
    next_link,
    page_limit,
    read_store,
)

router = APIRouter(tags=["reports"])
# Years 0001-9999 and weeks 01-53, as the document can say; a week 53 the year does not have is 404.
WEEK_PATTERN = r"^(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-W(?:0[1-9]|[1-4][0-9]|5[0-3])$"
Week = Annotated[
    str,
    Path(
        pattern=WEEK_PATTERN,
        description="ISO week, e.g. 2026-W48 (404 for week 53 of a year that has 52).",
    ),
]


def _info(request: Request, info: StoredReportInfo) -> dict[str, object]:
    return {
        "week": info.week,
        "format": info.format,
        "created_at": info.created_at,
        "summary": info.summary,
        "url": str(request.url_for("report", week=info.week)),
    }


@router.get(
    "/v1/reports", response_model=ReportPage, responses=READ_RESPONSES, summary="Weekly audit reports"
)
async def reports(request: Request, state: StateDep, limit: Limit = 52, offset: Offset = 0) -> ReportPage:
    """Reports without their bodies, newest week first."""
    limit = page_limit(state, limit)
    found = await read_store(state, lambda c: list_reports(c, limit=limit + 1, offset=offset))
    return ReportPage(
        items=[ReportInfo.model_validate(_info(request, r)) for r in found[:limit]],
        limit=limit,
        offset=offset,
        next=next_link(request, offset=offset, limit=limit, more=len(found) > limit),
    )


@router.get(
    "/v1/reports/{week}",
    name="report",
    response_model=Report,
    responses={
        **READ_RESPONSES,
        404: {
            "model": READ_RESPONSES[503]["model"],
            "description": "No report that week (or no such week: week 53 of a year that has 52).",
        },
    },
    summary="One week's audit report",
)
async def report(request: Request, state: StateDep, week: Week) -> Report:
    try:
        check_week(week)
    except ValueError as exc:  # the pattern admits only week 53 of a 52-week year here: no such report
        raise HTTPException(404, f"no report for {week}: {exc}") from None
    found = await read_store(state, lambda c: get_report(c, week))
    if found is None:
        raise HTTPException(404, f"no report for {week}")
    return Report.model_validate({**_info(request, found), "body": found.body})
