"""Prometheus range-query matrices on one time grid: parsing the JSON, placing points on grid columns, and
merging the series that feed one frame column (alias preference, sums or means).

Each column stands for the window of ``step`` seconds that ends there. Reasoning: docs/analyzer.md#series
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.sources.prometheus.metrics import MetricQuery, Reduce
from analyzer.telemetry.frames import FloatArray, IntArray
from fleet.vocabulary.units import Unit

MIB = 1024 * 1024


class PrometheusPayloadError(ValueError):
    """A query_range answer that is not a Prometheus matrix."""


@dataclass(frozen=True)
class RangeSeries:
    """One series of a query_range matrix: its labels and its points (epoch seconds, float values)."""

    labels: Mapping[str, str]
    ts: FloatArray
    values: FloatArray


def parse_matrix(payload: Any) -> tuple[list[RangeSeries], list[str]]:
    """The series of a ``/api/v1/query_range`` answer (already decoded JSON) and its warnings."""
    if not isinstance(payload, Mapping) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, Mapping) else None
        raise PrometheusPayloadError(f"not a successful Prometheus answer: {error or str(payload)[:200]}")
    data = payload.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, Mapping) else type(data).__name__
        raise PrometheusPayloadError(f"expected a matrix result, got {kind!r}")
    series: list[RangeSeries] = []
    for item in data.get("result") or []:
        points = item.get("values") or []
        if not points:
            continue
        try:
            ts = np.fromiter((float(p[0]) for p in points), np.float64, len(points))
            values = np.fromiter((float(p[1]) for p in points), np.float64, len(points))
        except (ValueError, TypeError, IndexError) as exc:
            raise PrometheusPayloadError(f"malformed points in a matrix series: {exc}") from exc
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        series.append(RangeSeries(labels, ts, values))
    return series, [str(w) for w in payload.get("warnings") or []]


@dataclass(frozen=True)
class TimeGrid:
    """The evaluation times of a range query: ``start + k * step`` for k < n (each a window's end)."""

    start: float
    step: float
    n: int

    def __post_init__(self) -> None:
        millis = self.step * 1000
        if not (self.n >= 1 and millis >= 1 and abs(millis - round(millis)) < 1e-6):
            raise ValueError(
                f"a grid needs n >= 1 and a step of whole milliseconds, got {self.n} x {self.step}s"
            )

    @classmethod
    def covering(cls, start: float, end: float, step: float) -> TimeGrid:
        """The grid from ``start`` to at most ``end``, on whole milliseconds (Prometheus's resolution)."""
        if not (math.isfinite(step) and round(step * 1000) > 0):
            raise ValueError(f"step must be a positive number of seconds (at least 1 ms), got {step}")
        first, last, every = round(start * 1000), round(end * 1000), round(step * 1000)
        if last < first:
            raise ValueError(f"end ({end}) is before start ({start})")
        return cls(first / 1000, every / 1000, (last - first) // every + 1)

    @property
    def end(self) -> float:
        return self.start + (self.n - 1) * self.step

    def times(self) -> FloatArray:
        return self.start + self.step * np.arange(self.n, dtype=np.float64)

    def columns(self, ts: FloatArray) -> IntArray:
        """Grid column of each timestamp; -1 for one off the grid."""
        k = np.rint((ts - self.start) / self.step).astype(np.int64)
        on = (k >= 0) & (k < self.n) & (np.abs(ts - (self.start + k * self.step)) <= 1e-3 * self.step)
        return np.where(on, k, -1)


def convert(values: FloatArray, unit: Unit, reduce: Reduce, step: float) -> FloatArray:
    """Exporter units to the frames': ratios 0..1, bytes, counts per window (non-finite -> NaN)."""
    if unit is Unit.PERCENT:
        values = values / 100.0
    elif unit is Unit.RATIO_OR_PERCENT:
        values = np.where(values > 1.0, values / 100.0, values)
    elif unit is Unit.MIB:
        values = values * MIB
    if reduce is Reduce.RATE:
        values = values * step  # per-second rate -> count in the window
    return np.where(np.isfinite(values), values, np.nan)


Placement = tuple[int, MetricQuery, RangeSeries]


class Placements:
    """Row keys in order of first sight, and which series feed which row of which column."""

    def __init__(self) -> None:
        self.index: dict[Hashable, int] = {}
        self.placed: dict[str, list[Placement]] = defaultdict(list)

    def row(self, key: Hashable) -> int:
        return self.index.setdefault(key, len(self.index))

    def place(self, row: int, query: MetricQuery, series: RangeSeries) -> None:
        self.placed[query.column].append((row, query, series))

    def fill(self, column: str, grid: TimeGrid, *, total: bool) -> FloatArray:
        """Rows x grid columns of one frame column: its parts added up (NaN where none reports). Within a
        part, per cell, the best-ranked alias that reports wins; series of that alias on one row are summed
        (``total``) or averaged."""
        placed = self.placed.get(column, [])
        out = np.full((len(self.index), grid.n), np.nan)
        for part in sorted({query.part for _, query, _ in placed}):
            value = self._fill_part([p for p in placed if p[1].part == part], grid, total=total)
            out = np.where(np.isnan(out), value, np.where(np.isnan(value), out, out + value))
        return out

    def _fill_part(self, placed: list[Placement], grid: TimeGrid, *, total: bool) -> FloatArray:
        out = np.full((len(self.index), grid.n), np.nan)
        for rank in sorted({query.rank for _, query, _ in placed}):
            sums = np.zeros_like(out)
            counts = np.zeros(out.shape, dtype=np.int64)
            for row, query, series in placed:
                if query.rank != rank:
                    continue
                cols = grid.columns(series.ts)
                values = convert(series.values, query.unit, query.reduce, grid.step)
                ok = (cols >= 0) & ~np.isnan(values)
                sums[row, cols[ok]] += values[ok]
                counts[row, cols[ok]] += 1
            with np.errstate(invalid="ignore", divide="ignore"):
                value = sums if total else sums / counts
            out = np.where(np.isnan(out) & (counts > 0), value, out)
        return out


def dedupe_ranks(placed: list[Placement]) -> list[Placement]:
    """One series per scheduler group: SGLang reports the same gauges from every TP rank when asked to
    (--enable-metrics-for-all-schedulers); keep the lowest ``tp_rank`` of each otherwise-equal label set."""
    best: dict[Hashable, tuple[int, Placement]] = {}
    for entry in placed:
        labels = entry[2].labels
        rank_text = labels.get("tp_rank", "")
        rank = int(rank_text) if rank_text.isdigit() else 0
        rest = frozenset((k, v) for k, v in labels.items() if k not in ("tp_rank", "pid"))
        key = (entry[0], entry[1], rest)
        if key not in best or rank < best[key][0]:
            best[key] = (rank, entry)
    return [entry for _, entry in best.values()]


def ratio_in_range(values: FloatArray) -> tuple[FloatArray, int]:
    """Ratios clipped to 0..1 where within float noise of it; values clearly outside become NaN (counted)."""
    bad = (values < -1e-6) | (values > 1.0 + 1e-6)
    return np.where(bad, np.nan, np.clip(values, 0.0, 1.0)), int(bad.sum())
