"""The analyzer's stored runs (``analysis_runs``, :mod:`fleet.store.analysis`) as the dashboard reads them.

A run's summary is the pipeline's (:func:`analyzer.pipeline.build_summary`): fleet totals, one entry per
pool with its segments (each a stretch of one traffic mix and one set of workers, with its lost tokens/s),
drift events and recommended ratios, and one entry per worker. Lost tokens over time are read from the
segments of the runs overlapping the range, newest run first (a later run's view of an hour wins), so the
Fleet page and the weekly report read one computation. Runs are read newest first and only until the
range is covered, so a store with thousands of runs costs a handful of summaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from dashboard.views import AnalysisView, LostPoint, Scope
from fleet.store.schema import AnalysisRunRow

HOUR_S = 3600.0
_BATCH = 8
_MAX_RUNS = 200
_LOST_KEYS = ("lost_tokens_per_s", "lost_tokens_per_s_low", "lost_tokens_per_s_high")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _runs_newest_first(connection: Connection, since: datetime, until: datetime) -> Iterator[AnalysisView]:
    """Runs whose range overlaps [since, until), newest first, read a few at a time."""
    offset = 0
    while offset < _MAX_RUNS:
        rows = connection.execute(
            select(
                AnalysisRunRow.created_at,
                AnalysisRunRow.from_ts,
                AnalysisRunRow.to_ts,
                AnalysisRunRow.summary,
            )
            .where(AnalysisRunRow.to_ts > since, AnalysisRunRow.from_ts < until)
            .order_by(AnalysisRunRow.created_at.desc(), AnalysisRunRow.id.desc())
            .offset(offset)
            .limit(_BATCH)
        ).all()
        for created_at, from_ts, to_ts, summary in rows:
            yield AnalysisView(created_at=created_at, since=from_ts, until=to_ts, summary=dict(summary or {}))
        if len(rows) < _BATCH:
            return
        offset += _BATCH


def latest(connection: Connection, since: datetime, until: datetime) -> AnalysisView | None:
    """The newest stored run whose range overlaps [since, until), or None."""
    return next(_runs_newest_first(connection, since, until), None)


def lost_series(connection: Connection, scope: Scope) -> list[LostPoint] | None:
    """Hourly lost tokens/s from run segments, summed over the pools in scope; None without any run."""
    first = math.floor(scope.since.timestamp() / HOUR_S) * HOUR_S
    count = max(0, math.ceil((scope.until.timestamp() - first) / HOUR_S))
    hours: list[list[float] | None] = [None] * count
    taken = [False] * count
    seen_run = False
    for view in _runs_newest_first(connection, scope.since, scope.until):
        seen_run = True
        claimed = _segment_hours(view, scope, first, count)
        for i, values in claimed.items():
            if not taken[i]:
                hours[i] = values
        for i in claimed:
            taken[i] = True
        if all(taken):
            break
    if not seen_run:
        return None
    points = []
    for i, slot in enumerate(hours):
        ts = datetime.fromtimestamp(first + i * HOUR_S, tz=UTC)
        points.append(LostPoint(ts, *slot) if slot is not None else LostPoint(ts, None, None, None))
    return points


def _segment_hours(view: AnalysisView, scope: Scope, first: float, count: int) -> dict[int, list[float]]:
    """Hour index -> (lost, low, high) summed over the in-scope pools' segments of one run."""
    out: dict[int, list[float]] = {}
    for pool in view.pools:
        if not scope.pool_matches(pool.get("pool")):
            continue
        for segment in pool.get("segments", []):
            start, end = _parse(segment["start"]).timestamp(), _parse(segment["end"]).timestamp()
            lo = max(0, math.floor((start - first) / HOUR_S))
            hi = min(count, math.ceil((end - first) / HOUR_S))
            for i in range(lo, hi):
                slot = out.setdefault(i, [0.0, 0.0, 0.0])
                for j, key in enumerate(_LOST_KEYS):
                    slot[j] += float(_number(segment.get(key)))
    return out


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
