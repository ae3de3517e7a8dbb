"""Ingest benchmark (issue 2): `phasefit ingest` against the raw baseline, SQLite and PostgreSQL, one run.

Generates N gpu_sample records for G GPUs (default 1,000,000 and 1,024) as JSONL, then times:

- ours: `phasefit ingest FILE --database-url URL` as a subprocess (so time and memory are the CLI's), into
  a store already at the head revision;
- raw SQLite: Python's sqlite3 `executemany` of the same rows as plain, pre-built tuples, in one
  transaction, into the same schema (what the store can do at best, with no parsing or validation);
- raw PostgreSQL: `psql -c "\\copy raw_gpu_samples ... FROM file.csv"` of the same rows into the same schema.

The raw baselines load the rows as the store keeps them (``raw_gpu_samples``: integer GPU and worker keys,
enumeration codes), with the keys registered beforehand, untimed: they do no work ours does not.

It prints samples/s, the ratio ours/raw per store and the CLI's peak RSS (its own, and the peak of the
sum over it and its parsing processes, polled every 50 ms). Goal: ratio >= 0.5 on both stores, peak RSS
< 1 GB. Other load on the machine skews the figures: compare ratios, not absolute rates, and note the
load average printed first. `phasefit ingest` picks its parsing processes from the idle CPUs (--jobs).

    .venv/bin/python benchmarks/ingest_bench.py --records 100000      # a quick look
    .venv/bin/python benchmarks/ingest_bench.py                       # the issue's million
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from fleet.store.columns import to_epoch_us
from fleet.store.engine import make_engine
from fleet.store.lean import RAW_GPU_COLUMNS, lean_gpu_rows
from fleet.store.migrate import upgrade
from fleet.store.partitions import ensure_partitions
from fleet.store.rows import GPU_SAMPLE_COLUMNS

START = datetime(2026, 1, 5, tzinfo=UTC)
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@dataclass
class Run:
    store: str
    path: str
    records: int
    seconds: float
    rss_mb: float | None = None
    tree_rss_mb: float | None = None


def sample(i: int, gpus: int, rng: random.Random) -> dict[str, Any]:
    window, gpu = divmod(i, gpus)
    h200 = gpu % 2 == 1
    return {
        "kind": "gpu_sample", "ts": START + timedelta(seconds=60 * window), "window_s": 60.0,
        "node": f"node-{gpu // 8:04d}", "gpu_uuid": f"GPU-{gpu:08x}-5d1c-4e2a-9b7f-{gpu:012x}",
        "gpu_index": gpu % 8, "gpu_name": H200 if h200 else H100, "worker_id": f"worker-{gpu // 2:04d}",
        "sm_active": round(rng.random(), 4), "tensor_active": round(rng.random(), 4),
        "dram_active": round(rng.random(), 4), "gpu_util": round(rng.random(), 4),
        "mem_used_bytes": rng.randrange(80 * 2**30), "power_w": round(rng.uniform(100, 700), 1),
        "sm_clock_mhz": 1980.0, "nvlink_tx_bytes": rng.randrange(10**12),
        "nvlink_rx_bytes": rng.randrange(10**12), "pcie_tx_bytes": rng.randrange(10**10),
        "pcie_rx_bytes": rng.randrange(10**10), "state": "ok",
        "source": "sim", "parent_gpu_uuid": None, "mig_profile": None,
    }  # fmt: skip


def samples(records: int, gpus: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(20260105)
    for i in range(records):
        yield sample(i, gpus, rng)


def gpu_keys(gpus: int) -> dict[str, int]:
    """The keys the raw baselines register for the GPUs (ours assigns its own)."""
    return {f"GPU-{gpu:08x}-5d1c-4e2a-9b7f-{gpu:012x}": gpu + 1 for gpu in range(gpus)}


def worker_keys(gpus: int) -> dict[str, int]:
    return {f"worker-{worker:04d}": worker + 1 for worker in range(gpus // 2 + 1)}


def raw_rows(records: int, gpus: int, *, epoch_us: bool) -> list[tuple[Any, ...]]:
    """The generated records as ``raw_gpu_samples`` rows (what ours stores for them)."""
    evidence = {"activity_evidence": "profiling"}  # what the store derives: sm/tensor/dram are set
    rows: list[tuple[Any, ...]] = [
        tuple({**evidence, **r}.get(c) for c in GPU_SAMPLE_COLUMNS) for r in samples(records, gpus)
    ]
    if epoch_us:
        rows = [(row[0], to_epoch_us(row[1]), *row[2:]) for row in rows]
    return lean_gpu_rows(rows, gpu_keys(gpus), worker_keys(gpus))


def register_keys(url: str, gpus: int) -> None:
    """The raw baselines' keys, stored before their (timed) load."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for table, column, keys in (
                ("gpu_keys", "gpu_uuid", gpu_keys(gpus)),
                ("worker_keys", "worker_id", worker_keys(gpus)),
            ):
                connection.execute(
                    text(f"INSERT INTO {table} (id, {column}) VALUES (:id, :name)"),
                    [{"id": key, "name": name} for name, key in keys.items()],
                )
    finally:
        engine.dispose()


def generate(path: Path, csv_path: Path, records: int, gpus: int) -> None:
    with path.open("wb") as jsonl:
        for record in samples(records, gpus):
            jsonl.write(orjson.dumps(record) + b"\n")
    with csv_path.open("w", newline="") as raw_csv:
        csv.writer(raw_csv).writerows(
            ("" if value is None else value for value in row)
            for row in raw_rows(records, gpus, epoch_us=False)
        )


def status_kb(pid: int, field: str) -> int:
    """A memory figure from /proc/PID/status (VmRSS: now, VmHWM: peak since the process started)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def ingest_command() -> list[str]:
    """`phasefit ingest` once the CLI registers it; until then the same command function through Typer."""
    script = Path(sys.executable).parent / "phasefit"
    probe = subprocess.run([str(script), "ingest", "--help"], capture_output=True, check=False)
    if probe.returncode == 0:
        return [str(script), "ingest"]
    return [sys.executable, "-c", "import typer; from phasefit.cli.ingest import ingest; typer.run(ingest)"]


def run_ours(store: str, url: str, path: Path, records: int, jobs: int | None) -> Run:
    command = [*ingest_command(), str(path), "--database-url", url]
    if jobs is not None:
        command += ["--jobs", str(jobs)]
    peak_main = peak_tree = 0
    started = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def watch() -> None:
        # Polled from /proc, not taken from wait4's ru_maxrss: a forked child inherits the parent's
        # high-water mark, so ru_maxrss would report this benchmark's own memory.
        nonlocal peak_main, peak_tree
        while not stop.wait(0.05):
            peak_main = max(peak_main, status_kb(process.pid, "VmHWM"))
            peak_tree = max(peak_tree, sum(status_kb(pid, "VmRSS") for pid in descendants(process.pid)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, _usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    stop.set()
    watcher.join()
    stderr = process.stderr.read() if process.stderr else ""
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"phasefit ingest failed ({process.returncode}):\n{stderr}")
    print(f"  {stderr.strip()}")
    return Run(store, "phasefit ingest", records, seconds, peak_main / 1024, peak_tree / 1024)


def run_raw_sqlite(db: Path, records: int, gpus: int) -> Run:
    register_keys(f"sqlite:///{db}", gpus)
    rows = raw_rows(records, gpus, epoch_us=True)
    connection = sqlite3.connect(db, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    placeholders = ", ".join("?" * len(RAW_GPU_COLUMNS))
    started = time.perf_counter()
    connection.execute("BEGIN")
    connection.executemany(
        f"INSERT INTO raw_gpu_samples ({', '.join(RAW_GPU_COLUMNS)}) VALUES ({placeholders})", rows
    )
    connection.execute("COMMIT")
    seconds = time.perf_counter() - started
    connection.close()
    return Run("sqlite", "raw sqlite3 executemany", records, seconds)


def run_raw_postgres(url: str, csv_path: Path, records: int, gpus: int) -> Run:
    register_keys(url, gpus)
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    copy = f"\\copy raw_gpu_samples ({', '.join(RAW_GPU_COLUMNS)}) FROM '{csv_path}' WITH (FORMAT csv)"
    started = time.perf_counter()
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", libpq, "-c", copy], check=True)
    return Run("postgresql", "raw psql \\copy", records, time.perf_counter() - started)


def count(url: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT count(*) FROM gpu_samples")).scalar_one())
    finally:
        engine.dispose()


def fresh_store(url: str, days: int = 0) -> str:
    """A store at the head revision, with day partitions (PostgreSQL) for the records' ``days``."""
    engine = make_engine(url)
    upgrade(engine)
    ensure_partitions(engine, START, days_ahead=days)
    engine.dispose()
    return url


def report(runs: list[Run]) -> None:
    raw = {run.store: run for run in runs if run.path != "phasefit ingest"}
    print(f"\n{'store':<11} {'path':<26} {'records':>10} {'seconds':>8} {'samples/s':>10} {'ours/raw':>8} "
          f"{'RSS MB':>7} {'tree RSS MB':>11}")  # fmt: skip
    for run in runs:
        rate = run.records / run.seconds
        ratio = ""
        if run.path == "phasefit ingest" and run.store in raw:
            ratio = f"{raw[run.store].seconds / run.seconds:.2f}"
        rss = f"{run.rss_mb:.0f}" if run.rss_mb is not None else ""
        tree = f"{run.tree_rss_mb:.0f}" if run.tree_rss_mb is not None else ""
        print(f"{run.store:<11} {run.path:<26} {run.records:>10,} {run.seconds:>8.2f} {rate:>10,.0f} "
              f"{ratio:>8} {rss:>7} {tree:>11}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=None, help="passed to phasefit ingest --jobs")
    parser.add_argument("--postgres-url", default=os.environ.get(
        "PHASEFIT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))  # fmt: skip
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="where the files go (default: a temp dir)")
    args = parser.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="phasefit-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    jsonl, csv_path = workdir / "gpu_samples.jsonl", workdir / "gpu_samples.csv"
    load = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; files in {workdir}"
    )
    started = time.perf_counter()
    generate(jsonl, csv_path, args.records, args.gpus)
    size_mb = jsonl.stat().st_size / 1e6
    print(f"generated {args.records:,} gpu_samples ({args.gpus:,} GPUs, {size_mb:,.0f} MB) in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    runs: list[Run] = []
    try:
        ours_db, raw_db = workdir / "ours.db", workdir / "raw.db"
        for db in (ours_db, raw_db):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            fresh_store(f"sqlite:///{db}")
        print("sqlite: phasefit ingest ...")
        runs.append(run_ours("sqlite", f"sqlite:///{ours_db}", jsonl, args.records, args.jobs))
        print("sqlite: raw executemany ...")
        runs.append(run_raw_sqlite(raw_db, args.records, args.gpus))
        for db in (ours_db, raw_db):
            assert count(f"sqlite:///{db}") == args.records, f"{db} does not hold every record"
        if not args.skip_postgres:
            runs += bench_postgres(args.postgres_url, jsonl, csv_path, args.records, args.gpus, args.jobs)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(runs)


def bench_postgres(
    admin_url: str, jsonl: Path, csv_path: Path, records: int, gpus: int, jobs: int | None
) -> list[Run]:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    names = [f"pf_bench_{uuid.uuid4().hex[:8]}_{kind}" for kind in ("ours", "raw")]
    urls = [make_url(admin_url).set(database=name).render_as_string(hide_password=False) for name in names]
    try:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        days = (records // gpus * 60) // 86_400 + 1  # 60-s windows
        for url in urls:
            fresh_store(url, days)
        print("postgresql: phasefit ingest ...")
        ours = run_ours("postgresql", urls[0], jsonl, records, jobs)
        print("postgresql: raw psql \\copy ...")
        raw = run_raw_postgres(urls[1], csv_path, records, gpus)
        for url in urls:
            assert count(url) == records, f"{url} does not hold every record"
        return [ours, raw]
    finally:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
