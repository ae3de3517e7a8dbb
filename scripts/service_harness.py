"""Shared by benchmarks/service_bench.py and the service fault checks: deterministic collector batches,
a lean keep-alive HTTP client, the service as a subprocess, a private PostgreSQL instance, and the store's
count and checksum of what it holds.

Batches are a pure function of (collector, sequence number) and the start (``START``: a day before the hour
the first process of a run imported this, passed on to its children in ``PHASEFIT_HARNESS_START``, so the
service's ingest window accepts them): collector ``c`` owns node
``load-node-{c:03d}``, 8 GPUs and 2 workers (TP 4); batch ``s`` holds 10 windows of 1 s. Every sample
carries a value derived from its natural key (``mem_used_bytes`` for GPU samples, ``generation_tokens`` for
engine samples), so the store's count and sum of those values tell missing or doubled samples apart from
a complete store (the primary keys already rule out duplicates within the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
START_ENV = "PHASEFIT_HARNESS_START"


def _start() -> datetime:
    """Where batch timestamps begin: a day before the current hour, so everything a run sends (a batch covers
    10 s, so about 8,600 batches per collector fit before the present) lies inside the window the service
    accepts (PHASEFIT_INGEST_MAX_AGE_S, 14 days by default, to 1 h ahead of its clock). Exported in the
    environment, so client processes started later (spawned, or a second command) build the same batches."""
    given = os.environ.get(START_ENV)
    if given:
        return datetime.fromisoformat(given)
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    os.environ[START_ENV] = start.isoformat()
    return start


START = _start()
GPUS, WINDOWS, WORKERS = 8, 10, 2
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def _key_value(*parts: object, bits: int = 40) -> int:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - bits)


def gpu_uuid(collector: int, gpu: int) -> str:
    return f"GPU-{collector:04x}{gpu:04x}-5d1c-4e2a-9b7f-{collector:06x}{gpu:06x}"


def batch(collector: int, seq: int) -> list[dict[str, Any]]:
    """The records of batch ``seq`` of collector ``collector`` (80 gpu_sample + 20 engine_sample)."""
    node = f"load-node-{collector:03d}"
    records: list[dict[str, Any]] = []
    for window in range(WINDOWS):
        ts = (START + timedelta(seconds=seq * WINDOWS + window + 1)).isoformat().replace("+00:00", "Z")
        for gpu in range(GPUS):
            uuid = gpu_uuid(collector, gpu)
            records.append({
                "kind": "gpu_sample", "ts": ts, "window_s": 1.0, "node": node, "gpu_uuid": uuid,
                "gpu_index": gpu, "gpu_name": H200 if collector % 2 else H100,
                "worker_id": f"{node}/worker-{gpu // 4}", "sm_active": 0.5, "tensor_active": 0.25,
                "dram_active": 0.75, "gpu_util": 1.0,
                # 24 bits: exact as the 4-byte float PostgreSQL keeps a byte count in, so sums compare
                "mem_used_bytes": _key_value(uuid, ts, bits=24),
                "power_w": 500.0, "source": "sim",
            })  # fmt: skip
        for worker in range(WORKERS):
            worker_id = f"{node}/worker-{worker}"
            records.append({
                "kind": "engine_sample", "ts": ts, "window_s": 1.0, "worker_id": worker_id, "node": node,
                "engine": "vllm", "role": "decode" if worker else "prefill", "role_source": "sim",
                "model": MODEL, "tp": 4, "gpu_uuids": [gpu_uuid(collector, 4 * worker + g) for g in range(4)],
                "prompt_tokens": 1000, "generation_tokens": _key_value(worker_id, ts, bits=20),
                "kv_cache_usage": 0.5,
            })  # fmt: skip
    return records


@dataclass(frozen=True)
class Ledger:
    """What a set of batches should leave in the store."""

    gpu_samples: int = 0
    engine_samples: int = 0
    gpu_checksum: int = 0
    engine_checksum: int = 0

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(
            self.gpu_samples + other.gpu_samples, self.engine_samples + other.engine_samples,
            self.gpu_checksum + other.gpu_checksum, self.engine_checksum + other.engine_checksum,
        )  # fmt: skip


def ledger(records: list[dict[str, Any]]) -> Ledger:
    gpu = [r for r in records if r["kind"] == "gpu_sample"]
    engine = [r for r in records if r["kind"] == "engine_sample"]
    return Ledger(
        len(gpu),
        len(engine),
        sum(r["mem_used_bytes"] for r in gpu),
        sum(r["generation_tokens"] for r in engine),
    )


def store_ledger(url: str) -> Ledger:
    """Count and checksum of the load's samples as the store holds them."""
    from sqlalchemy import text

    from fleet.store.engine import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            gpu = connection.execute(text(
                "SELECT count(*), coalesce(sum(mem_used_bytes), 0) FROM gpu_samples "
                "WHERE gpu_uuid LIKE 'GPU-%'"
            )).one()  # fmt: skip
            eng = connection.execute(text(
                "SELECT count(*), coalesce(sum(generation_tokens), 0) FROM engine_samples "
                "WHERE worker_id LIKE 'load-node-%'"
            )).one()  # fmt: skip
    finally:
        engine.dispose()
    return Ledger(int(gpu[0]), int(eng[0]), int(gpu[1]), int(eng[1]))


def encode(records: list[dict[str, Any]], *, compress: bool = True) -> bytes:
    body = orjson.dumps({"records": records})
    return gzip.compress(body, compresslevel=5) if compress else body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RawHttp:
    """One keep-alive HTTP/1.1 connection with just enough protocol for POST/GET and JSON answers
    (a load generator must cost far less CPU than the server it measures; httpx costs about as much)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        try:
            await self.writer.drain()
            status_line = await self.reader.readuntil(b"\r\n")
            answer: dict[str, str] = {}
            while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.decode("latin-1").partition(":")
                answer[name.strip().lower()] = value.strip()
            content = await self.reader.readexactly(int(answer.get("content-length", "0")))
        except (OSError, asyncio.IncompleteReadError):
            self.close()
            raise
        if answer.get("connection", "").lower() == "close":
            self.close()
        return int(status_line.split()[1]), answer, content

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def serve_command(port: int, *extra: str) -> list[str]:
    """``phasefit serve`` once the CLI registers it; until then the same command function through Typer."""
    script = Path(sys.executable).parent / "phasefit"
    probe = subprocess.run([str(script), "serve", "--help"], capture_output=True, check=False)
    if probe.returncode == 0:
        base = [str(script), "serve"]
    else:
        base = [sys.executable, "-c", "import typer; from phasefit.cli.serve import serve; typer.run(serve)"]
    return [
        *base,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
        *extra,
    ]


class ServiceProcess:
    """``phasefit serve`` in a subprocess (its own process group, so a SIGKILL takes its workers too).

    With ``workers`` above 1 it runs ``--workers N`` with the processes' metric files in ``log_path``'s
    folder (``PROMETHEUS_MULTIPROC_DIR``), and :meth:`kill_worker` kills one worker process, which uvicorn's
    supervisor (the parent, :attr:`pid`) replaces."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path, *extra: str, workers: int = 1) -> None:
        self.env, self.port, self.log_path, self.extra = dict(env), port, log_path, extra
        self.workers = workers
        if workers > 1:
            self.extra = (*extra, "--workers", str(workers))
            self.env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(log_path.parent / "service-metrics"))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            serve_command(self.port, *self.extra), env={**os.environ, **self.env}, stdout=log, stderr=log,
            start_new_session=True, cwd=REPO,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the service exited ({self.process.returncode}); see {self.log_path}")
            if self.workers == 1 or len(self.worker_pids()) == self.workers:
                url = f"http://127.0.0.1:{self.port}/healthz"
                with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return
            time.sleep(0.2)
        raise RuntimeError(f"the service did not answer /healthz within {timeout_s} s; see {self.log_path}")

    def kill(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def worker_pids(self) -> list[int]:
        """The live uvicorn worker processes (children of the service spawned by multiprocessing)."""
        if self.process is None or self.workers == 1:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            fields = stat.rpartition(")")[2].split()
            if fields[0] != "Z" and int(fields[1]) == self.process.pid and b"spawn_main" in cmdline:
                found.append(int(entry.name))
        return sorted(found)

    def kill_worker(self, sig: int) -> int:
        """Send ``sig`` to one worker process (the youngest); returns its pid."""
        pids = self.worker_pids()
        if not pids:
            raise RuntimeError(f"no worker process of the service {self.pid} found")
        os.kill(pids[-1], sig)
        return pids[-1]

    def metric(self, name: str) -> float | None:
        """One unlabelled sample of the service's /metrics (every process's, added up), or None."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            sample, _, value = line.partition(" ")
            if sample == name:
                return float(value)
        return None

    def replaced(self, killed: int) -> bool:
        """Whether ``workers`` processes run again without ``killed`` and /metrics counts them all
        (``phasefit_service_processes``)."""
        pids = self.worker_pids()
        if len(pids) != self.workers or killed in pids:
            return False
        return self.metric("phasefit_service_processes") == self.workers


def _as_postgres(argv: list[str]) -> list[str]:
    """Run a PostgreSQL server binary as the postgres user when we are root (initdb refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


class PrivatePostgres:
    """A throwaway PostgreSQL 15 cluster on a free port: never the machine's shared one, which other people
    use. ``stop()``/``start()`` are the outage; ``destroy()`` removes it."""

    BIN = Path("/usr/lib/postgresql/15/bin")

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pf-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        subprocess.run(
            _as_postgres([str(self.BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                          "--no-sync"]), check=True, capture_output=True,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run(
            _as_postgres([str(self.BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                          str(self.dir / "server.log"), "-w", "start"]), check=True, capture_output=True,
        )  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        subprocess.run(
            _as_postgres([str(self.BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
            check=True, capture_output=True,
        )  # fmt: skip

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("fast")
        shutil.rmtree(self.dir, ignore_errors=True)


def migrate(url: str) -> None:
    from fleet.store.engine import make_engine
    from fleet.store.migrate import upgrade

    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    for start in range(n):
        yield items[start::n]


class CollectorFleet:
    """Simulated collectors that use the real collector's durable spool and shipper (collector/spool.py,
    collector/shipper.py): every ``interval_s`` each one spools its next batch, and its shipper thread sends
    the spool to the service, retrying (429/503 Retry-After, backoff on connection errors) until acknowledged.

    ``generated`` is the ledger of everything spooled; ``drained()`` says when every spool is empty."""

    def __init__(self, url: str, token: str, collectors: int, interval_s: float, workdir: Path) -> None:
        import threading

        import httpx

        from collector.shipper import HttpSink, Shipper
        from collector.spool import Spool
        from fleet.clock import SystemClock

        for name in ("collector.shipper", "collector.failures"):  # retries are expected here
            logging.getLogger(name).setLevel(logging.ERROR)
        self.interval_s = interval_s
        self.stop_generating = threading.Event()
        self.stop_shipping = threading.Event()
        self.generated = Ledger()
        self.batches = 0
        self._lock = threading.Lock()
        self.spools = [Spool(workdir / f"spool-{c}.sqlite", 1 << 30, fsync=False) for c in range(collectors)]
        self.client = httpx.Client(timeout=10.0, limits=httpx.Limits(max_connections=collectors + 8))
        clock = SystemClock()
        self.shippers = [
            Shipper(
                spool, HttpSink(self.client, url, token, clock), clock,
                backoff_min_s=0.2, backoff_max_s=2.0, batch_max_records=1000, idle_s=0.2,
            )
            for spool in self.spools
        ]  # fmt: skip
        self.threads = [
            threading.Thread(target=s.run, args=(self.stop_shipping,), daemon=True) for s in self.shippers
        ]
        self.threads += [
            threading.Thread(target=self._generate, args=(c,), daemon=True) for c in range(collectors)
        ]

    def _generate(self, collector: int) -> None:
        seq = 0
        next_at = time.monotonic()
        while not self.stop_generating.is_set():
            records = batch(collector, seq)
            self.spools[collector].append([orjson.dumps(r) for r in records])
            with self._lock:
                self.generated = self.generated + ledger(records)
                self.batches += 1
            seq += 1
            next_at += self.interval_s
            self.stop_generating.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def spooled(self) -> int:
        return sum(spool.count() for spool in self.spools)

    def dropped(self) -> int:
        return sum(sum(spool.dropped().values()) for spool in self.spools)

    def wait_for_backlog(self, timeout_s: float) -> float | None:
        """Seconds until the spools hold no more than one batch per collector (a backlog shipped), or None."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.spooled() <= len(self.spools) * 100:
                return time.monotonic() - started
            time.sleep(0.1)
        return None

    def drain(self, timeout_s: float) -> float | None:
        """Stop generating; seconds until every spool was empty, or None past ``timeout_s``."""
        self.stop_generating.set()
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.spooled() == 0:
                return time.monotonic() - started
            time.sleep(0.2)
        return None

    def close(self) -> None:
        self.stop_generating.set()
        self.stop_shipping.set()
        for thread in self.threads:
            thread.join(timeout=15)
        for spool in self.spools:
            spool.close()
        self.client.close()


def throwaway_postgres_database(admin_url: str) -> tuple[str, Any]:
    """A fresh database on ``admin_url``'s server, and the function that drops it."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    name = f"pf_fault_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), drop
