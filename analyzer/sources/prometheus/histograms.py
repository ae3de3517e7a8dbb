"""Zero-agent latency histograms: each worker's TTFT, TPOT and end-to-end bucket increments per window
(``sum without (<ranks>) (increase(<name>_bucket[<window>]))``, one series per ``le``), re-binned onto the
shared grid of bucket bounds (:mod:`fleet.histograms`), so that the analyzer adds a pool's windows and
workers up bucket by bucket and takes its quantiles from the merged buckets, as
``histogram_quantile(q, sum by (le) (...))`` does.

A window's histogram is unknown (None), never 0, where it observed nothing, where its ``+Inf`` bucket did not
report, or where it is not a histogram: a negative increment, or cumulative counts that fall (bounds that
changed across a restart, summed together). Pure: no I/O. Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.sources.prometheus.series import Placement, TimeGrid
from analyzer.telemetry.frames import IntArray
from fleet import histograms
from fleet.histograms import FloatArray

Histogram = FloatArray | None
# What a window's histogram is handed on as: its stored form (a few dozen bytes, where an array of counts
# takes 648: a week of a large fleet's windows), counts where parts were added, or None (unknown).
Held = bytes | FloatArray | None
# Falls and negatives within this share of the window's count are float noise (increments summed over ranks
# in another order), not a histogram that falls.
_NOISE = 1e-9
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
_Buckets = dict[float, FloatArray]  # upper bound (inf: +Inf) -> increments per grid column (NaN: none)


def bound(le: str | None) -> float | None:
    """A bucket's upper bound from its ``le`` label (``+Inf`` -> inf); None where it is not a number."""
    if le is None:
        return None
    try:
        value = float(le)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def window_histogram(buckets: Mapping[float, float]) -> Histogram:
    """One window's bucket increments (upper bound -> observations at or below it; ``inf``: all of them)
    on the shared grid, or None: unknown (no ``+Inf`` bucket, nothing observed, or not a histogram).
    Bounds at or below 0 s hold nothing a latency histogram's next bound does not: they are left out."""
    count = buckets.get(math.inf)
    if count is None or not math.isfinite(count):
        return None
    le = sorted(b for b in buckets if 0.0 < b < math.inf and math.isfinite(buckets[b]))
    values = np.array([*(buckets[b] for b in le), count], dtype=np.float64)
    noise = _NOISE * max(abs(count), 1.0)
    if not count > noise or bool((values < -noise).any()) or bool((np.diff(values) < -noise).any()):
        return None
    cumulative = np.maximum.accumulate(np.maximum(values, 0.0))
    return histograms.rebin(le, cumulative[:-1].tolist(), float(cumulative[-1]))


def window_histograms(
    placed: Sequence[Placement], rows: int, grid: TimeGrid, *, scale: float = 1.0
) -> list[list[Held]]:
    """Rows x grid columns of one histogram column: each row's series (one per ``le``) re-binned per
    window, times ``scale`` (the step over the query's window: counts per step, as the counters'). Series
    of one row, alias and ``le`` add up (a worker's label sets: ``sum by (le)``); the query's parts add up;
    within a part, per window, the best-ranked alias whose ``+Inf`` bucket reports wins."""
    found: dict[tuple[int, int, int], _Buckets] = defaultdict(dict)
    for row, query, series in placed:
        le = bound(series.labels.get("le"))
        if le is None:
            continue
        cols = grid.columns(series.ts)
        ok = (cols >= 0) & np.isfinite(series.values)
        sums = found[(row, query.part, query.rank)].setdefault(le, np.full(grid.n, np.nan))
        held = sums[cols[ok]]
        sums[cols[ok]] = np.where(np.isnan(held), series.values[ok], held + series.values[ok])
    by_row: dict[int, dict[int, list[tuple[int, _Buckets]]]] = defaultdict(lambda: defaultdict(list))
    for (row, part, rank), buckets in found.items():
        by_row[row][part].append((rank, buckets))
    out: list[list[Held]] = [[None] * grid.n for _ in range(rows)]
    for row, parts in by_row.items():
        chosen: list[tuple[list[_Windows], IntArray]] = []
        for aliases in parts.values():
            windows = [_windows(b, grid.n, scale) for _, b in sorted(aliases, key=lambda item: item[0])]
            pick = np.full(grid.n, -1, dtype=np.int64)
            for index, alias in enumerate(windows):
                pick = np.where((pick < 0) & alias.reported, index, pick)
            chosen.append((windows, pick))
        for col in range(grid.n):
            out[row][col] = _cell(chosen, col)
    return out


@dataclass(frozen=True)
class _Windows:
    """One alias's histograms on one row: the windows its ``+Inf`` bucket reports in, and those of them
    that are histograms (column -> counts on the shared grid, times the scale)."""

    reported: BoolArray
    known: dict[int, bytes]


def _windows(buckets: _Buckets, n: int, scale: float) -> _Windows:
    """Every window of one alias's buckets at once: windows where every bound reports are checked and
    re-binned together (one matrix product); a window missing a bound, on the bounds it has."""
    total = buckets.get(math.inf)
    if total is None:
        return _Windows(np.zeros(n, dtype=bool), {})
    les = tuple(sorted(b for b in buckets if 0.0 < b < math.inf))
    matrix = np.vstack([*(buckets[b] for b in les), total])  # bounds (+Inf last) x windows
    reported = ~np.isnan(total)
    full = reported & ~np.isnan(matrix).any(axis=0)
    known: dict[int, bytes] = {}
    if full.any():
        values = matrix[:, full]
        noise = _NOISE * np.maximum(np.abs(values[-1]), 1.0)
        ok = (
            (values[-1] > noise)
            & ~(values < -noise).any(axis=0)
            & ~(np.diff(values, axis=0) < -noise).any(axis=0)
        )
        cumulative = np.maximum.accumulate(np.maximum(values[:, ok], 0.0), axis=0)
        increments = np.diff(cumulative, axis=0, prepend=0.0)
        rebinned = (_rebinning(les) @ increments).T * scale  # windows x SIZE
        cumulative = np.cumsum(rebinned, axis=1)
        stored = histograms.encode_cumulative(cumulative[:, :-1], cumulative[:, -1])
        known.update(zip(np.flatnonzero(full)[ok].tolist(), stored, strict=True))
    bounds = (*les, math.inf)
    for col in np.flatnonzero(reported & ~full).tolist():
        held = {b: float(v) for b, v in zip(bounds, matrix[:, col], strict=True) if not math.isnan(v)}
        histogram = window_histogram(held)
        if histogram is not None:
            encoded = histograms.encode(histogram * scale)
            assert encoded is not None
            known[col] = encoded
    return _Windows(reported, known)


@functools.lru_cache(maxsize=256)
def _rebinning(les: tuple[float, ...]) -> FloatArray:
    """The linear map :func:`fleet.histograms.rebin` is on histograms with bounds ``les``: SIZE x (bounds
    + 1), per-bucket increments (``+Inf`` last) -> per-bucket counts on the shared grid. Column k is the
    re-binned histogram of one observation in bucket k, so a histogram's image is its increments' sum of
    them (rebin interpolates its cumulative counts linearly)."""
    columns = []
    for k in range(len(les) + 1):
        cumulative = [0.0] * k + [1.0] * (len(les) - k)
        columns.append(histograms.rebin(les, cumulative, 1.0))
    return np.stack(columns, axis=1)


def _cell(chosen: Sequence[tuple[Sequence[_Windows], IntArray]], col: int) -> Held:
    """One window's histogram: the chosen alias of each part, added up (one part: its stored form as is);
    unknown where one that reports is not a histogram."""
    held: list[bytes] = []
    for windows, pick in chosen:
        index = int(pick[col])
        if index < 0:
            continue  # no alias of this part reported in this window
        histogram = windows[index].known.get(col)
        if histogram is None:
            return None
        held.append(histogram)
    if len(held) < 2:
        return held[0] if held else None
    total: FloatArray = histograms.decode_many(held).sum(axis=0)
    return total
