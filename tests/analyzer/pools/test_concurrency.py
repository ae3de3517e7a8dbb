"""The engines' concurrency cap: reported where the engine exports it, else a plateau held with work
waiting; decode is saturated at it, and no modelled decode batch runs beyond it."""

from __future__ import annotations

import math

import numpy as np

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.concurrency import at_cap, group_cap, row_caps, running_plateau
from fleet.catalog import load_catalog
from fleetsim.examine import simulate


class _Grid:
    def __init__(self, running: np.ndarray) -> None:
        self.running = running


def test_a_level_held_is_a_plateau_and_a_spike_is_not() -> None:
    held = np.array([100.0, 250.0, 255.0, 256.0, 256.0, 120.0])
    assert running_plateau(held, 0.98, 3) == 256.0
    spike = np.array([100.0, 120.0, 256.0, 110.0, 130.0, np.nan])
    assert running_plateau(spike, 0.98, 3) is None
    assert running_plateau(np.full(4, np.nan), 0.98, 3) is None


def test_a_reported_cap_comes_before_the_plateau_and_unknown_is_no_cap() -> None:
    running = np.array([[10.0, 60.0, 64.0, 64.0, 64.0], [5.0, 6.0, 7.0, 8.0, 9.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    grid = _Grid(running)
    rows = np.array([0, 1, 2])
    caps = row_caps(grid, rows, {1: 8}, 0.98, 3)  # type: ignore[arg-type]
    assert caps[0] == 64.0 and caps[1] == 8.0 and math.isinf(caps[2])
    hit = at_cap(grid, rows, caps, 0.98)  # type: ignore[arg-type]
    assert hit[0].tolist() == [False, False, True, True, True]
    assert hit[1].tolist() == [False, False, False, True, True]
    assert not hit[2].any()
    assert group_cap((0, 1, 2), {1: 8, 2: 12}) == 10.0 and group_cap((0,), {1: 8}) is None


def test_the_cap_the_engines_report_bounds_every_groups_decode_batch() -> None:
    """The MoE pool's engines report their cap: the H200 group's decode batch stops there instead of where
    its KV cache would take it (about 1,750 sequences), and the pool is no longer sent a move it cannot
    use."""
    catalog = load_catalog()
    run = simulate("moe", catalog, days=1.0, truth=False)
    (pool,) = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog).pools
    caps = pool.calibration.concurrency_cap
    assert caps and all(source == "reported" for _, source in caps.values())
    latest = pool.latest
    assert latest is not None and latest.placement is not None
    for group in latest.capacities:
        assert group.decode.batch is not None and group.decode.batch <= caps[group.group.key][0] + 1e-6
    assert latest.placement.best.prefill == latest.placement.current.prefill


def test_ttft_rising_with_the_queue_is_a_prefill_limit_only_where_busy_time_is_unknown() -> None:
    from analyzer.pools.limits import ttft_rising

    ttft = np.array([[0.2, 0.2, 0.3, 0.9, 1.2], [0.2, 0.2, 0.3, 0.9, 1.2], [np.nan, 0.5, 0.9, 1.1, 1.2]])
    queued = np.array([[False, False, True, True, True]] * 3)
    unknown = np.array([[True] * 5, [False] * 5, [True] * 5])
    hit = ttft_rising(ttft, queued, unknown, 2.0)
    # Row 0: its calm TTFT is 0.2 s; 0.9 and 1.2 s with a queue are at its limit, 0.3 s is not.
    assert hit[0].tolist() == [False, False, False, True, True]
    # Row 1 reports busy time: that decides, not the TTFT.
    assert not hit[1].any()
    # Row 2: its one calm bucket holds 0.5 s; a queue at 1.1 and 1.2 s is at its limit.
    assert hit[2].tolist() == [False, False, False, True, True]
    # No calm bucket at all: no baseline, never at the limit.
    assert not ttft_rising(ttft[:1], np.ones((1, 5), dtype=bool), unknown[:1], 2.0).any()
