"""``phasefit serve --workers 2`` for real: two processes on one port and one PostgreSQL database.

The service starts on an EMPTY database, so both workers race to create the schema. Which process takes a
connection is the kernel's choice; each process's own counts are read from its metric files
(``counter_<pid>.db`` in the ``PROMETHEUS_MULTIPROC_DIR`` given to it), and ``/metrics`` must add them up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from fleet.store.engine import make_engine
from fleet.store.schema import GpuSampleRow
from tests.phasefit.service.records import body, engine, gpu

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOKEN = "two-processes-token-0123456789"
RECORDS = "phasefit_service_ingest_records_total"
START = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=3)  # batches up to +52 h


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    port: int
    metrics: Path
    database_url: str
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scrape(self) -> dict[str, float]:
        """``/metrics`` as {sample name and labels: value}."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return {
            sample.name + _labels(sample.labels): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def per_process(self, name: str) -> dict[int, float]:
        """Each process's own total of counter ``name`` (every label), from its metric file."""
        totals: dict[int, float] = {}
        for path in self.metrics.glob("counter_*.db"):
            families = MultiProcessCollector.merge([str(path)])
            pid = int(path.stem.removeprefix("counter_"))
            totals[pid] = sum(s.value for f in families for s in f.samples if s.name == name)
        return totals


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def served(postgres_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("two-processes")
    port = _free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("PHASEFIT_")}
    env.update({
        "PHASEFIT_DATABASE_URL": postgres_database, "PHASEFIT_INGEST_TOKENS": TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(folder / "metrics"),
    })  # fmt: skip
    log = folder / "service.log"
    command = [str(Path(sys.executable).parent / "phasefit"), "serve", "--workers", "2", "--port", str(port),
               "--no-access-log", "--log-level", "warning"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
    service = Served(process, port, folder / "metrics", postgres_database, log)
    try:
        _wait_until(lambda: _processes(service) == 2, 90, service)
        yield service
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def _processes(service: Served) -> float | None:
    if service.process.poll() is not None:
        raise AssertionError(f"the service exited: {service.log.read_text(errors='replace')}")
    try:
        return service.scrape().get("phasefit_service_processes")
    except httpx.HTTPError:
        return None


def _wait_until(condition: Any, timeout_s: float, service: Served) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, service.log.read_text(errors="replace")
        time.sleep(0.2)


def _batch(seq: int, **changed: Any) -> list[dict[str, Any]]:
    """Four GPUs and two workers over one minute, ``seq`` minutes after START."""
    ts = (START + timedelta(minutes=seq)).isoformat().replace("+00:00", "Z")
    return [gpu(g, ts=ts, **changed) for g in range(4)] + [engine(w, ts=ts) for w in range(2)]


def _post(url: str, records: list[dict[str, Any]]) -> httpx.Response:
    """One request on a connection of its own (so either process may take it), retried on 429/503 as a
    collector does."""
    for _ in range(50):
        answer = httpx.post(
            f"{url}/v1/ingest", content=body(records), timeout=30,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )  # fmt: skip
        if answer.status_code not in (429, 503):
            return answer
        time.sleep(float(answer.headers.get("Retry-After", "1")) / 4)
    raise AssertionError(f"still {answer.status_code} after 50 tries: {answer.text}")


def _stored(service: Served) -> int:
    store = make_engine(service.database_url)
    try:
        with store.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(GpuSampleRow)).scalar_one())
    finally:
        store.dispose()


def test_both_processes_serve_the_port_and_metrics_add_them_up(served: Served) -> None:
    sent, seq = 0, 1000
    with ThreadPoolExecutor(8) as pool:
        for _ in range(40):  # rounds of 8 batches at once, until both processes have taken some
            answers = list(pool.map(lambda s: _post(served.url, _batch(s)), range(seq, seq + 8)))
            assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
            sent, seq = sent + 8 * 6, seq + 8
            if len([n for n in served.per_process(RECORDS).values() if n > 0]) == 2:
                break
    own = served.per_process(RECORDS)
    assert len([n for n in own.values() if n > 0]) == 2, f"one process took every connection: {own}"
    metrics = served.scrape()
    total = metrics[RECORDS + "{kind=gpu_sample}"] + metrics[RECORDS + "{kind=engine_sample}"]
    assert total == sum(own.values()) == sent  # one scrape, every process's counts
    assert metrics["phasefit_service_processes"] == 2
    assert metrics["phasefit_service_ingest_pending_requests"] == 0


def test_the_same_batch_on_both_processes_at_once_is_stored_once(served: Served) -> None:
    """The same batch sent on 8 connections at once, round after round, until a round reached both
    processes: one answer stores it, the seven others find it stored (200, duplicates), the store holds it
    once; a re-send with other values is 409 whichever process takes it."""
    before = _stored(served)
    both, rounds = False, 0
    with ThreadPoolExecutor(8) as pool:
        for seq in range(2000, 2030):
            records = _batch(seq)
            counts = served.per_process(RECORDS)
            answers = [answer.json() for answer in pool.map(_post, [served.url] * 8, [records] * 8)]
            rounds += 1
            assert sum(a["stored"] for a in answers) == len(records), answers
            assert sum(a["duplicates"] for a in answers) == 7 * len(records), answers
            after = served.per_process(RECORDS)
            both = len([pid for pid, n in after.items() if n > counts.get(pid, 0)]) == 2
            if both:
                break
    assert both, "no round reached both processes"
    assert _stored(served) == before + 4 * rounds
    changed = _batch(2000, sm_active=0.9)
    refused = [_post(served.url, changed) for _ in range(4)]
    assert {answer.status_code for answer in refused} == {409}
    assert "is already stored with other values" in refused[0].text
    assert _stored(served) == before + 4 * rounds


def test_a_killed_worker_is_replaced_and_no_counter_goes_back(served: Served) -> None:
    assert _post(served.url, _batch(3000)).status_code == 200
    before = served.scrape()
    workers = [pid for pid in served.per_process(RECORDS) if _alive(pid)]
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    _wait_until(
        lambda: _processes(served) == 2 and len([p for p in served.per_process(RECORDS) if _alive(p)]) == 2,
        60,
        served,
    )
    after = served.scrape()
    for name, value in before.items():
        if name.startswith(RECORDS) or name.startswith("phasefit_service_ingest_stored_records_total"):
            assert after[name] == value, name  # the killed worker's counts stay in the sum
    assert _post(served.url, _batch(3001)).status_code == 200
    assert _post(served.url, _batch(3000)).json()["duplicates"] == 6  # exactly once across the restart


def _alive(pid: int) -> bool:
    from phasefit.service.processes import alive

    return alive(pid)
