"""Rollup tiers with their own retention (``phasefit db prune``, after raw samples are expired).

Per-minute rollups (``*_1m``) are kept ``PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS`` (default 35), hourly ones
(``*_1h``) ``PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS`` (default 400; 0 keeps them forever). A tier's cutoff is
``now - days`` rounded down to the hour, and never later than the cutoff of the finer tier it outlives (raw
samples for the per-minute tier, per-minute rollups for the hourly one), so a coarser tier always covers
what a finer one lost.

Rows go in bounded batches: each batch is one short transaction deleting at most ``batch_rows`` rows by
primary key (``(key, bucket) IN (SELECT ... WHERE bucket < cutoff LIMIT n)``, an index range scan), so no
lock is held for longer than a batch and ingest and readers interleave. Same tables and logic on SQLite
and PostgreSQL (rollups are not partitioned).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Table, delete, select, tuple_

from fleet.settings import check_tiers
from fleet.store.engine import writing
from fleet.store.schema import (
    EngineSample1hRow,
    EngineSample1mRow,
    GpuSample1hRow,
    GpuSample1mRow,
    table_of,
)

DEFAULT_BATCH_ROWS = 10_000
TIERS: dict[str, tuple[Table, ...]] = {
    "1m": (table_of(GpuSample1mRow), table_of(EngineSample1mRow)),
    "1h": (table_of(GpuSample1hRow), table_of(EngineSample1hRow)),
}


@dataclass(frozen=True)
class RollupRetention:
    """Days each rollup tier is kept; ``hour_days`` 0 keeps hourly rollups forever."""

    minute_days: int = 35
    hour_days: int = 400

    def __post_init__(self) -> None:
        if self.minute_days < 1:
            raise ValueError(f"per-minute rollup retention must be at least 1 day, not {self.minute_days}")
        if self.hour_days < 0:
            raise ValueError(
                f"hourly rollup retention must be 0 (forever) or more days, not {self.hour_days}"
            )
        check_tiers(1, self.minute_days, self.hour_days)


@dataclass(frozen=True)
class RollupExpiry:
    """What one expiry did: the cutoff of each tier (None: kept forever) and rows deleted per table."""

    cutoffs: dict[str, datetime | None]
    deleted: dict[str, int]
    batches: int

    def per_tier(self) -> dict[str, int]:
        return {tier: sum(self.deleted.get(t.name, 0) for t in tables) for tier, tables in TIERS.items()}


def _floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def rollup_cutoffs(
    now: datetime, retention: RollupRetention, raw_cutoff: datetime | None = None
) -> dict[str, datetime | None]:
    """Where each tier starts after an expiry at ``now``: a tier never goes past the finer one's cutoff."""
    minute = _floor_hour(now - timedelta(days=retention.minute_days))
    if raw_cutoff is not None:
        minute = min(minute, raw_cutoff)
    hour = None
    if retention.hour_days:
        hour = min(_floor_hour(now - timedelta(days=retention.hour_days)), minute)
    return {"1m": minute, "1h": hour}


def expire_rollups(
    engine: Engine,
    *,
    now: datetime,
    retention: RollupRetention,
    raw_cutoff: datetime | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> RollupExpiry:
    """Delete the rollup rows of each tier before its cutoff, ``batch_rows`` at a time, one transaction
    per batch (module docstring)."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    cutoffs = rollup_cutoffs(now, retention, raw_cutoff)
    deleted: dict[str, int] = {}
    batches = 0
    for tier, tables in TIERS.items():
        cutoff = cutoffs[tier]
        for target in tables:
            deleted[target.name] = 0
            while cutoff is not None:
                gone = _delete_batch(engine, target, cutoff, batch_rows)
                batches += 1
                deleted[target.name] += gone
                if gone < batch_rows:
                    break
    return RollupExpiry(cutoffs, deleted, batches)


def _delete_batch(engine: Engine, target: Table, cutoff: datetime, batch_rows: int) -> int:
    """One batch: at most ``batch_rows`` rows of ``target`` before ``cutoff``, in its own transaction."""
    key = tuple_(*target.primary_key.columns)
    chosen = select(*target.primary_key.columns).where(target.c.bucket < cutoff).limit(batch_rows)
    with writing(engine) as connection:
        return int(connection.execute(delete(target).where(key.in_(chosen))).rowcount)
