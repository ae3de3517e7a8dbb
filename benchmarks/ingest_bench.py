"""Ingest benchmark (issues 2 and 31): `phasefit ingest` against two baselines, SQLite and PostgreSQL.

Generates N gpu_sample records for G GPUs (default 1,000,000 and 1,024) as JSONL, then times, each into a
fresh store at the head revision (a new SQLite file, a new PostgreSQL database per run):

- ours: `phasefit ingest FILE --database-url URL` as a subprocess (so time and memory are the CLI's,
  start-up included), with its parsing processes (``--jobs``, default :func:`fleet.ingest.default_jobs`);
- parse-copy (issue 31): ``benchmarks/parse_copy_loader.py``, a minimal loader, as a subprocess timed the
  same way (start-up included): it reads the same JSONL file, decodes each line with msgspec into a struct
  of only the stored fields, maps names to the registered integer keys and codes, converts the timestamp,
  and loads the rows with no validation and no dedup (PostgreSQL: one binary ``COPY`` through psycopg;
  SQLite: one ``executemany`` in one transaction). It gets the same number of parsing processes as ours
  (``parse-copy``: the goal's baseline, the same resources as ours) and, when that is not already none, runs
  once more parsing in its only process (``parse-copy 1p``: on a busy 2-core machine handing blocks to
  processes and rows back can cost more than it saves, so this one is shown too and may be the faster);
- raw: rows that need no parsing at all. SQLite: Python's sqlite3 ``executemany`` of pre-built tuples in
  one transaction, timed in this process; PostgreSQL: ``psql -c "\\copy raw_gpu_samples ... FROM
  file.csv"`` of a pre-built CSV, timed as a subprocess.

Why parse-copy is the fair baseline: the raw loads parse nothing, yet on 2 cores tokenising the JSON alone
costs about as much as the raw COPY, so ours/raw mostly measures JSON decoding. parse-copy does the work
ours cannot skip (read, decode, key and code lookups, timestamps, the same lean rows into the same table,
in as many processes) and none that ours adds (strict validation against the contract, dedup, repeated-key
checks, the gpus/workers/nodes dimension tables, schema checks): ours/parse-copy is the price of those.
Every baseline loads the rows as the store keeps them (``raw_gpu_samples``: integer GPU and worker keys,
enumeration codes), with the keys registered beforehand, untimed; a test checks that each baseline loads
exactly the rows ours stores (``tests/benchmarks/test_ingest_bench.py``).

``--repeat K`` runs each measurement K times, alternating (ours, parse-copy, parse-copy 1p, raw, ours, ...;
``--baseline raw|parse-copy|both`` picks them), prints every run, then per store the median samples/s of
each and the ratios ours/baseline as the median and range of the run-by-run ratios (run i of ours against
run i of the baseline). Goals: ours/parse-copy >= 0.8 on each store (issue 31); ours/raw >= 0.5 (issue 2);
ours' peak RSS < 1 GB (its own, and the sum over it and its parsing processes, polled every 50 ms). Other
load on the machine skews the figures: compare ratios, not absolute rates, and note the load averages
printed at the start and the end.

The project's packages are byte-compiled first (``compileall``, as ``pip install`` does): where
``PYTHONDONTWRITEBYTECODE`` is set (these machines set it) nothing would cache them, and every run of ours
would compile its ~50 modules again (about 0.1 s of a one-record ingest's 0.55-0.7 s, 2026-12-07, which an
installed phasefit never spends), where the loader compiles almost nothing.

    .venv/bin/python benchmarks/ingest_bench.py --records 100000      # a quick look
    .venv/bin/python benchmarks/ingest_bench.py --records 200000 --repeat 3
    .venv/bin/python benchmarks/ingest_bench.py                       # the issue's million
"""

from __future__ import annotations

import argparse
import compileall
import csv
import functools
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from fleet.ingest import default_jobs
from fleet.store.columns import to_epoch_us
from fleet.store.engine import make_engine
from fleet.store.lean import RAW_GPU_COLUMNS, lean_gpu_rows
from fleet.store.migrate import upgrade
from fleet.store.partitions import ensure_partitions
from fleet.store.rows import GPU_SAMPLE_COLUMNS

START = datetime(2026, 1, 5, tzinfo=UTC)
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
OURS, PARSE_COPY, PARSE_COPY_1, RAW = "phasefit ingest", "parse-copy", "parse-copy 1p", "raw"
BASELINES = (PARSE_COPY, PARSE_COPY_1, RAW)
LOADER = Path(__file__).with_name("parse_copy_loader.py")


@dataclass
class Run:
    store: str
    path: str  # OURS or one of BASELINES
    records: int
    seconds: float
    rss_mb: float | None = None
    tree_rss_mb: float | None = None
    # CPU seconds of the process and the processes it waited for (its parsing processes), from wait4; not
    # the PostgreSQL server's. On 2 shared cores this, more than the wall time, is what the work costs.
    cpu_s: float | None = None


@dataclass(frozen=True)
class Inputs:
    """What every run loads: the JSONL file, the same records as a CSV (raw PostgreSQL), and the options."""

    jsonl: Path
    csv: Path
    records: int
    gpus: int
    jobs: int | None  # ours' --jobs (None: its default); the loader gets the same count
    copy_format: str = "binary"
    block_bytes: int | None = None  # the loader's read blocks (None: the size ours reads)

    @property
    def loader_jobs(self) -> int:
        return default_jobs() if self.jobs is None else self.jobs


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
    """The baselines' keys, stored before their (timed) load."""
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


@functools.cache
def ingest_command() -> tuple[str, ...]:
    """`phasefit ingest` once the CLI registers it; until then the same command function through Typer."""
    script = Path(sys.executable).parent / "phasefit"
    probe = subprocess.run([str(script), "ingest", "--help"], capture_output=True, check=False)
    if probe.returncode == 0:
        return (str(script), "ingest")
    return (sys.executable, "-c", "import typer; from phasefit.cli.ingest import ingest; typer.run(ingest)")


def timed(command: list[str], store: str, path: str, records: int) -> Run:
    """Run ``command`` from start to exit, with its peak RSS (its own, and summed over its processes)."""
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
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    stop.set()
    watcher.join()
    stderr = process.stderr.read() if process.stderr else ""
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{path} failed ({process.returncode}):\n{stderr}")
    cpu = usage.ru_utime + usage.ru_stime
    return Run(store, path, records, seconds, peak_main / 1024, peak_tree / 1024, cpu)


def run_ours(store: str, url: str, inputs: Inputs) -> Run:
    command = [*ingest_command(), str(inputs.jsonl), "--database-url", url]
    if inputs.jobs is not None:
        command += ["--jobs", str(inputs.jobs)]
    return timed(command, store, OURS, inputs.records)


def parse_copy_command(url: str, inputs: Inputs, jobs: int) -> list[str]:
    command = [
        sys.executable, str(LOADER), str(inputs.jsonl), "--database-url", url,
        "--jobs", str(jobs), "--copy-format", inputs.copy_format,
    ]  # fmt: skip
    if inputs.block_bytes is not None:
        command += ["--block-bytes", str(inputs.block_bytes)]
    return command


def run_parse_copy(store: str, url: str, inputs: Inputs, *, one_process: bool = False) -> Run:
    """The loader with as many parsing processes as ours, or (``one_process``) parsing in its only one."""
    register_keys(url, inputs.gpus)
    command = parse_copy_command(url, inputs, 0 if one_process else inputs.loader_jobs)
    return timed(command, store, PARSE_COPY_1 if one_process else PARSE_COPY, inputs.records)


@functools.lru_cache(maxsize=1)
def sqlite_raw_rows(records: int, gpus: int) -> list[tuple[Any, ...]]:
    return raw_rows(records, gpus, epoch_us=True)


def run_raw_sqlite(url: str, inputs: Inputs) -> Run:
    register_keys(url, inputs.gpus)
    rows = sqlite_raw_rows(inputs.records, inputs.gpus)
    connection = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
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
    return Run("sqlite", RAW, inputs.records, seconds)


def run_raw_postgres(url: str, inputs: Inputs) -> Run:
    register_keys(url, inputs.gpus)
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    copy = f"\\copy raw_gpu_samples ({', '.join(RAW_GPU_COLUMNS)}) FROM '{inputs.csv}' WITH (FORMAT csv)"
    started = time.perf_counter()
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", libpq, "-c", copy], check=True)
    return Run("postgresql", RAW, inputs.records, time.perf_counter() - started)


def run_path(path: str, store: str, url: str, inputs: Inputs) -> Run:
    """One timed load of ``inputs`` by ``path`` (OURS or a baseline) into the fresh store at ``url``."""
    if path == OURS:
        return run_ours(store, url, inputs)
    if path in (PARSE_COPY, PARSE_COPY_1):
        return run_parse_copy(store, url, inputs, one_process=path == PARSE_COPY_1)
    return run_raw_sqlite(url, inputs) if store == "sqlite" else run_raw_postgres(url, inputs)


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


@contextmanager
def sqlite_store(workdir: Path) -> Iterator[str]:
    """A new SQLite store at the head revision, deleted afterwards."""
    db = workdir / f"store-{uuid.uuid4().hex[:8]}.db"
    try:
        yield fresh_store(f"sqlite:///{db}")
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)


@contextmanager
def postgres_store(admin_url: str, records: int, gpus: int) -> Iterator[str]:
    """A new PostgreSQL database at the head revision, partitioned for the records' days; dropped after."""
    name = f"pf_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        yield fresh_store(url, (records // gpus * 60) // 86_400 + 1)  # 60-s windows
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def measure(store: str, paths: list[str], inputs: Inputs, repeat: int, where: str | Path) -> list[Run]:
    """``repeat`` rounds of one run per path, alternating, each into a fresh store (``where``: the SQLite
    work dir, or PostgreSQL's admin URL)."""
    runs = []
    for round_ in range(1, repeat + 1):
        for path in paths:
            fresh = (
                sqlite_store(Path(where))
                if store == "sqlite"
                else postgres_store(str(where), inputs.records, inputs.gpus)
            )
            with fresh as url:
                run = run_path(path, store, url, inputs)
                assert count(url) == inputs.records, f"{store} {path}: not every record is stored"
            print_run(run, round_)
            runs.append(run)
    return runs


def print_load(when: str) -> None:
    load = os.getloadavg()
    print(f"{when}: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def print_run(run: Run, round_: int) -> None:
    rss = f"{run.rss_mb:.0f}" if run.rss_mb is not None else ""
    tree = f"{run.tree_rss_mb:.0f}" if run.tree_rss_mb is not None else ""
    cpu = f"{run.cpu_s:.2f} s" if run.cpu_s is not None else ""
    rate = run.records / run.seconds
    print(f"  {run.store:<11} {round_:>3} {run.path:<16} {run.seconds:>8.2f} s {rate:>10,.0f} samples/s"
          f"   CPU {cpu:>7}   RSS {rss:>4} MB, tree {tree:>4} MB", flush=True)  # fmt: skip


def ratios(runs: list[Run], baseline: str) -> str:
    """ours/baseline (samples/s over samples/s) run by run: median (min..max)."""
    ours = [run.seconds for run in runs if run.path == OURS]
    other = [run.seconds for run in runs if run.path == baseline]
    if not other:
        return ""
    pairs = [theirs / mine for mine, theirs in zip(ours, other, strict=True)]
    return f"{statistics.median(pairs):.2f} ({min(pairs):.2f}..{max(pairs):.2f})"


def median_rate(runs: list[Run], path: str) -> str:
    rates = [run.records / run.seconds for run in runs if run.path == path]
    return f"{statistics.median(rates):,.0f}" if rates else ""


def median_cpu(runs: list[Run], path: str) -> str:
    seconds = [run.cpu_s for run in runs if run.path == path and run.cpu_s is not None]
    return f"{statistics.median(seconds):.2f} s" if seconds else ""


def report(runs: list[Run]) -> None:
    stores = list(dict.fromkeys(run.store for run in runs))
    print("\nmedian samples/s over the runs")
    print(f"{'store':<11} {OURS:>16}" + "".join(f" {path:>14}" for path in BASELINES))
    for store in stores:
        of_store = [run for run in runs if run.store == store]
        print(f"{store:<11} {median_rate(of_store, OURS):>16}"
              + "".join(f" {median_rate(of_store, path):>14}" for path in BASELINES))  # fmt: skip
    print(
        "\nmedian CPU time over the runs (the process and its parsing processes; not the database server's)"
    )
    print(f"{'store':<11} {OURS:>16}" + "".join(f" {path:>14}" for path in BASELINES[:2]))
    for store in stores:
        of_store = [run for run in runs if run.store == store]
        print(f"{store:<11} {median_cpu(of_store, OURS):>16}"
              + "".join(f" {median_cpu(of_store, path):>14}" for path in BASELINES[:2]))  # fmt: skip
    print(
        "\nours/baseline (samples/s over samples/s), run i against run i: median (min..max); ours' peak RSS"
    )
    print(f"{'store':<11}" + "".join(f" {'ours/' + path:>22}" for path in BASELINES)
          + f" {'RSS MB':>7} {'tree RSS MB':>11}")  # fmt: skip
    for store in stores:
        of_store = [run for run in runs if run.store == store]
        rss = max(run.rss_mb or 0 for run in of_store if run.path == OURS)
        tree = max(run.tree_rss_mb or 0 for run in of_store if run.path == OURS)
        print(f"{store:<11}" + "".join(f" {ratios(of_store, path):>22}" for path in BASELINES)
              + f" {rss:>7.0f} {tree:>11.0f}")  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=None,
                        help="phasefit ingest --jobs, and the parse-copy loader's processes (default: "
                        "ingest's default)")  # fmt: skip
    parser.add_argument("--baseline", choices=("raw", "parse-copy", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, alternating")
    parser.add_argument("--copy-format", choices=("binary", "text"), default="binary",
                        help="the parse-copy loader's COPY format on PostgreSQL")  # fmt: skip
    parser.add_argument("--postgres-url", default=os.environ.get(
        "PHASEFIT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))  # fmt: skip
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="where the files go (default: a temp dir)")
    return parser.parse_args()


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("phasefit", "fleet", "migrations")  # what `phasefit ingest` and the loader import of ours


def compile_packages() -> None:
    """Byte-compile the packages as an install does (see the module's docstring); cached files are kept."""
    if not all(compileall.compile_dir(ROOT / name, quiet=1) for name in PACKAGES):
        raise SystemExit("byte-compiling the packages failed")


def main() -> None:
    args = parse_args()
    compile_packages()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="phasefit-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print_load("start")
    inputs = Inputs(workdir / "gpu_samples.jsonl", workdir / "gpu_samples.csv", args.records, args.gpus,
                    args.jobs, args.copy_format)  # fmt: skip
    started = time.perf_counter()
    generate(inputs.jsonl, inputs.csv, args.records, args.gpus)
    size_mb = inputs.jsonl.stat().st_size / 1e6
    print(f"generated {args.records:,} gpu_samples ({args.gpus:,} GPUs, {size_mb:,.0f} MB) in "
          f"{time.perf_counter() - started:.1f} s; files in {workdir}")  # fmt: skip
    jobs = "its default" if args.jobs is None else str(args.jobs)
    print(f"parsing processes: ours --jobs {jobs}, parse-copy {inputs.loader_jobs}, parse-copy 1p 0 (in its "
          f"main process); COPY format {args.copy_format}; {args.repeat} round(s), alternating")  # fmt: skip
    parse_copy = [PARSE_COPY, PARSE_COPY_1] if inputs.loader_jobs > 0 else [PARSE_COPY]
    paths = [OURS, *{"raw": [RAW], "parse-copy": parse_copy, "both": [*parse_copy, RAW]}[args.baseline]]
    runs: list[Run] = []
    try:
        runs += measure("sqlite", paths, inputs, args.repeat, workdir)
        if not args.skip_postgres:
            runs += measure("postgresql", paths, inputs, args.repeat, args.postgres_url)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report(runs)
    print_load("end")


if __name__ == "__main__":
    main()
