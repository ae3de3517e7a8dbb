"""Fault check (issue 5; reliability.md §7 D1): SIGKILL the service mid-ingest while collectors ship, restart
it, and check the store holds every sample exactly once. With ``--workers N`` (issue 19) the service runs N
processes on one port and each kill takes ONE worker process, not the parent.

- Store: a throwaway database on PostgreSQL (PHASEFIT_TEST_POSTGRES_URL, else the machine's server at
  127.0.0.1:5432) or, with ``--store sqlite``, an SQLite file.
- Service: `phasefit serve` with a collector token: one process, or ``--workers N`` processes behind one
  port (PostgreSQL only).
- Collectors: ``--collectors`` simulated collectors, each with the real collector's durable spool and
  shipper (collector/spool.py, collector/shipper.py), spooling a batch of 8 GPUs x 10 windows plus 2 workers'
  engine samples every ``--interval`` seconds; the shipper retries until the service acknowledges.
- Faults: ``--kills`` times, after ``--up`` seconds of shipping, SIGKILL the service's process group (no
  shutdown, requests in flight cut off, transactions in flight rolled back by the store) and restart it
  after ``--down`` seconds. With ``--workers`` above 1: SIGKILL one worker process instead; its
  connections are cut, the other workers go on serving, uvicorn's supervisor starts a replacement
  (``--down`` is not used), and the script reports when /metrics counts every process again.
- Then: stop generating, wait until every spool is empty, and compare the store with what the collectors
  generated: count and checksum of gpu and engine samples (each sample carries a value derived from its
  key, see service_harness). Exit status 0 only when they match exactly and nothing was dropped.

    .venv/bin/python scripts/fault_kill_ingest.py                       # 64 collectors, 3 kills
    .venv/bin/python scripts/fault_kill_ingest.py --down 60 --kills 1   # reliability.md D1
    .venv/bin/python scripts/fault_kill_ingest.py --workers 2           # kill one of two processes
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_harness import (
    CollectorFleet,
    ServiceProcess,
    free_port,
    migrate,
    store_ledger,
    throwaway_postgres_database,
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--collectors", type=int, default=64)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between a collector's batches")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--up", type=float, default=8.0, help="seconds of shipping before each kill")
    parser.add_argument("--down", type=float, default=10.0, help="seconds the service stays dead")
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--workers", type=int, default=1, help="service processes (phasefit serve --workers)")
    args = parser.parse_args()
    if args.workers > 1 and args.store == "sqlite":
        parser.error("--workers above 1 needs --store postgresql")

    with tempfile.TemporaryDirectory(prefix="pf-fault-kill-") as tmp:
        workdir = Path(tmp)
        if args.store == "postgresql":
            admin = os.environ.get(
                "PHASEFIT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
            )
            url, drop = throwaway_postgres_database(admin)
        else:
            url, drop = f"sqlite:///{workdir / 'store.db'}", lambda: None
        try:
            return run(args, url, workdir)
        finally:
            drop()


def run(args: argparse.Namespace, url: str, workdir: Path) -> int:
    migrate(url)
    token = secrets.token_hex(32)
    port = free_port()
    service = ServiceProcess({"PHASEFIT_DATABASE_URL": url, "PHASEFIT_INGEST_TOKENS": token}, port,
                             workdir / "service.log", workers=args.workers)  # fmt: skip
    service.start()
    fleet = CollectorFleet(
        f"http://127.0.0.1:{port}", token, args.collectors, args.interval, workdir / "spools"
    )
    rate = args.collectors * 100 / args.interval
    processes = f"{args.workers} service processes" if args.workers > 1 else "one service process"
    print(f"{args.collectors} collectors, {rate:,.0f} samples/s generated, into {args.store}, {processes}")
    fleet.start()
    replaced_all = True
    try:
        for kill in range(1, args.kills + 1):
            time.sleep(args.up)
            if args.workers > 1:
                replaced_all &= kill_one_worker(service, fleet, kill, args.drain_timeout)
            else:
                kill_the_service(service, fleet, kill, args.down, args.drain_timeout)
        time.sleep(args.up)
        drained = fleet.drain(args.drain_timeout)
        dropped = fleet.dropped()
        counted = service.metric("phasefit_service_ingest_stored_records_total")
    finally:
        fleet.close()
        service.kill(signal.SIGTERM)
    generated, stored = fleet.generated, store_ledger(url)
    print(
        f"drained in {drained:.1f} s after the last batch" if drained is not None else "spools did NOT drain"
    )
    print(f"generated: {generated.gpu_samples:,} gpu + {generated.engine_samples:,} engine samples")
    print(f"stored:    {stored.gpu_samples:,} gpu + {stored.engine_samples:,} engine samples")
    print(f"checksums: gpu {'match' if stored.gpu_checksum == generated.gpu_checksum else 'DIFFER'}, "
          f"engine {'match' if stored.engine_checksum == generated.engine_checksum else 'DIFFER'}; "
          f"dropped by spools: {dropped}")  # fmt: skip
    if args.workers > 1 and counted is not None:
        total = stored.gpu_samples + stored.engine_samples
        rest = "" if counted == total else " (the rest: committed by a worker killed before it counted them)"
        print(f"/metrics of all processes, the killed ones too: {counted:,.0f} records stored; the store "
              f"holds {total:,}{rest}")  # fmt: skip
    exact = stored == generated and dropped == 0 and drained is not None
    ok = exact and replaced_all
    failed = "RESULT: FAILED (lost or doubled samples, or a worker not replaced)"
    print("RESULT: every sample stored exactly once" if ok else failed)
    return 0 if ok else 1


def kill_the_service(
    service: ServiceProcess, fleet: CollectorFleet, kill: int, down_s: float, timeout_s: float
) -> None:
    """SIGKILL the whole service (parent and workers), restart it after ``down_s``."""
    before = fleet.spooled()
    service.kill(signal.SIGKILL)
    print(f"kill {kill}: SIGKILL at {fleet.batches} batches generated, {before} records spooled")
    time.sleep(down_s)
    peak = fleet.spooled()
    service.start()
    backlog = fleet.wait_for_backlog(timeout_s)
    caught_up = f"caught up {backlog:.1f} s after the restart" if backlog is not None else "did NOT catch up"
    print(f"  restarted after {down_s:g} s with {peak} records spooled; {caught_up}")


def kill_one_worker(service: ServiceProcess, fleet: CollectorFleet, kill: int, timeout_s: float) -> bool:
    """SIGKILL one worker process; the others serve on and the supervisor replaces it. Watches at least 5 s:
    when the replacement is counted on /metrics, the spools' peak, and when they are back to at most one
    batch per collector after it. True when the worker was replaced and the spools caught up."""
    before = fleet.spooled()
    pid = service.kill_worker(signal.SIGKILL)
    killed_at = time.monotonic()
    print(f"kill {kill}: SIGKILL of worker {pid} (parent {service.pid} and the other workers go on) at "
          f"{fleet.batches} batches generated, {before} records spooled")  # fmt: skip
    replaced: float | None = None
    caught_up: float | None = None
    peak, peak_at, since = before, 0.0, 0.0
    while since < timeout_s and (since < 5.0 or replaced is None or caught_up is None):
        spooled = fleet.spooled()
        if spooled > peak:
            peak, peak_at, caught_up = spooled, since, None
        elif caught_up is None and spooled <= len(fleet.spools) * 100:
            caught_up = since
        if replaced is None and service.replaced(pid):
            replaced = since
        time.sleep(0.1)
        since = time.monotonic() - killed_at
    said = "NOT replaced"
    if replaced is not None:
        said = f"replaced {replaced:.1f} s later ({service.workers} processes on /metrics again)"
    spools = "did NOT catch up"
    if caught_up is not None:
        spools = f"at most a batch per collector again at {caught_up:.1f} s"
    print(f"  worker {said}; spools peaked at {peak} records ({peak_at:.1f} s), {spools}")
    return replaced is not None and caught_up is not None


if __name__ == "__main__":
    sys.exit(main())
