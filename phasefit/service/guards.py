"""Ingest protection: per-token concurrency, bounded admission (backpressure) and the cardinality budget.

- :class:`TokenSlots`: at most ``limit`` ingest requests of one token in progress at once, counted from the
  moment its credentials are checked (before the body is read) until it is answered; one more gets 429.
  A holder of one token, however many connections it opens, keeps at most that many requests alive.
- :class:`WriteGate`: at most ``max_pending`` ingest requests admitted at once, taken only once a body
  has been read whole (within its deadline, under its size limit), so a slow body never holds a slot; one
  more gets 429 with ``Retry-After`` instead of joining an unbounded queue. (The write queue behind it,
  :class:`phasefit.service.writes.BatchWriter`, is bounded in size and in waiting time the same way.)

Every count here is one service process's: with ``phasefit serve --workers N`` (or replicas) each process
admits its own ``max_pending`` and gives each token its own ``limit`` and cardinality budget. The per-token
limit protects the process's own admission slots, so it is per process by design; docs/deploy.md says
what the others add up to.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass


class OverloadedError(Exception):
    """The write path is saturated; the client should retry after ``retry_after_s``."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class TokenBusyError(OverloadedError):
    """One token already has as many ingest requests in progress as it may."""


class TokenSlots:
    """In-progress ingest requests per token name (used from the event loop only)."""

    def __init__(self, *, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self._held: dict[str, int] = {}

    def held(self, token: str) -> int:
        return self._held.get(token, 0)

    @asynccontextmanager
    async def taken(self, token: str) -> AsyncIterator[None]:
        held = self._held.get(token, 0)
        if held >= self.limit:
            raise TokenBusyError(
                f"token {token!r} already has {held} ingest requests in progress (at most {self.limit} "
                "per token: PHASEFIT_MAX_PENDING_INGESTS_PER_TOKEN)",
                self.retry_after_s,
            )
        self._held[token] = held + 1
        try:
            yield
        finally:
            left = self._held[token] - 1
            if left:
                self._held[token] = left
            else:
                del self._held[token]


def _ignore(_: float) -> None:
    return None


class WriteGate:
    """Admission of ingest requests in this process (used from the event loop only); ``on_change`` is told
    each change of ``pending`` (+1, -1: the pending-requests gauge)."""

    def __init__(
        self, *, max_pending: int, retry_after_s: int, on_change: Callable[[float], None] = _ignore
    ) -> None:
        self.max_pending = max_pending
        self.retry_after_s = retry_after_s
        self.on_change = on_change
        self.pending = 0

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        if self.pending >= self.max_pending:
            raise OverloadedError(f"{self.pending} ingest requests already in progress", self.retry_after_s)
        self.pending += 1
        self.on_change(1)
        try:
            yield
        finally:
            self.pending -= 1
            self.on_change(-1)


class CardinalityExceededError(Exception):
    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Reservation:
    token: str
    at: float
    count: int


class CardinalityGuard:
    """How many GPUs and workers new to the store each token created in a sliding window (an hour).

    Reservations are taken before the write and released if it fails, so a failed write costs no budget.
    Thread-safe: it is called from the write threads.
    """

    def __init__(self, limit: int, monotonic: Callable[[], float], window_s: float = 3600.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._created: dict[str, deque[tuple[float, int]]] = {}

    def reserve(self, token: str, new_series: int) -> Reservation | None:
        """Reserve ``new_series`` for ``token``; beyond the budget raise :class:`CardinalityExceededError`."""
        if new_series <= 0:
            return None
        now = self._monotonic()
        with self._lock:
            history = self._created.setdefault(token, deque())
            while history and history[0][0] <= now - self.window_s:
                history.popleft()
            used = sum(count for _, count in history)
            if used + new_series > self.limit:
                raise CardinalityExceededError(
                    f"token {token!r} may create at most {self.limit} new GPUs or workers per hour; "
                    f"it created {used} in the last hour and this batch would add {new_series}",
                    self._retry_after(history, used + new_series - self.limit, now),
                )
            history.append((now, new_series))
        return Reservation(token, now, new_series)

    def release(self, reservation: Reservation | None) -> None:
        if reservation is None:
            return
        with self._lock:
            history = self._created.get(reservation.token)
            if history is not None:
                with suppress(ValueError):
                    history.remove((reservation.at, reservation.count))

    def _retry_after(self, history: deque[tuple[float, int]], excess: int, now: float) -> int:
        """Seconds until enough of the window has expired for this batch (an hour if it can never fit)."""
        if excess > sum(count for _, count in history):
            return int(self.window_s)
        freed = 0
        for at, count in history:
            freed += count
            if freed >= excess:
                return max(1, math.ceil(at + self.window_s - now))
        return int(self.window_s)
