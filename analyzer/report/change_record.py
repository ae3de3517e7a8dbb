"""The changes of a split a weekly report covers, and the model's running record over every change scored
so far (this report's and the stored reports')."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analyzer.results.changes import ChangeOutcome
from analyzer.results.summary import Summary

SCORED_KEY = "changes_scored"  # in a stored report's summary: [{pool, at, verdict, realized_to_predicted}]


@dataclass(frozen=True)
class PoolChange:
    pool: str
    change: ChangeOutcome


@dataclass(frozen=True)
class Accuracy:
    """The model's record: changes scored, and the median of |realized / predicted - 1| over them."""

    scored: int
    median_error: float | None


def changes_since(summary: Summary, since: datetime) -> list[PoolChange]:
    """The changes of every pool that took effect (or stood) from ``since`` on, oldest first."""
    out = [
        PoolChange(pool.pool, change)
        for pool in summary.pools
        for change in pool.changes
        if datetime.fromisoformat(change.at) >= since
    ]
    return sorted(out, key=lambda c: (c.change.at, c.pool))


def scored_records(changes: Iterable[PoolChange]) -> list[dict[str, Any]]:
    """What a report stores of its scored changes, so later reports can keep the running record."""
    return [
        {
            "pool": c.pool,
            "at": c.change.at,
            "verdict": c.change.verdict,
            "realized_to_predicted": c.change.realized_to_predicted,
        }
        for c in changes
        if c.change.realized_to_predicted is not None
    ]


def running_accuracy(current: Sequence[PoolChange], stored: Iterable[Mapping[str, Any]]) -> Accuracy:
    """Over this report's scored changes and every stored report's, each change (pool, time) once."""
    ratios: dict[tuple[str, str], float] = {}
    for summary in stored:
        for record in summary.get(SCORED_KEY) or []:
            ratio = record.get("realized_to_predicted")
            if isinstance(ratio, int | float):
                ratios[(str(record.get("pool")), str(record.get("at")))] = float(ratio)
    for record in scored_records(current):
        ratios[(record["pool"], record["at"])] = float(record["realized_to_predicted"])
    errors = [abs(r - 1.0) for r in ratios.values()]
    return Accuracy(len(errors), statistics.median(errors) if errors else None)
