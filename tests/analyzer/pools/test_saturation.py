"""Saturation evidence per worker: work waiting while at its limit; unknown where no queue is reported."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.saturation import worker_saturation
from fleet.catalog import load_catalog
from fleet.contract import Role
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()
WORKERS = workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)])


def _states(**fleet: object) -> dict[str, tuple[str, float | None]]:
    result = analyze(input_from_samples(*Fleet(WORKERS, **fleet).columns()), CATALOG)  # type: ignore[arg-type]
    return {w["worker_id"]: (w["saturation"], w["saturated_share"]) for w in result.summary["workers"]}


def test_a_queue_at_the_running_plateau_is_saturation_and_no_queue_is_not() -> None:
    idle = _states()
    assert {state for state, _ in idle.values()} == {"unsaturated"}
    queued = _states(decode_waiting=3.0)
    assert queued["node01/decode-1"][0] == "saturated" and (queued["node01/decode-1"][1] or 0) > 0.8
    assert queued["node00/prefill-1"][0] == "unsaturated"  # prefill neither queues nor runs at its limit


def test_no_reported_queue_is_unknown_never_unsaturated() -> None:
    result = analyze(input_from_samples(*Fleet(WORKERS, decode_waiting=3.0).columns()), CATALOG)
    grid = replace(result.grid, waiting=np.full_like(result.grid.waiting, np.nan))
    row = result.grid.workers.index("node01/decode-1")
    seen = worker_saturation(grid, row, Role.DECODE, 0, grid.shape[1])
    assert seen.state == "unknown" and seen.share is None and "reports no queue" in seen.reason
    assert worker_saturation(result.grid, row, Role.DECODE, 0, grid.shape[1]).state == "saturated"
