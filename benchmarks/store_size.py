"""Store size (issue 19): bytes per raw sample, per GPU-day raw and rolled up, and the time to expire a day.

Simulates one realistic day of the demo fleet scaled to --gpus (fleetsim: DCGM profiling fields, power,
NVLink and PCIe bytes, an engine sample per worker and window; 10-s windows by default) and stores it the
way `phasefit ingest` does (fleet.ingest, in this process) into a fresh SQLite file and, when
PHASEFIT_TEST_POSTGRES_URL or --postgres names a server, a fresh PostgreSQL database. Then, per store:

- bytes per GPU sample and per engine sample, indexes included: the raw tables (PostgreSQL:
  pg_total_relation_size summed over their partitions; SQLite: the pages of every b-tree of the table);
- bytes per GPU-day raw, and rolled up (per-minute plus per-hour rollups, which outlive raw retention),
  and per rollup tier; then a year's projection at 1,000 and 10,000 GPUs under the default retentions
  (raw 14 days, per-minute rollups 35, hourly 400: PHASEFIT_*_RETENTION_DAYS);
- seconds to expire the day: the prune's check and partition drop (PostgreSQL) or row DELETE (SQLite),
  and a row DELETE of the same day, rolled back;
- PostgreSQL: the same once the day is closed (its unique indexes traded for BRIN ones, as `phasefit db
  prune` does a day after), the seconds that takes, and how long sending the whole day again takes (all
  duplicates: the exactly-once check of a closed day);
- the same figures after `downgrade 0004` of the same data (the store before the lean tables), unless
  --no-before, and the seconds each migration took.

Figures only, nothing asserted. Sizes are deterministic for a seed; timings depend on the machine's load
(printed first), so compare within a run.

    .venv/bin/python benchmarks/store_size.py                    # 64 GPUs, SQLite (+ PostgreSQL if set)
    .venv/bin/python benchmarks/store_size.py --gpus 256 --postgres postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url

from fleet.catalog import load_catalog
from fleet.ingest import ChunkReader, ingest_stream
from fleet.store import migrate
from fleet.store.closing import close_partitions
from fleet.store.engine import is_sqlite, make_engine, writing
from fleet.store.partitions import ensure_partitions, list_partitions
from fleet.store.retention import apply_retention, expire_raw_samples
from fleetsim.scaling import scaled
from fleetsim.scenario import Scenario
from fleetsim.source import jsonl_batches

START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
DAY = timedelta(days=1)
DEMO_GPUS = 64
RAW_DAYS, MINUTE_DAYS, HOUR_DAYS, YEAR_DAYS = 14, 35, 400, 365  # fleet.settings defaults, a year
ROLLUPS = {"gpu": ("gpu_samples_1m", "gpu_samples_1h"), "engine": ("engine_samples_1m", "engine_samples_1h")}


@dataclass
class Run:
    """What was stored, and the figures of each revision measured."""

    gpus: int
    gpu_samples: int
    engine_samples: int
    figures: dict[str, Figures]


@dataclass
class Figures:
    """One revision's figures for one store."""

    gpu_bytes: int = 0
    engine_bytes: int = 0
    rollup_bytes: dict[str, int] = field(default_factory=dict)
    expire_s: float | None = None
    expire_how: str = ""
    delete_s: float | None = None


def relation_bytes(connection: Connection, table: str) -> int:
    """A table with its indexes: every partition on PostgreSQL, every b-tree of it on SQLite."""
    if is_sqlite(connection):
        return int(
            connection.execute(
                text(
                    "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN "
                    "(SELECT name FROM sqlite_master WHERE tbl_name = :table)"
                ),
                {"table": table},
            ).scalar_one()
        )
    names = [table] + [p.name for p in list_partitions(connection, table)]
    return sum(
        int(
            connection.execute(
                text("SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": t}
            ).scalar_one()
        )
        for t in names
    )


def count(connection: Connection, table: str) -> int:
    return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def timed_delete(engine: Engine, tables: tuple[str, ...], end: datetime) -> float:
    """Seconds a row DELETE of the samples before ``end`` takes (rolled back: the data stays)."""
    with engine.connect() as connection:
        transaction = connection.begin()
        started = time.perf_counter()
        for table in tables:
            connection.execute(text(f"DELETE FROM {table} WHERE ts < :end"), {"end": _bind(connection, end)})
        seconds = time.perf_counter() - started
        transaction.rollback()
    return seconds


def _bind(connection: Connection, moment: datetime) -> object:
    return (
        (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        if is_sqlite(connection)
        else moment
    )


@contextmanager
def took(label: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    print(f"  {label}: {time.perf_counter() - started:.1f} s")


def sizes(connection: Connection, figures: Figures) -> None:
    figures.gpu_bytes = relation_bytes(connection, "raw_gpu_samples")
    figures.engine_bytes = relation_bytes(connection, "raw_engine_samples")
    figures.rollup_bytes = {t: relation_bytes(connection, t) for ts in ROLLUPS.values() for t in ts}


def measure(url: str, scenario: Scenario, window_s: float, before: bool) -> Run:
    """Ingest the day into the store at ``url`` (empty), then measure it at the head revision with the day
    open and (PostgreSQL) closed, and at revision 0004."""
    engine = make_engine(url)
    figures: dict[str, Figures] = {}
    try:
        migrate.upgrade(engine)
        ensure_partitions(engine, START, days_ahead=1)  # the day and the next (its last window ends there)
        catalog = load_catalog()

        def day() -> ChunkReader:
            return ChunkReader(jsonl_batches(scenario, catalog, days=1.0, window_s=window_s, start=START))

        with took("ingest"):
            result = ingest_stream(engine, day, Path("simulated day"), jobs=0)
        print(f"  {result.gpu_samples:,} GPU samples, {result.engine_samples:,} engine samples")
        with took("rollups"):
            apply_retention(engine, now=START + 2 * DAY, retention_days=30)
        head = figures["head, day open"] = Figures()
        with engine.connect() as connection:
            sizes(connection, head)
            gpus = int(connection.execute(text("SELECT count(*) FROM gpus")).scalar_one())
        head.delete_s = timed_delete(engine, ("raw_gpu_samples", "raw_engine_samples"), START + DAY)
        if not is_sqlite(engine):
            closed = figures["head, day closed"] = Figures()
            with took("close the day (its unique indexes traded for BRIN ones)"):
                close_partitions(engine, START + 2 * DAY, close_after_days=1)
            with engine.connect() as connection:
                sizes(connection, closed)
            closed.delete_s = timed_delete(engine, ("raw_gpu_samples", "raw_engine_samples"), START + DAY)
            started = time.perf_counter()
            again = ingest_stream(engine, day, Path("simulated day, again"), jobs=0)
            print(
                f"  the whole day sent again into the closed day: {again.stored:,} stored, "
                f"{again.duplicates:,} duplicates, in {time.perf_counter() - started:.1f} s "
                f"(first ingest: {result.seconds:.1f} s)"
            )
        if before:
            old = figures["0004"] = Figures(expire_how="row DELETE")
            with took("downgrade to 0004"):
                migrate.downgrade(engine, "0004")
            with engine.connect() as connection:
                old.gpu_bytes, old.engine_bytes = (
                    relation_bytes(connection, t) for t in ("gpu_samples", "engine_samples")
                )
                old.rollup_bytes = head.rollup_bytes  # 0005 and 0006 leave the rollups as they were
            old.expire_s = old.delete_s = timed_delete(engine, ("gpu_samples", "engine_samples"), START + DAY)
            with took("upgrade to head (the day's samples moved into the lean tables)"):
                migrate.upgrade(engine)
            if not is_sqlite(engine):
                with took("close the day again"):
                    close_partitions(engine, START + 2 * DAY, close_after_days=1)
        started = time.perf_counter()
        with writing(engine) as connection:
            expired = expire_raw_samples(connection, START + DAY)
        last = figures["head, day closed"] if not is_sqlite(engine) else head
        last.expire_s = time.perf_counter() - started
        dropped = sum(len(e.dropped_partitions) for e in expired.values())
        last.expire_how = f"drop {dropped} partitions" if dropped else "row DELETE"
        return Run(gpus, result.gpu_samples, result.engine_samples, figures)
    finally:
        engine.dispose()


def report(store: str, run: Run) -> None:
    figures, gpus, mb = run.figures, run.gpus, 1e6
    columns = list(figures)
    print(
        f"\n{store}: {gpus} GPUs, one day ({run.gpu_samples:,} GPU + {run.engine_samples:,} engine samples)"
    )
    print(f"{'':34}" + "".join(f"{c:>22}" for c in columns))

    def row(label: str, values: list[str]) -> None:
        print(f"{label:34}" + "".join(f"{v:>22}" for v in values))

    row("bytes per GPU sample", [f"{f.gpu_bytes / run.gpu_samples:,.1f}" for f in figures.values()])
    row("bytes per engine sample", [f"{f.engine_bytes / run.engine_samples:,.1f}" for f in figures.values()])
    row("MB per GPU-day, raw", [f"{f.gpu_bytes / gpus / mb:,.3f}" for f in figures.values()])
    rolled = [sum(f.rollup_bytes[t] for t in ROLLUPS["gpu"]) for f in figures.values()]
    hourly = [f.rollup_bytes["gpu_samples_1h"] for f in figures.values()]
    row("MB per GPU-day, rolled up (1m+1h)", [f"{r / gpus / mb:,.3f}" for r in rolled])
    row("  of which per hour", [f"{h / gpus / mb:,.4f}" for h in hourly])
    tier = {
        t: [sum(f.rollup_bytes[f"{k}_samples_{t}"] for k in ("gpu", "engine")) for f in figures.values()]
        for t in ("1m", "1h")
    }
    row("MB per GPU-day, 1m (GPU+engine)", [f"{m / gpus / mb:,.3f}" for m in tier["1m"]])
    row("MB per GPU-day, 1h (GPU+engine)", [f"{h / gpus / mb:,.4f}" for h in tier["1h"]])
    row(
        "s to expire the day",
        [f"{f.expire_s:.3f} ({f.expire_how})" if f.expire_s is not None else "" for f in figures.values()],
    )
    row(
        "s to DELETE its rows (rolled back)",
        [f"{f.delete_s:.3f}" if f.delete_s is not None else "" for f in figures.values()],
    )


def project(store: str, run: Run) -> None:
    """A year's store size at 1,000 and 10,000 GPUs under the default retentions, steady state: raw samples
    (GPU and engine tables) for PHASEFIT_RAW_RETENTION_DAYS, the per-minute tier for
    PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS, the hourly tier for a year (less than its 400 days); and the
    same with per-minute rollups kept forever (before the tiers had retentions)."""
    figures = run.figures.get("head, day closed") or run.figures["head, day open"]
    per_gpu_day = {
        "raw": (figures.gpu_bytes + figures.engine_bytes) / run.gpus,
        "1m": sum(figures.rollup_bytes[t] for t in ("gpu_samples_1m", "engine_samples_1m")) / run.gpus,
        "1h": sum(figures.rollup_bytes[t] for t in ("gpu_samples_1h", "engine_samples_1h")) / run.gpus,
    }
    days = {"raw": RAW_DAYS, "1m": MINUTE_DAYS, "1h": min(YEAR_DAYS, HOUR_DAYS)}
    forever = {"raw": RAW_DAYS, "1m": YEAR_DAYS, "1h": YEAR_DAYS}
    print(
        f"\n{store}: a year's projection (raw {RAW_DAYS} d, 1m {MINUTE_DAYS} d, 1h {HOUR_DAYS} d; engine "
        "tables included; MB per GPU-day: "
        + ", ".join(f"{tier} {size / 1e6:.3f}" for tier, size in per_gpu_day.items())
        + ")"
    )
    for fleet in (1_000, 10_000):
        tiers = {tier: per_gpu_day[tier] * days[tier] * fleet / 1e9 for tier in days}
        before = sum(per_gpu_day[tier] * forever[tier] * fleet / 1e9 for tier in forever)
        parts = ", ".join(f"{tier} {size:,.1f} GB" for tier, size in tiers.items())
        print(
            f"  {fleet:>6,} GPUs: {sum(tiers.values()):,.1f} GB ({parts}); "
            f"per-minute rollups kept a year: {before:,.1f} GB"
        )


def postgres_database(admin_url: str) -> tuple[str, Engine, str]:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"pf_store_size_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), admin, name


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--gpus", type=int, default=DEMO_GPUS, help="a multiple of 64 (the demo fleet's size)"
    )
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--postgres", default=os.environ.get("PHASEFIT_TEST_POSTGRES_URL"),
                        help="an admin URL; a throwaway database is created and dropped")  # fmt: skip
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-before", action="store_true", help="skip the revision 0004 comparison")
    args = parser.parse_args()
    if args.gpus % DEMO_GPUS:
        parser.error(f"--gpus must be a multiple of {DEMO_GPUS}")
    scenario = scaled("demo", args.gpus // DEMO_GPUS)
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory(prefix="phasefit-size-") as folder:
            print("sqlite:")
            run = measure(f"sqlite:///{folder}/store.db", scenario, args.window_s, not args.no_before)
            report("SQLite", run)
            project("SQLite", run)
    if args.postgres:
        url, admin, name = postgres_database(args.postgres)
        try:
            print("postgresql:")
            run = measure(url, scenario, args.window_s, not args.no_before)
            report("PostgreSQL", run)
            project("PostgreSQL", run)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
