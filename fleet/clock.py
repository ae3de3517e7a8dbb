"""Time, injected: wall time for timestamps, monotonic time for intervals and budgets, and sleeping.

One protocol for every part of phasefit (the collector's windows, the service's deadlines); a loop that
waits asks for a :class:`SleepingClock`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall time, timezone-aware UTC (record timestamps)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes back (window lengths, deadlines)."""
        ...


class SleepingClock(Clock, Protocol):
    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """Simulated time: ``sleep`` and ``advance`` move it; nothing waits."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
        self._elapsed = 0.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return 1000.0 + self._elapsed

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._elapsed += max(0.0, seconds)
