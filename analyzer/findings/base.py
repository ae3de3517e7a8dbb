"""What every finding detector shares: its inputs, computed checks, the latest run of a condition."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from analyzer.pools.analysis import PoolAnalysis
from analyzer.telemetry.bottleneck import BottleneckGrid
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import Role


@dataclass(frozen=True)
class WorkerContext:
    """What a worker-level finding names besides the worker: its pool, SKU and role."""

    pool: str
    sku: str
    role: Role


@dataclass(frozen=True)
class FindingInputs:
    """Everything a detector reads: the pools' analyses, the telemetry grid and its bottleneck verdicts."""

    analyses: Sequence[PoolAnalysis]
    grid: WorkerGrid
    bottlenecks: BottleneckGrid
    context: Mapping[int, WorkerContext]  # grid row -> the worker's pool, SKU and role


@dataclass(frozen=True)
class Check:
    """A rule of thumb computed for one pool segment, with its value and threshold; never a verdict written
    in advance."""

    name: str
    value: float | None
    threshold: float | None
    passed: bool | None  # None when it could not be computed
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.name,
            "value": self.value,
            "threshold": self.threshold,
            "passed": self.passed,
            "detail": self.detail,
        }


def utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def latest_run(flags: Sequence[bool] | npt.NDArray[np.bool_]) -> tuple[int, int] | None:
    """[first, last) of the last run of true flags; None when none is."""
    marks = np.asarray(flags, dtype=bool)
    hits = np.flatnonzero(marks)
    if not hits.size:
        return None
    last = int(hits[-1]) + 1
    breaks = np.flatnonzero(~marks[:last])
    return (int(breaks[-1]) + 1 if breaks.size else 0), last


def nanmedian(values: npt.NDArray[np.float64]) -> float | None:
    kept = values[np.isfinite(values)]
    return float(np.median(kept)) if kept.size else None
