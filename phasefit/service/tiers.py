"""Which rollup tier serves which part of a bucketed read of ``/v1/workers/{id}/samples``.

Per-minute rollups are kept ``PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS`` and hourly ones
``PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS`` (:mod:`fleet.store.rollup_retention`). A read that wants per-minute
buckets over a range reaching back before the per-minute horizon reads the hourly rollups for that part
(points there are an hour apart, whatever the step) and says so in ``notices``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from fleet.store.queries import Columns, Resolution, engine_rollups, gpu_rollups
from fleet.store.rollup_retention import RollupRetention, rollup_cutoffs


@dataclass
class TieredRead:
    """Rollup columns of one worker over a range, oldest first, and what the reader should be told."""

    engine: Columns
    gpus: Columns
    resolutions: list[Resolution] = field(default_factory=list)  # the tiers that returned rows
    notices: list[str] = field(default_factory=list)


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def read_tiers(
    connection: Connection,
    resolution: Resolution,
    start: datetime,
    end: datetime,
    worker_id: str,
    *,
    now: datetime,
    retention: RollupRetention,
) -> TieredRead:
    """The worker's rollups of ``resolution`` over [start, end); per-minute ones only from the per-minute
    horizon on, hourly ones before it."""
    cutoffs = rollup_cutoffs(now, retention)
    minute_from = cutoffs["1m"]
    if minute_from is None:  # RollupRetention always bounds the per-minute tier
        raise ValueError("the per-minute rollup tier has no retention cutoff")
    pieces: list[tuple[Resolution, datetime, datetime]] = [(resolution, start, end)]
    if resolution == "1m" and start < minute_from:
        # The hourly part starts at the hour holding ``start``: its bucket covers ``start``'s minutes.
        hour = start.replace(minute=0, second=0, microsecond=0)
        pieces = [("1h", hour, min(end, minute_from)), ("1m", max(start, minute_from), end)]
    read = TieredRead({}, {})
    for tier, since, until in pieces:
        if since >= until:
            continue
        engine = engine_rollups(connection, tier, since, until, worker_ids=[worker_id])
        gpus = gpu_rollups(connection, tier, since, until, worker_ids=[worker_id])
        if engine["ts"] or gpus["ts"]:
            read.resolutions.append(tier)
        _extend(read.engine, engine)
        _extend(read.gpus, gpus)
    if resolution == "1m" and "1h" in read.resolutions:
        read.notices.append(
            f"per-minute rollups kept {retention.minute_days} days: before {_when(minute_from)} shown from "
            "hourly rollups (one point per hour)"
        )
    hour_from = cutoffs["1h"]
    if hour_from is not None and start < hour_from:
        read.notices.append(
            f"hourly rollups kept {retention.hour_days} days: nothing is kept before {_when(hour_from)}"
        )
    return read


def _extend(into: Columns, more: Columns) -> None:
    for name, values in more.items():
        into.setdefault(name, []).extend(values)
