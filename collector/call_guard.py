"""Per-call deadlines for NVML, which can block forever (go-nvml#152, gpud#117: calls stuck in D state).

A blocked C call cannot be interrupted, so NVML work runs on a worker thread.  Each call made through the
``call`` function handed to a job records its name and start; the caller waits for the job and, when the
call in flight has run longer than the deadline, gives up on it: the job raises :class:`CallTimeoutError`, the
worker is abandoned (it exits by itself if the call ever returns) and the next job gets a fresh worker.
At most ``max_stuck`` abandoned workers may be alive; past that every job fails fast with
:class:`DriverUnresponsiveError` instead of piling up threads (reliability target N3).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class CallTimeoutError(Exception):
    def __init__(self, function: str, waited_s: float) -> None:
        super().__init__(f"NVML call {function} did not return within {waited_s:.1f} s")
        self.function = function


class _Abandoned(BaseException):
    """Raised in an abandoned worker when its blocked call returns at last, so the job touches nothing."""


class DriverUnresponsiveError(Exception):
    def __init__(self, stuck: int) -> None:
        super().__init__(f"{stuck} NVML call(s) still blocked: the driver is unresponsive")
        self.stuck = stuck


Call = Callable[..., Any]  # call(fn, *args) -> fn(*args), timed


@dataclass
class _Job(Generic[T]):
    work: Callable[[Call], T]
    done: threading.Event
    result: Any = None
    error: BaseException | None = None


class _Worker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self.current: tuple[str, float] | None = None
        self.abandoned = False
        self.thread = threading.Thread(target=self._run, name="phasefit-nvml", daemon=True)
        self.thread.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        self.current = (getattr(fn, "__name__", "nvml"), time.monotonic())
        try:
            result = fn(*args)
        finally:
            self.current = None
        if self.abandoned:
            raise _Abandoned
        return result

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None or self.abandoned:
                return
            try:
                job.result = job.work(self.call)
            except _Abandoned:
                return
            except BaseException as exc:  # handed to the waiting caller
                job.error = exc
            job.done.set()
            if self.abandoned:
                return


class CallGuard:
    def __init__(self, per_call_timeout_s: float, max_stuck: int = 1) -> None:
        self.per_call_timeout_s = per_call_timeout_s
        self.max_stuck = max_stuck
        self._worker: _Worker | None = None
        self._stuck: list[_Worker] = []
        self.timeouts = 0

    def stuck_workers(self) -> int:
        self._stuck = [w for w in self._stuck if w.thread.is_alive()]
        return len(self._stuck)

    def run(self, work: Callable[[Call], T]) -> T:
        """Run ``work(call)`` on the worker; raise CallTimeoutError / DriverUnresponsiveError."""
        stuck = self.stuck_workers()
        if stuck >= self.max_stuck:
            raise DriverUnresponsiveError(stuck)
        if self._worker is None:
            self._worker = _Worker()
        worker = self._worker
        job: _Job[T] = _Job(work, threading.Event())
        worker.jobs.put(job)
        poll = max(0.005, self.per_call_timeout_s / 4)
        while not job.done.wait(poll):
            current = worker.current
            if current is not None and time.monotonic() - current[1] >= self.per_call_timeout_s:
                if job.done.is_set():
                    break
                worker.abandoned = True
                self._stuck.append(worker)
                self._worker = None
                self.timeouts += 1
                raise CallTimeoutError(current[0], self.per_call_timeout_s)
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def close(self) -> None:
        if self._worker is not None:
            self._worker.jobs.put(None)
            self._worker = None
