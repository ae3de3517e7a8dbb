"""Calibration from the fleet's evidence: a saturated worker's speed is its capacity; an unsaturated one's
only a floor (issue 27: an idle prefill worker read as a slow one turned a pool at 30% load into 91%)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.calibration import _busiest
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()
WORKERS = workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)])
SLOW = 6_000.0  # prompt tokens per busy second the prefill workers show, about half the model's


def _pool(rate: float, waiting: float) -> dict[str, Any]:
    fleet = Fleet(WORKERS, rate_rps=lambda hour: rate, prefill_speed=SLOW, prefill_waiting=waiting)
    (pool,) = analyze(input_from_samples(*fleet.columns()), CATALOG).summary["pools"]
    return dict(pool)


def test_an_unsaturated_worker_never_scales_the_capacity_down() -> None:
    pool = _pool(3.0, 0.0)  # prefill about 30% busy, nothing queued
    assert pool["calibration"]["prefill_factor[H100-SXM/tp2]"] == 1.0
    assert pool["recommended"]["H100-SXM/tp2"]["prefill_tokens_per_s_per_worker"] > 1.5 * SLOW
    assert pool["recommended"]["H100-SXM/tp2"]["prefill_source"] == "calibrated"  # never "measured"


def test_a_saturated_worker_s_speed_is_its_capacity() -> None:
    pool = _pool(8.5, 3.0)  # prefill about 95% busy with prompts queued
    assert pool["calibration"]["prefill_factor[H100-SXM/tp2]"] < 0.6
    assert pool["recommended"]["H100-SXM/tp2"]["prefill_tokens_per_s_per_worker"] == pytest.approx(
        SLOW, rel=0.02
    )


def test_an_unsaturated_worker_s_speed_is_read_from_its_busiest_loaded_buckets() -> None:
    """Prefill batches more prompts the busier a worker is, so its speed per busy second rises with load
    toward its capacity: the busiest quarter of its loaded buckets (at least 3) is its tightest floor."""
    busy = np.array([0.2, 0.35, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99, 0.92])
    loaded = busy >= 0.3
    chosen = _busiest(loaded, busy, 0.25)
    assert sorted(busy[chosen].tolist()) == [0.92, 0.95, 0.99]  # 12 loaded: the busiest 3
    assert sorted(busy[_busiest(loaded, busy, 0.5)].tolist()) == [0.8, 0.85, 0.9, 0.92, 0.95, 0.99]
    few = busy >= 0.92
    assert _busiest(few, busy, 0.25).tolist() == few.tolist()  # 3 loaded: all of them
    assert not _busiest(loaded, busy, 0.25)[0]  # an unloaded bucket never counts
