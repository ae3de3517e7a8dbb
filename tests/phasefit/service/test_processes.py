"""Several service processes: gauges moved where their quantity changes, and every process's metrics as one
exposition (prometheus-client's multiprocess files), the live gauges of dead processes dropped."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from phasefit.service import processes
from phasefit.service.guards import CardinalityGuard, WriteGate
from phasefit.service.state import store_unavailable
from phasefit.service.tokens import Token
from phasefit.service.writes import BatchWriter, SeriesCache
from tests.phasefit.service.conftest import INGEST_A, ClientFactory, auth
from tests.phasefit.service.records import body, fleet_batch, gpu
from tests.phasefit.service.test_stores import rows

REPO = Path(__file__).resolve().parents[3]

# One service process's metrics, in files: argv[1] requests answered, argv[2] ingests pending; it then waits
# for its stdin to close, so the test decides when it is alive and when dead.
_PROCESS = """
import sys
from prometheus_client import CollectorRegistry
from phasefit.service.metrics import ServiceMetrics
metrics = ServiceMetrics(CollectorRegistry())
metrics.requests.labels("POST", "/v1/ingest", "200").inc(int(sys.argv[1]))
metrics.ingest_pending.inc(int(sys.argv[2]))
print("ready", flush=True)
sys.stdin.read()
"""


def _process(folder: Path, requests: int, pending: int) -> subprocess.Popen[str]:
    env = {**os.environ, processes.ENV: str(folder)}
    child = subprocess.Popen(
        [sys.executable, "-c", _PROCESS, str(requests), str(pending)], env=env, cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def _end(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    assert child.wait(timeout=30) == 0


def test_every_process_counts_once_and_only_live_processes_gauges_count(tmp_path: Path) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    first = _process(folder, requests=3, pending=5)
    _end(first)  # a worker that died: its counts stay, its gauges go
    second, third = _process(folder, requests=4, pending=2), _process(folder, requests=10, pending=1)
    registry = processes.exposition_registry(folder)
    try:
        labels = {"method": "POST", "route": "/v1/ingest", "code": "200"}
        assert registry.get_sample_value("phasefit_service_requests_total", labels) == 17
        assert registry.get_sample_value("phasefit_service_processes") == 2
        assert registry.get_sample_value("phasefit_service_ingest_pending_requests") == 3
        assert not list(folder.glob(f"gauge_livesum_{first.pid}.db"))  # dropped by the scrape
        assert list(folder.glob(f"counter_{first.pid}.db"))
        _end(third)
        assert registry.get_sample_value("phasefit_service_requests_total", labels) == 17  # never goes back
        assert registry.get_sample_value("phasefit_service_processes") == 1
        assert registry.get_sample_value("phasefit_service_ingest_pending_requests") == 2
    finally:
        for child in (second, third):
            if child.poll() is None:
                _end(child)


def test_prepare_makes_a_private_folder_only_for_several_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(processes.ENV, "")
    monkeypatch.delenv(processes.ENV)  # recorded: undone after the test
    assert processes.prepare(1) is None and processes.ENV not in os.environ
    made = processes.prepare(2)
    assert made is not None and made.is_dir() and os.environ[processes.ENV] == str(made)
    (made / "counter_1.db").write_bytes(b"\0")
    processes.remove(made)
    assert not made.exists() and processes.ENV not in os.environ


def test_clear_and_forget_dead_touch_only_what_they_must(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)  # fmt: skip
    dead, me = int(done.stdout), os.getpid()
    names = [f"gauge_livesum_{dead}.db", f"gauge_liveall_{dead}.db", f"counter_{dead}.db",
             f"gauge_livesum_{me}.db", f"gauge_all_{dead}.db", "notes.txt"]  # fmt: skip
    for name in names:
        (tmp_path / name).write_bytes(b"\0")
    assert processes.forget_dead(tmp_path) == [dead]
    forgotten = {f"gauge_livesum_{dead}.db", f"gauge_liveall_{dead}.db"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(names) - forgotten)
    processes.start_process(tmp_path)  # a process with a recycled pid drops what that pid left
    assert not (tmp_path / f"gauge_livesum_{me}.db").exists()
    processes.clear(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_zombie_is_dead_a_running_process_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while processes.alive(child.pid):  # exited but not reaped: a zombie, as uvicorn's dead worker is
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.05)
        assert Path(f"/proc/{child.pid}").exists()  # still in the process table
    finally:
        child.wait()
    assert not processes.alive(child.pid)
    assert processes.alive(os.getpid())


def test_one_process_keeps_its_metrics_in_memory_and_counts_itself(client: Any) -> None:
    assert processes.files_directory() is None  # this test process never enabled multiprocess mode
    answer = client.post("/v1/ingest", content=body(fleet_batch(minutes=1)), headers=auth(INGEST_A))
    assert answer.status_code == 200
    registry = client.app.state.phasefit.registry
    assert registry.get_sample_value("phasefit_service_processes") == 1
    for gauge in ("pending_requests", "writing_groups", "queued_batches"):
        assert registry.get_sample_value(f"phasefit_service_ingest_{gauge}") == 0, gauge


def test_the_gate_reports_each_admission_and_its_end() -> None:
    changes: list[float] = []
    gate = WriteGate(max_pending=2, retry_after_s=1, on_change=changes.append)

    async def run() -> None:
        async with gate.admitted(), gate.admitted():
            assert sum(changes) == 2

    asyncio.run(run())
    assert changes == [1, 1, -1, -1]


def test_the_writer_reports_its_queue_and_transactions(sqlite_engine: Engine) -> None:
    events: list[tuple[str, float]] = []
    writer = BatchWriter(
        sqlite_engine, threads=1, max_queued=10, max_wait_s=60, retry_after_s=1, cache=SeriesCache(),
        guard=CardinalityGuard(1000, lambda: 0.0), sku_resolver=None,
        unavailable=lambda exc: store_unavailable(sqlite_engine, exc), monotonic=lambda: 0.0,
        on_queued=lambda n: events.append(("queued", n)), on_writing=lambda n: events.append(("writing", n)),
    )  # fmt: skip
    settled = threading.Event()

    def done(_: Any) -> None:
        events.append(("done", 0))
        settled.set()

    try:
        writer.submit(rows([gpu(0, 0)], "epoch_us"), Token("a", ""), done)
        assert settled.wait(30)
    finally:
        writer.close()
    assert events == [("queued", 1), ("queued", -1), ("writing", 1), ("writing", -1), ("done", 0)]


def test_create_app_serves_every_process_when_metrics_live_in_files(
    make_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In multiprocess mode /metrics reads the folder (here a stand-in process's files) plus the store."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    other = _process(folder, requests=6, pending=4)
    try:
        monkeypatch.setattr(processes, "files_directory", lambda: folder)
        client = make_client()
        text = client.get("/metrics").text
    finally:
        _end(other)
    assert 'phasefit_service_requests_total{code="200",method="POST",route="/v1/ingest"} 6.0' in text
    assert "phasefit_service_ingest_pending_requests 4.0" in text
    assert "phasefit_service_store_up 1.0" in text  # the analyzer's gauges, read from the store
