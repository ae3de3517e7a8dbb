"""Service ingest benchmark (issue 5): 64 collectors on loopback posting into PostgreSQL, against the direct
`phasefit ingest` path, in one run.

- Service: one `phasefit serve` process (uvicorn, one worker) on 127.0.0.1 with a collector token, into a
  throwaway PostgreSQL database on the machine's server (PHASEFIT_TEST_POSTGRES_URL, else
  postgresql+psycopg://postgres@127.0.0.1:5432/test; the database is created and dropped).
- Load: ``--collectors`` closed-loop collectors (default 64) spread over ``--processes`` client processes,
  each posting gzip'd batches of 8 GPUs x 10 windows plus 2 workers' engine samples (100 records) as fast
  as answers come, honouring 429/503 Retry-After. Batches are built before the clock starts; the client is a
  bare keep-alive HTTP/1.1 writer so it takes as little of the shared CPUs as possible.
- Direct: `phasefit ingest` of the same number of records as one JSONL file into another fresh database.

Prints sustained samples/s (after a warm-up), p50/p99 request latency, the server's CPU use, and the
ratio service/direct. Goal (issue 5): >= 50,000 samples/s with p99 < 250 ms. The load generator, the service
and PostgreSQL share the machine's cores; other work on the machine skews absolute figures.

    .venv/bin/python benchmarks/service_bench.py                  # 30 s, 64 collectors
    .venv/bin/python benchmarks/service_bench.py --seconds 10      # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from service_harness import (
    RawHttp,
    ServiceProcess,
    batch,
    encode,
    free_port,
    migrate,
    percentile,
    store_ledger,
    throwaway_postgres_database,
)

RECORDS_PER_BATCH = 100


def client_process(
    port: int, token: str, collectors: list[int], batches: int, duration: float, ready: Any, go: Any, out: Any
) -> None:
    """One client process: its collectors' batches are built first, then posted for ``duration`` seconds
    once the parent says go (so building bodies never overlaps the measurement)."""
    bodies = {c: [encode(batch(c, s)) for s in range(batches)] for c in collectors}
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
    }
    ready.put(len(collectors))
    go.wait()
    stop_at = time.time() + duration

    async def one(collector: int) -> list[tuple[float, float, int]]:
        client = RawHttp("127.0.0.1", port)
        done: list[tuple[float, float, int]] = []
        seq = 0
        while seq < batches and time.time() < stop_at:
            sent = time.perf_counter()
            try:
                status, answer, _ = await client.request(
                    "POST", "/v1/ingest", bodies[collector][seq], headers
                )
            except OSError:
                await asyncio.sleep(0.5)
                continue
            done.append((time.time(), time.perf_counter() - sent, status))
            if status == 200:
                seq += 1
            elif status in (429, 503):
                await asyncio.sleep(min(float(answer.get("retry-after", "1")), 5.0))
            else:
                raise SystemExit(f"collector {collector}: HTTP {status}")
        client.close()
        return done

    async def run() -> list[tuple[float, float, int]]:
        results = await asyncio.gather(*(one(c) for c in collectors))
        return [item for result in results for item in result]

    out.put(asyncio.run(run()))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu(service_pid: int, client_pids: set[int]) -> dict[str, float]:
    """CPU seconds used so far by the service, PostgreSQL's processes, the load generator and the rest."""
    split = {"service": 0.0, "postgres": 0.0, "clients": 0.0, "other": 0.0}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            used = cpu_seconds(int(entry.name))
            name = (entry / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue
        pid = int(entry.name)
        if pid == service_pid:
            split["service"] += used
        elif pid in client_pids:
            split["clients"] += used
        elif name == "postgres":
            split["postgres"] += used
        else:
            split["other"] += used
    return split


def run_service(args: argparse.Namespace, url: str, workdir: Path) -> dict[str, Any]:
    token = secrets.token_hex(32)
    port = free_port()
    service = ServiceProcess(
        {"PHASEFIT_DATABASE_URL": url, "PHASEFIT_INGEST_TOKENS": token, "PHASEFIT_DEV": "false"},
        port,
        workdir / "service.log",
    )
    service.start()
    assert service.pid is not None
    groups = [list(range(args.collectors))[i :: args.processes] for i in range(args.processes)]
    batches = args.batches_per_collector
    print(
        f"  {args.collectors} collectors in {args.processes} processes; preparing {batches} batches each ..."
    )
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Queue(), context.Event(), context.Queue()
    clients = [
        context.Process(
            target=client_process,
            args=(port, token, group, batches, args.warmup + args.seconds, ready, go, out),
        )
        for group in groups
    ]
    for client in clients:
        client.start()
    for _ in clients:
        ready.get(timeout=600)
    go.set()
    started = time.time()
    time.sleep(args.warmup)
    client_pids = {client.pid for client in clients if client.pid is not None}
    split_before, measured_from = machine_cpu(service.pid, client_pids), time.time()
    time.sleep(max(0.0, started + args.warmup + args.seconds - time.time()))
    split_after, measured_to = machine_cpu(service.pid, client_pids), time.time()
    results = [item for _ in clients for item in out.get(timeout=600)]
    for client in clients:
        client.join(timeout=60)
    service.kill(signal.SIGTERM)
    window = [r for r in results if measured_from <= r[0] < measured_to]
    ok = [r for r in window if r[2] == 200]
    span = measured_to - measured_from
    stored = store_ledger(url)
    return {
        "samples_per_s": len(ok) * RECORDS_PER_BATCH / span,
        "requests_per_s": len(ok) / span,
        "p50_ms": percentile([r[1] for r in ok], 0.50) * 1000,
        "p99_ms": percentile([r[1] for r in ok], 0.99) * 1000,
        "refused": sum(1 for r in window if r[2] != 200),
        "server_cpu_per_s": (split_after["service"] - split_before["service"]) / span,
        "cpu_split": {k: (split_after[k] - split_before[k]) / span for k in split_after},
        "stored": stored.gpu_samples + stored.engine_samples,
        "exhausted": sum(1 for r in results if r[2] == 200) >= args.collectors * batches,
    }


def run_direct(url: str, records: int, workdir: Path) -> float:
    """`phasefit ingest` of ``records`` records from one JSONL file: samples/s as the command reports it."""
    path = workdir / "direct.jsonl"
    per = records // RECORDS_PER_BATCH + 1
    with path.open("wb") as handle:
        for seq in range(per):
            for record in batch(10_000 + seq % 64, seq):
                handle.write(orjson.dumps(record) + b"\n")
    script = Path(sys.executable).parent / "phasefit"
    probe = subprocess.run([str(script), "ingest", "--help"], capture_output=True, check=False)
    command = (
        [str(script), "ingest"]
        if probe.returncode == 0
        else [sys.executable, "-c", "import typer; from phasefit.cli.ingest import ingest; typer.run(ingest)"]
    )
    done = subprocess.run(
        [*command, str(path), "--database-url", url, "--json"], capture_output=True, check=True
    )
    report = orjson.loads(done.stdout)["files"][0]
    return float(report["records"]) / float(report["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="measured duration")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--collectors", type=int, default=64)
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--batches-per-collector", type=int, default=0, help="default: enough for the run")
    parser.add_argument("--direct-records", type=int, default=300_000)
    args = parser.parse_args()
    if args.batches_per_collector <= 0:
        # enough for 100,000 samples/s over the whole run, so no collector runs dry
        args.batches_per_collector = int(1000 * (args.seconds + args.warmup) / args.collectors) + 20
    admin = os.environ.get("PHASEFIT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    with tempfile.TemporaryDirectory(prefix="pf-bench-") as tmp:
        workdir = Path(tmp)
        url, drop = throwaway_postgres_database(admin)
        direct_url, drop_direct = throwaway_postgres_database(admin)
        try:
            migrate(url)
            migrate(direct_url)
            print("service: phasefit serve (1 process) <- collectors over loopback, PostgreSQL store")
            service = run_service(args, url, workdir)
            print("direct: phasefit ingest of one JSONL file, PostgreSQL store")
            direct = run_direct(direct_url, args.direct_records, workdir)
        finally:
            drop()
            drop_direct()
    rate, p99 = service["samples_per_s"], service["p99_ms"]
    print()
    print(
        f"service   {rate:>10,.0f} samples/s  ({service['requests_per_s']:,.0f} requests/s of "
        f"{RECORDS_PER_BATCH} records)  p50 {service['p50_ms']:.1f} ms  p99 {p99:.1f} ms  "
        f"refused {service['refused']}"
    )
    cpu = service["server_cpu_per_s"]
    print(
        f"          server CPU {cpu:.2f} cores = {1000 * cpu / max(service['requests_per_s'], 1e-9):.1f} ms "
        f"per request; {rate / max(cpu, 1e-9):,.0f} samples per server CPU-second"
    )
    split = ", ".join(f"{name} {cores:.2f}" for name, cores in service["cpu_split"].items())
    print(f"          machine CPU in cores (of {os.cpu_count()}): {split}")
    print(f"direct    {direct:>10,.0f} samples/s  (phasefit ingest, one file)")
    print(f"ratio     {rate / direct:.2f} (service / direct)")
    verdict = "met" if rate >= 50_000 and p99 < 250 else "NOT met"
    print(f"goal      >= 50,000 samples/s and p99 < 250 ms: {verdict}")
    if service["exhausted"]:
        print("note: collectors ran out of prepared batches; raise --batches-per-collector")


if __name__ == "__main__":
    main()
