"""Histograms per grid cell (analyzer.telemetry.latency_cells)."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.telemetry.latency_cells import HistogramCells, as_counts, summed_by_group
from fleet import histograms


def _one(le: float, n: float) -> np.ndarray:
    return histograms.rebin([le], [n], n)


def test_items_sum_per_group_and_unknown_stays_none() -> None:
    items = [_one(0.1, 2.0), None, histograms.encode(_one(0.1, 3.0)), None]
    out = summed_by_group(items, np.array([0, 1, 0, 2]), 3)
    assert out[0] is not None and out[0].sum() == pytest.approx(5.0)
    assert out[1] is None and out[2] is None
    with pytest.raises(ValueError, match="shared grid"):
        as_counts(np.zeros(3))


def test_cells_merge_over_rows_columns_and_a_mask() -> None:
    # 2 workers x 3 buckets; worker 0 has histograms in buckets 0 and 2, worker 1 in bucket 1.
    cells = HistogramCells.laid_out([_one(0.1, 1.0), _one(0.2, 2.0), _one(0.4, 4.0)], np.array([0, 2, 4]), 3)
    everything = cells.merged([0, 1], 0, 3)
    assert everything is not None and everything.sum() == pytest.approx(7.0)
    assert cells.merged([1], 0, 1) is None  # worker 1 has nothing in bucket 0
    first_only = cells.merged([0], 0, 2)
    assert first_only is not None and first_only.sum() == pytest.approx(1.0)
    masked = cells.merged([0, 1], 0, 3, np.array([[True, True, False], [True, True, True]]))
    assert masked is not None and masked.sum() == pytest.approx(5.0)
    per = cells.per_column([0, 1], 0, 3)
    assert [None if p is None else float(p.sum()) for p in per] == pytest.approx([1.0, 4.0, 2.0])
    assert HistogramCells.empty(3).merged([0], 0, 3) is None
