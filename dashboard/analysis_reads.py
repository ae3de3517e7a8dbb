"""The analyzer's stored runs (``analysis_runs``, :mod:`fleet.store.analysis`) as the dashboard reads them.

A run's summary (:class:`analyzer.results.summary.Summary` as stored, of any version) is read through the
tolerant views of :mod:`fleet.store.stored_summary`. Lost tokens over time are read from the segments of the
runs overlapping the range, newest run first (a later run's view of an hour wins), so the Fleet page and
the weekly report read one computation; an hour whose segments do not know their loss is unknown, never 0.
Runs are read newest first and only until the range is covered, so a store with thousands of runs costs a
handful of summaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

from sqlalchemy import Connection, select

from dashboard.views import AnalysisView, LostPoint, Scope
from fleet.store.schema import AnalysisRunRow
from fleet.store.stored_summary import StoredSegment, StoredSummary

HOUR_S = 3600.0
_BATCH = 8
_MAX_RUNS = 200
Slot = list[float | None]  # lost, low, high tokens/s (total, secondary); lost output tokens/s


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
            yield AnalysisView(created_at, from_ts, to_ts, StoredSummary.read(summary))
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
    hours: list[Slot | None] = [None] * count
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
        points.append(LostPoint(ts, *(slot or (None, None, None, None))))
    return points


def _segment_hours(view: AnalysisView, scope: Scope, first: float, count: int) -> dict[int, Slot]:
    """Hour index -> (lost, low, high, lost output) summed over the in-scope pools' segments of one run; a
    figure no segment of the hour knows stays unknown."""
    out: dict[int, Slot] = {}
    for pool in view.pools:
        if not scope.pool_matches(pool.pool):
            continue
        for segment in pool.segments:
            if segment.start is None or segment.end is None:  # a stretch that cannot be placed in time
                continue
            lo = max(0, math.floor((segment.start.timestamp() - first) / HOUR_S))
            hi = min(count, math.ceil((segment.end.timestamp() - first) / HOUR_S))
            for i in range(lo, hi):
                slot = out.setdefault(i, [None, None, None, None])
                for j, value in enumerate(_lost(segment)):
                    known = slot[j]
                    if value is not None:
                        slot[j] = value if known is None else known + value
    return out


def _lost(segment: StoredSegment) -> tuple[float | None, float | None, float | None, float | None]:
    loss = segment.lost.tokens_per_s
    return loss.value, loss.low, loss.high, segment.lost.output_tokens_per_s.value
