"""Undelivered demand, measured: how fast a pool's queues grow over a segment."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.pool_state import queue_growth
from fleet.catalog import load_catalog
from fleetsim.examine import simulate


class _Grid:
    """The two fields :func:`queue_growth` reads."""

    def __init__(self, waiting: np.ndarray, bucket_s: float = 60.0) -> None:
        self.waiting = waiting
        self.bucket_start = np.arange(waiting.shape[1], dtype=np.float64) * bucket_s


def test_a_growing_queue_is_the_demand_left_unserved() -> None:
    t = np.arange(100, dtype=np.float64)
    waiting = np.vstack([0.5 * t, 0.25 * t])  # two workers' queues: 0.75 requests more each minute
    assert queue_growth(_Grid(waiting), (0, 1), 0, 100) == pytest.approx(0.75 / 60.0)  # type: ignore[arg-type]


def test_a_queue_that_holds_or_drains_leaves_nothing_unserved_and_none_reported_is_unknown() -> None:
    t = np.arange(100, dtype=np.float64)
    steady = np.vstack([np.full(100, 40.0) + np.sin(t)])
    draining = np.vstack([100.0 - t])
    assert queue_growth(_Grid(steady), (0,), 0, 100) == pytest.approx(0.0, abs=1e-3)  # type: ignore[arg-type]
    assert queue_growth(_Grid(draining), (0,), 0, 100) == 0.0  # type: ignore[arg-type]
    unknown = np.full((1, 100), np.nan)
    assert math.isnan(queue_growth(_Grid(unknown), (0,), 0, 100))  # type: ignore[arg-type]


@pytest.mark.parametrize(("scenario", "short"), [("over-demand", True), ("balanced", False)])
def test_the_summary_reports_the_undelivered_requests(scenario: str, short: bool) -> None:
    catalog = load_catalog()
    run = simulate(scenario, catalog, days=1.0, truth=False)
    summary = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog).summary
    figures = [s["undelivered_requests_per_s"] for p in summary["pools"] for s in p["segments"]]
    assert figures and all(f is not None and f >= 0.0 for f in figures)
    assert (max(figures) > 0.5) is short  # arrivals at 1.2x capacity leave requests/s unserved
