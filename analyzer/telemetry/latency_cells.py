"""Latency histograms per (worker, bucket) cell of the grid, on the shared bucket grid of
:mod:`fleet.histograms`, so a pool's quantile over any span is taken from its merged buckets
(``histogram_quantile(q, sum by (le) (...))``), never from a mean of its workers' quantiles.

A histogram item is what a source hands on: per-bucket counts (a numpy array of ``histograms.SIZE``), the
stored bytes (:func:`fleet.histograms.encode`), or None (not reported: unknown, never an empty histogram).
Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.frames import FloatArray, IntArray
from fleet import histograms

HISTOGRAM_COLUMNS = ("ttft_histogram", "tpot_histogram", "e2e_histogram")
_Counts = npt.NDArray[np.float32]
Mask = npt.NDArray[np.bool_]


def as_counts(item: Any) -> FloatArray | None:
    """One histogram item as per-bucket counts, or None."""
    if item is None:
        return None
    if isinstance(item, bytes | bytearray | memoryview):
        return histograms.decode(bytes(item))
    counts = np.asarray(item, dtype=np.float64)
    if counts.shape != (histograms.SIZE,):
        raise ValueError(
            f"a latency histogram has {histograms.SIZE} buckets on the shared grid, not {counts.shape}"
        )
    return counts


def summed_by_group(
    items: Sequence[Any] | npt.NDArray[Any], group: IntArray, n: int
) -> list[FloatArray | None]:
    """Per group (``group[i]`` for item ``i``, ``n`` groups): the bucket-wise sum of its items, None where
    none of them is known. Stored forms are summed without decoding each (:func:`fleet.histograms.summed`)."""
    stored = [i for i, item in enumerate(items) if isinstance(item, bytes | bytearray | memoryview)]
    dense = [
        i
        for i, item in enumerate(items)
        if item is not None and not isinstance(item, bytes | bytearray | memoryview)
    ]
    if not stored and not dense:
        return [None] * n
    sums = np.zeros((n, histograms.SIZE))
    known = np.zeros(n, bool)
    if stored:
        groups = group[stored]
        sums += histograms.summed([bytes(items[i]) for i in stored], groups, n)
        known[groups] = True
    for i in dense:
        counts = as_counts(items[i])
        assert counts is not None
        sums[group[i]] += counts
        known[group[i]] = True
    return [sums[g] if known[g] else None for g in range(n)]


@dataclass(frozen=True)
class HistogramCells:
    """The cells of a (workers x buckets) grid that hold a histogram: ``cells`` their flat indices (row x
    n_buckets + column, rising), ``counts`` one row of per-bucket counts each."""

    cells: IntArray
    counts: _Counts
    n_buckets: int

    @classmethod
    def empty(cls, n_buckets: int) -> HistogramCells:
        return cls(np.zeros(0, np.int64), np.zeros((0, histograms.SIZE), np.float32), n_buckets)

    @classmethod
    def laid_out(cls, items: Sequence[Any], cell: IntArray, n_buckets: int) -> HistogramCells:
        """``items`` (one per bucket row kept, in ``cell`` order) summed per cell."""
        known = np.fromiter((item is not None for item in items), dtype=bool, count=len(items))
        if not known.any():
            return cls.empty(n_buckets)
        cells, group = np.unique(cell[known], return_inverse=True)
        held = [item for item, k in zip(items, known.tolist(), strict=True) if k]
        sums = summed_by_group(held, group.astype(np.int64), int(cells.size))
        stacked = np.stack([s if s is not None else np.zeros(histograms.SIZE) for s in sums]).astype(
            np.float32
        )
        return cls(cells.astype(np.int64), stacked, n_buckets)

    def merged(
        self, rows: Sequence[int] | IntArray, first: int, last: int, mask: Mask | None = None
    ) -> FloatArray | None:
        """The bucket-wise sum over the cells of ``rows`` in columns [first, last) (where ``mask``, shaped
        rows x (last - first), is True), None when no such cell holds a histogram."""
        chosen, _ = self._chosen(rows, first, last, mask)
        if not chosen.any():
            return None
        total: FloatArray = self.counts[chosen].sum(axis=0, dtype=np.float64)
        return total

    def per_column(
        self, rows: Sequence[int] | IntArray, first: int, last: int, mask: Mask | None = None
    ) -> list[FloatArray | None]:
        """:meth:`merged` per column of [first, last), the cells picked once."""
        chosen, column = self._chosen(rows, first, last, mask)
        offset = column[chosen] - first
        sums = np.zeros((last - first, histograms.SIZE))
        np.add.at(sums, offset, self.counts[chosen])
        held = np.bincount(offset, minlength=last - first) > 0
        return [sums[c] if held[c] else None for c in range(last - first)]

    def _chosen(
        self, rows: Sequence[int] | IntArray, first: int, last: int, mask: Mask | None
    ) -> tuple[npt.NDArray[np.bool_], IntArray]:
        """Which cells lie in ``rows`` x [first, last) (and ``mask``), and every cell's column."""
        row, column = np.divmod(self.cells, self.n_buckets)
        if self.cells.size == 0 or not len(rows):
            return np.zeros(self.cells.size, bool), column
        picked = np.asarray(rows, dtype=np.int64)
        position = np.full(int(max(picked.max(), row.max())) + 1, -1, np.int64)
        position[picked] = np.arange(picked.size)
        at = position[row]
        chosen = (at >= 0) & (column >= first) & (column < last)
        if mask is not None:
            inside = np.flatnonzero(chosen)
            chosen[inside] = mask[at[inside], column[inside] - first]
        return chosen, column
