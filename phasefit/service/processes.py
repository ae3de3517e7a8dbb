"""Several service processes on one port (``phasefit serve --workers N``): their metrics as one exposition.

uvicorn spawns N worker processes that accept connections on the one listening socket, each importing
phasefit afresh and building the whole app from the environment
(:func:`phasefit.service.app.app_from_environment`). They share the store and nothing else: admission, the
per-token and cardinality limits, the series cache, the writer threads and the connection pool are each
process's own (docs/deploy.md, "Several service processes").

A scrape of ``/metrics`` reaches whichever process accepts it, so with several processes
prometheus-client's multiprocess mode is on: each process writes its samples to memory-mapped files in
``PROMETHEUS_MULTIPROC_DIR`` and any process's ``/metrics`` reads them all. Counters and histograms are
summed over every process that ever ran (a killed worker's counts stay, so a counter never goes back when
its replacement starts); the service's gauges are ``livesum``: summed over the processes alive now, the
files of dead ones dropped at each scrape. The mode is chosen when prometheus-client is imported, so
``phasefit serve`` sets the variable (:func:`prepare`) before uvicorn spawns the workers.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

ENV = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


def files_directory() -> Path | None:
    """The folder this process writes its metric values to, or None when they live in its memory."""
    if not getattr(values.ValueClass, "_multiprocess", False):
        return None
    folder = os.environ.get(ENV)
    return Path(folder) if folder else None


def prepare(workers: int) -> Path | None:
    """Before the workers start: an empty folder for their metric files in ``PROMETHEUS_MULTIPROC_DIR``.

    A folder the operator set is created if missing and emptied of earlier runs' files; otherwise, with more
    than one worker, a private temporary folder is made and exported. Returns the folder to remove when the
    service stops (the one made here), else None."""
    given = os.environ.get(ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        clear(folder)
        return None
    if workers <= 1:
        return None
    made = Path(tempfile.mkdtemp(prefix="phasefit-metrics-"))
    os.environ[ENV] = str(made)
    return made


def remove(folder: Path | None) -> None:
    """Remove the folder :func:`prepare` made, and its variable."""
    if folder is None:
        return
    shutil.rmtree(folder, ignore_errors=True)
    if os.environ.get(ENV) == str(folder):
        del os.environ[ENV]


def clear(folder: Path) -> None:
    """Remove the metric files of earlier runs (prometheus-client would otherwise add them up)."""
    for path in folder.glob("*.db"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def start_process(folder: Path) -> None:
    """Drop live gauges a dead process with this process's id left behind (a recycled pid)."""
    _forget(os.getpid(), folder)


def forget_dead(folder: Path) -> list[int]:
    """Drop the live gauges of processes that are gone; returns their pids."""
    dead = []
    for pid in sorted(_live_gauge_pids(folder.iterdir())):
        if not alive(pid):
            _forget(pid, folder)
            dead.append(pid)
    return dead


def _live_gauge_pids(paths: Iterable[Path]) -> set[int]:
    return {int(match[1]) for path in paths if (match := _LIVE_GAUGE_FILE.fullmatch(path.name))}


def _forget(pid: int, folder: Path) -> None:
    with contextlib.suppress(FileNotFoundError):  # another process's scrape removed them first
        mark_process_dead(pid, str(folder))  # type: ignore[no-untyped-call]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting for uvicorn to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not one of ours, but alive
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


class AllProcesses:
    """Every process's samples from ``folder``, the live gauges of dead processes dropped first."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files = MultiProcessCollector(None, str(folder))  # type: ignore[no-untyped-call]

    def collect(self) -> Iterable[Any]:
        forget_dead(self.folder)
        return self._files.collect()  # type: ignore[no-any-return,no-untyped-call]


def exposition_registry(folder: Path) -> CollectorRegistry:
    """What ``/metrics`` serves in multiprocess mode; the caller adds its per-scrape collectors."""
    registry = CollectorRegistry()
    registry.register(AllProcesses(folder))
    return registry
