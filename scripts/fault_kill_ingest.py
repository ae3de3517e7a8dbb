"""Fault check (issue 5; reliability.md §7 D1): SIGKILL the service mid-ingest while collectors ship, restart
it, and check the store holds every sample exactly once.

- Store: a throwaway database on PostgreSQL (PHASEFIT_TEST_POSTGRES_URL, else the machine's server at
  127.0.0.1:5432) or, with ``--store sqlite``, an SQLite file.
- Service: `phasefit serve` (one process) with a collector token.
- Collectors: ``--collectors`` simulated collectors, each with the real collector's durable spool and
  shipper (collector/spool.py, collector/shipper.py), spooling a batch of 8 GPUs x 10 windows plus 2 workers'
  engine samples every ``--interval`` seconds; the shipper retries until the service acknowledges.
- Faults: ``--kills`` times, after ``--up`` seconds of shipping, SIGKILL the service's process group (no
  shutdown, requests in flight cut off, transactions in flight rolled back by the store) and restart it
  after ``--down`` seconds.
- Then: stop generating, wait until every spool is empty, and compare the store with what the collectors
  generated: count and checksum of gpu and engine samples (each sample carries a value derived from its
  key, see service_harness). Exit status 0 only when they match exactly and nothing was dropped.

    .venv/bin/python scripts/fault_kill_ingest.py                       # 64 collectors, 3 kills
    .venv/bin/python scripts/fault_kill_ingest.py --down 60 --kills 1   # reliability.md D1
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
    args = parser.parse_args()

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
                             workdir / "service.log")  # fmt: skip
    service.start()
    fleet = CollectorFleet(
        f"http://127.0.0.1:{port}", token, args.collectors, args.interval, workdir / "spools"
    )
    rate = args.collectors * 100 / args.interval
    print(f"{args.collectors} collectors, {rate:,.0f} samples/s generated, into {args.store}")
    fleet.start()
    try:
        for kill in range(1, args.kills + 1):
            time.sleep(args.up)
            before = fleet.spooled()
            service.kill(signal.SIGKILL)
            print(f"kill {kill}: SIGKILL at {fleet.batches} batches generated, {before} records spooled")
            time.sleep(args.down)
            peak = fleet.spooled()
            service.start()
            backlog = fleet.wait_for_backlog(args.drain_timeout)
            caught_up = (
                f"caught up {backlog:.1f} s after the restart" if backlog is not None else "did NOT catch up"
            )
            print(f"  restarted after {args.down:g} s with {peak} records spooled; {caught_up}")
        time.sleep(args.up)
        drained = fleet.drain(args.drain_timeout)
        dropped = fleet.dropped()
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
    exact = stored == generated and dropped == 0 and drained is not None
    print("RESULT: every sample stored exactly once" if exact else "RESULT: FAILED (lost or doubled samples)")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
