"""Weekly placement audit reports, one per ISO week (``2026-W48``); storing a week again replaces it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite

from fleet.store.engine import is_sqlite
from fleet.store.schema import ReportRow, table_of

_WEEK = re.compile(r"(\d{4})-W(\d{2})")


def iso_week(moment: datetime) -> str:
    """The ISO week a moment falls in, e.g. ``2026-W48``."""
    year, week, _ = moment.isocalendar()
    return f"{year:04d}-W{week:02d}"


def check_week(week: str) -> str:
    """Return ``week`` if it names a real ISO week (``2026-W53`` does not exist), else raise ValueError."""
    match = _WEEK.fullmatch(week)
    if match is None:
        raise ValueError(f"{week!r} is not an ISO week such as 2026-W48")
    if not 2000 <= int(match[1]) <= 2099:  # the years the data contract accepts: no sample lies outside them
        raise ValueError(f"{week!r} is outside the years 2000-2099 that phasefit stores")
    try:
        datetime.fromisocalendar(int(match[1]), int(match[2]), 1)
    except ValueError as exc:
        raise ValueError(f"{week!r} is not an ISO week: {exc}") from None
    return week


@dataclass(frozen=True)
class ReportInfo:
    week: str
    format: str
    created_at: datetime
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report(ReportInfo):
    body: str = ""


def put_report(connection: Connection, report: Report) -> None:
    """Store (or replace) the report of ``report.week``."""
    table = table_of(ReportRow)
    statement = sqlite.insert(table) if is_sqlite(connection) else postgresql.insert(table)
    statement = statement.values(
        week=check_week(report.week),
        format=report.format,
        body=report.body,
        summary=report.summary,
        created_at=report.created_at,
    )
    new = statement.excluded
    connection.execute(
        statement.on_conflict_do_update(
            index_elements=["week"],
            set_={
                "format": new.format,
                "body": new.body,
                "summary": new.summary,
                "created_at": new.created_at,
            },
        )
    )


def get_report(connection: Connection, week: str) -> Report | None:
    row = connection.execute(select(ReportRow).where(ReportRow.week == check_week(week))).mappings().first()
    if row is None:
        return None
    return Report(row["week"], row["format"], row["created_at"], row["summary"], row["body"])


def list_reports(connection: Connection, *, limit: int | None = 52, offset: int = 0) -> list[ReportInfo]:
    """Reports without their bodies, newest week first."""
    statement = (
        select(ReportRow.week, ReportRow.format, ReportRow.created_at, ReportRow.summary)
        .order_by(ReportRow.week.desc())
        .offset(offset)
        .limit(limit)
    )
    return [
        ReportInfo(row.week, row.format, row.created_at, row.summary) for row in connection.execute(statement)
    ]
