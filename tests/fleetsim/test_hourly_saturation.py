"""The truth's hourly saturated share and the examiner's critical-on-demand-limited rule built on it."""

from __future__ import annotations

import numpy as np

from fleetsim.examine import _unqueued
from fleetsim.truth import hourly_shares


def test_windows_that_divide_the_hour() -> None:
    flags = np.array([True] * 30 + [False] * 30 + [True] * 15, dtype=bool)  # 60 s windows: 1 h 15 min
    assert hourly_shares(flags, 60.0) == [0.5, 1.0]


def test_windows_that_do_not_divide_the_hour_stay_on_the_clock() -> None:
    """420 s windows: hour k holds the windows starting in it (9 or 8), never drifting a window an hour."""
    n = 24 * 3600 // 420  # 205 windows, the last starting at 23:48
    flags = np.zeros(n, dtype=bool)
    flags[(np.arange(n) * 420 // 3600) == 23] = True  # only windows starting in the last hour are queued
    shares = hourly_shares(flags, 420.0)
    assert len(shares) == 24 and shares[23] == 1.0 and sum(shares[:23]) == 0.0


def test_windows_longer_than_an_hour_cover_the_hours_they_span() -> None:
    flags = np.array([False, True], dtype=bool)  # two 2-hour windows
    assert hourly_shares(flags, 7200.0) == [0.0, 0.0, 1.0, 1.0]


def test_a_finding_is_judged_over_the_hours_it_spans() -> None:
    hourly = [0.0] * 12 + [1.0] * 12  # unqueued for 12 hours, then queued
    assert _unqueued(hourly, 0.0, 6 * 3600.0)  # the quiet morning
    assert not _unqueued(hourly, 13 * 3600.0, 20 * 3600.0)  # the busy afternoon
    assert not _unqueued(hourly, 11.5 * 3600.0, 23 * 3600.0)  # mostly busy hours
    assert not _unqueued(hourly, -5 * 3600.0, -3600.0)  # before the truth began: not scored
    assert not _unqueued(hourly, 30 * 3600.0, 40 * 3600.0)  # after it ended: not scored
