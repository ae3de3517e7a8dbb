"""Analyzer runs: the range each run read and its summary, so the service's /metrics, the dashboard and
the report can show the latest conclusions without re-running the analysis.

The summary is stored as the analyzer wrote it (JSON). Readers get it through the tolerant views of
:mod:`fleet.store.stored_summary` (a field a run lacks, or holds as something else, reads as unknown).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from fleet.store.schema import AnalysisRunRow, table_of
from fleet.store.stored_summary import StoredSummary

_RUNS = table_of(AnalysisRunRow)


@dataclass(frozen=True)
class AnalysisRun:
    id: int
    created_at: datetime
    from_ts: datetime
    to_ts: datetime
    summary: StoredSummary  # read tolerantly: a run may be of an older summary version, or partial


def put_analysis(
    connection: Connection,
    *,
    created_at: datetime,
    from_ts: datetime,
    to_ts: datetime,
    summary: dict[str, Any],
) -> int:
    """Store one run; returns its id. Runs are kept (a history), never overwritten."""
    result = connection.execute(
        insert(_RUNS)
        .values(created_at=created_at, from_ts=from_ts, to_ts=to_ts, summary=summary)
        .returning(_RUNS.c.id)
    )
    return int(result.scalar_one())


def _typed(row: Any) -> AnalysisRun:
    return AnalysisRun(row.id, row.created_at, row.from_ts, row.to_ts, StoredSummary.read(row.summary))


def latest_analysis(connection: Connection) -> AnalysisRun | None:
    """The newest run, or None when the analyzer never ran against this store."""
    row = connection.execute(
        select(_RUNS).order_by(_RUNS.c.created_at.desc(), _RUNS.c.id.desc()).limit(1)
    ).one_or_none()
    return None if row is None else _typed(row)


latest_analysis_run = latest_analysis


def list_analysis_runs(
    connection: Connection, *, since: datetime | None = None, until: datetime | None = None, limit: int = 1000
) -> list[AnalysisRun]:
    """Runs whose analysed range overlaps [since, until), oldest first."""
    query = select(_RUNS)
    if since is not None:
        query = query.where(_RUNS.c.to_ts > since)
    if until is not None:
        query = query.where(_RUNS.c.from_ts < until)
    rows = connection.execute(query.order_by(_RUNS.c.created_at, _RUNS.c.id).limit(limit))
    return [_typed(row) for row in rows]
