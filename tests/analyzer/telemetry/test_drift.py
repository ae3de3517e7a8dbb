from __future__ import annotations

import numpy as np
import pytest

from analyzer.telemetry.drift import DriftParams, change_points, segments, state_changes


def _series(n: int, level: float, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level * np.exp(noise * rng.normal(size=n))


def test_a_step_in_the_mix_is_found_at_the_step() -> None:
    isl = np.concatenate([_series(60, 1300.0, 0.01, 0), _series(24, 1600.0, 0.01, 1)])
    osl = np.concatenate([_series(60, 180.0, 0.01, 2), _series(24, 120.0, 0.01, 3)])
    points = change_points({"prompt": isl, "output": osl})
    assert [p.index for p in points] == [60]
    assert points[0].series["prompt"][0] == pytest.approx(1300.0, rel=0.02)
    assert points[0].series["output"][1] == pytest.approx(120.0, rel=0.02)
    assert points[0].magnitude == pytest.approx(1.0 / 3.0, abs=0.02)
    assert "prompt 1,3" in points[0].describe()


def test_a_steady_mix_under_a_daily_rate_cycle_has_no_change_point() -> None:
    # The request rate swings with the day; the mix (what drift is about) only wobbles.
    hours = np.arange(24 * 7)
    isl = (
        1300.0
        * (1.0 + 0.02 * np.sin(2 * np.pi * hours / 24))
        * np.exp(0.01 * np.random.default_rng(4).normal(size=hours.size))
    )
    osl = 180.0 * np.exp(0.02 * np.random.default_rng(5).normal(size=hours.size))
    assert change_points({"prompt": isl, "output": osl}) == []


def test_a_short_burst_is_not_a_drift() -> None:
    isl = _series(48, 1300.0, 0.01, 6)
    isl[20:22] = 2600.0  # two hours of long prompts: shorter than min_size
    assert change_points({"prompt": isl}, DriftParams(min_size=3)) == []


def test_a_ramp_is_found_near_its_start_and_gaps_are_skipped() -> None:
    ramp = np.linspace(1300.0, 1700.0, 6)
    isl = np.concatenate([_series(40, 1300.0, 0.005, 7), ramp, _series(20, 1700.0, 0.005, 8)])
    isl[10:13] = np.nan  # hours with no traffic
    points = change_points({"prompt": isl})
    assert points, "the ramp must be detected"
    assert 40 <= points[0].index <= 44


def test_small_shifts_below_min_shift_are_ignored() -> None:
    isl = np.concatenate([_series(40, 1300.0, 0.001, 9), _series(40, 1340.0, 0.001, 10)])  # +3%
    assert change_points({"prompt": isl}, DriftParams(min_shift=0.08)) == []
    assert [p.index for p in change_points({"prompt": isl}, DriftParams(min_shift=0.02))] == [40]


def test_state_changes_need_the_new_state_to_hold() -> None:
    states = np.zeros((2, 20), dtype=np.int64)
    states[0, 5] = -2  # a one-bucket restart: not a change
    states[1, 12:] = 1  # a lasting role change
    assert state_changes(states, min_size=3) == [12]


def test_segments_merge_short_pieces() -> None:
    assert segments(20, [5, 6, 15], min_size=3) == [(0, 5), (5, 15), (15, 20)]
    assert segments(20, [1, 19], min_size=3) == [(0, 20)]
    assert segments(10, [], min_size=3) == [(0, 10)]
