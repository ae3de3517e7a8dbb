"""Analyzer runs: the range each run read and its summary, so the service's /metrics, the dashboard and
the report can show the latest conclusions without re-running the analysis.

The summary is stored as the analyzer wrote it (JSON). Readers get a typed view of the fields they rely
on (per pool: lost tokens, capacity, prefill:decode ratio now and recommended, drift; fleet totals) with
every other field kept as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, insert, select

from fleet.store.schema import AnalysisRunRow, table_of


class PoolSummary(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    pool: str
    lost_tokens_per_s: float | None = None
    capacity_tokens_per_s: float | None = None
    prefill_decode_ratio: float | None = None
    recommended_prefill_decode_ratio: float | None = None
    ratio_drift: bool = False


class AnalysisSummary(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    run_at: datetime
    pools: list[PoolSummary] = []
    fleet_lost_tokens_per_s: float | None = None
    fleet_lost_tokens_per_s_low: float | None = None
    fleet_lost_tokens_per_s_high: float | None = None
    fleet_lost_output_tokens_per_s: float | None = None
    fleet_lost_requests_per_s: float | None = None


_RUNS = table_of(AnalysisRunRow)


@dataclass(frozen=True)
class AnalysisRun:
    id: int
    created_at: datetime
    from_ts: datetime
    to_ts: datetime
    summary: AnalysisSummary


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
    raw = dict(row.summary)
    fleet_value = raw.get("fleet")
    fleet: dict[str, Any] = fleet_value if isinstance(fleet_value, dict) else {}
    view = AnalysisSummary.model_validate(
        {
            **raw,
            "run_at": row.created_at,
            "fleet_lost_tokens_per_s": fleet.get("lost_tokens_per_s"),
            "fleet_lost_tokens_per_s_low": fleet.get("lost_tokens_per_s_low"),
            "fleet_lost_tokens_per_s_high": fleet.get("lost_tokens_per_s_high"),
            "fleet_lost_output_tokens_per_s": fleet.get("lost_output_tokens_per_s"),
            "fleet_lost_requests_per_s": fleet.get("lost_requests_per_s"),
        }
    )
    return AnalysisRun(row.id, row.created_at, row.from_ts, row.to_ts, view)


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
