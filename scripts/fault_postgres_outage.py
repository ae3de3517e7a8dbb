"""Fault check (issue 5; reliability.md §7 D3): stop PostgreSQL for 60 s under load; the service answers 503
with Retry-After (never 500), collectors spool, and after PostgreSQL returns nothing is missing or doubled.

- PostgreSQL: a PRIVATE throwaway cluster (initdb + pg_ctl on a free port, as the postgres user when run as
  root), never the machine's shared server, which other people use. The outage is
  ``pg_ctl stop -m immediate`` (a crash, no clean shutdown), then ``pg_ctl start`` after ``--outage`` seconds.
- Service: `phasefit serve` with a collector token, one process or ``--workers N`` behind one port (each
  process meets the outage on its own connections); collectors as in fault_kill_ingest.py (the real spool
  and shipper).
- During the outage a probe posts a small batch and reads /readyz every second: every answer must be 503
  with Retry-After. After restart: seconds until the first probe is stored, and until the spools drained.
- Then the store is compared with what the collectors generated (count and checksum of gpu and engine
  samples). Exit status 0 only when everything matches.

    .venv/bin/python scripts/fault_postgres_outage.py                   # 64 collectors, 60 s outage
    .venv/bin/python scripts/fault_postgres_outage.py --outage 10       # a quick look
    .venv/bin/python scripts/fault_postgres_outage.py --workers 2       # two service processes
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_harness import (
    CollectorFleet,
    Ledger,
    PrivatePostgres,
    RawHttp,
    ServiceProcess,
    batch,
    encode,
    free_port,
    ledger,
    migrate,
    store_ledger,
)

PROBE_COLLECTOR = 999  # its own node and GPUs, outside the fleet's ledger


def probe(port: int, token: str, seq: int) -> tuple[int, str | None, int]:
    """POST one small batch and GET /readyz: (ingest status, its Retry-After, readyz status)."""

    async def run() -> tuple[int, str | None, int]:
        client = RawHttp("127.0.0.1", port)
        try:
            headers = {
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            }
            status, answer, _ = await client.request(
                "POST", "/v1/ingest", encode(batch(PROBE_COLLECTOR, seq)), headers
            )
            ready, _, _ = await client.request("GET", "/readyz")
            return status, answer.get("retry-after"), ready
        finally:
            client.close()

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--collectors", type=int, default=64)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between a collector's batches")
    parser.add_argument("--before", type=float, default=10.0, help="seconds of load before the outage")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds PostgreSQL is down")
    parser.add_argument("--drain-timeout", type=float, default=240.0)
    parser.add_argument("--workers", type=int, default=1, help="service processes (phasefit serve --workers)")
    args = parser.parse_args()
    postgres = PrivatePostgres()
    try:
        postgres.start()
        with tempfile.TemporaryDirectory(prefix="pf-fault-pg-") as tmp:
            return run(args, postgres, Path(tmp))
    finally:
        postgres.destroy()


def run(args: argparse.Namespace, postgres: PrivatePostgres, workdir: Path) -> int:
    migrate(postgres.url)
    token = secrets.token_hex(32)
    port = free_port()
    service = ServiceProcess({"PHASEFIT_DATABASE_URL": postgres.url, "PHASEFIT_INGEST_TOKENS": token}, port,
                             workdir / "service.log", workers=args.workers)  # fmt: skip
    service.start()
    fleet = CollectorFleet(
        f"http://127.0.0.1:{port}", token, args.collectors, args.interval, workdir / "spools"
    )
    rate = args.collectors * 100 / args.interval
    print(f"{args.collectors} collectors, {rate:,.0f} samples/s generated, into a private PostgreSQL on port "
          f"{postgres.port}; {args.workers} service process(es)")  # fmt: skip
    fleet.start()
    seq = 0
    probes = Ledger()  # what the probes got stored (answered 200)
    answers: Counter[str] = Counter()
    try:
        time.sleep(args.before)
        postgres.stop("immediate")
        down_at = time.monotonic()
        print(f"PostgreSQL stopped (immediate) with {fleet.spooled()} records spooled")
        while time.monotonic() - down_at < args.outage:
            status, retry_after, ready = probe(port, token, seq)
            if status == 200:
                probes = probes + ledger(batch(PROBE_COLLECTOR, seq))
            seq += 1
            answers[f"ingest {status}{' + Retry-After' if retry_after else ''}, readyz {ready}"] += 1
            time.sleep(1.0)
        peak = fleet.spooled()
        postgres.start()
        up_at = time.monotonic()
        first_ok = None
        while time.monotonic() - up_at < 60:
            status, _, _ = probe(port, token, seq)
            seq += 1
            if status == 200:
                first_ok = time.monotonic() - up_at
                probes = probes + ledger(batch(PROBE_COLLECTOR, seq - 1))
                break
            answers[f"after restart: ingest {status}"] += 1
            time.sleep(0.2)
        backlog = fleet.wait_for_backlog(args.drain_timeout)
        stored_after = (
            f"first probe stored {first_ok:.1f} s later" if first_ok is not None else "NO probe stored"
        )
        print(f"PostgreSQL back after {args.outage:g} s with {peak} records spooled; {stored_after}")
        print(
            f"backlog shipped {backlog:.1f} s after PostgreSQL returned"
            if backlog is not None
            else "backlog NOT shipped"
        )
        time.sleep(2 * args.interval)
        drained = fleet.drain(args.drain_timeout)
        dropped = fleet.dropped()
    finally:
        fleet.close()
        service.kill(signal.SIGTERM)
    print("answers during the outage:")
    for answer, count in sorted(answers.items()):
        print(f"  {count:4d} x {answer}")
    generated, stored = fleet.generated + probes, store_ledger(postgres.url)
    print(
        f"generated: {generated.gpu_samples:,} gpu + {generated.engine_samples:,} engine samples, probes too"
    )
    print(f"stored:    {stored.gpu_samples:,} gpu + {stored.engine_samples:,} engine samples")
    print(f"checksums: gpu {'match' if stored.gpu_checksum == generated.gpu_checksum else 'DIFFER'}, "
          f"engine {'match' if stored.engine_checksum == generated.engine_checksum else 'DIFFER'}; "
          f"dropped by spools: {dropped}")  # fmt: skip
    server_errors = sum(n for answer, n in answers.items() if " 5" in answer and "503" not in answer)
    only_503 = all(
        ("ingest 503 + Retry-After" in a and "readyz 503" in a) or a.startswith("after") for a in answers
    )
    exact = stored == generated and dropped == 0 and drained is not None
    ok = exact and server_errors == 0 and only_503 and first_ok is not None
    print("RESULT: " + ("503 + Retry-After throughout, every sample stored exactly once" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
