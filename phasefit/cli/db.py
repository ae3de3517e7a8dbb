"""``phasefit db``: the store's schema (Alembic migrations), its size, raw-sample partitions and retention.

A Typer sub-app (``app``); the CLI registers it with ``app.add_typer(db.app, name="db")``. ``upgrade``,
``partitions`` and ``prune`` create the raw tables' day partitions ahead on PostgreSQL
(:func:`fleet.store.partitions.ensure_partitions`) and those of the backfilled days the ``DEFAULT``
partition holds (:func:`fleet.store.partitions.partition_backfilled_days`), and close those behind the
ingest horizon (:func:`fleet.store.closing.close_partitions`); on SQLite there are none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from phasefit.cli.output import add_row, emit_json, fail, human, plain

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from fleet.settings import Settings
    from fleet.store.rollup_retention import RollupExpiry

app = typer.Typer(
    help="The store: schema migrations (Alembic), row counts, raw-sample partitions, retention and rollups.",
    no_args_is_help=True,
)
DEFAULT_DAYS_AHEAD = 7  # fleet.store.partitions.DEFAULT_DAYS_AHEAD (not imported: the CLI starts fast)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL of the store (overrides PHASEFIT_DATABASE_URL): sqlite:///PATH or "
        "postgresql+psycopg://USER@HOST/DB.",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of text on stderr.")]
DaysAhead = Annotated[
    int,
    typer.Option(
        "--days-ahead",
        min=0,
        help="PostgreSQL: create the raw tables' partitions of today and this many days after it.",
    ),
]
CloseAfterDays = Annotated[
    int | None,
    typer.Option(
        "--close-after-days",
        min=0,
        help="PostgreSQL: close day partitions this many whole days old (default "
        "PHASEFIT_RAW_CLOSE_AFTER_DAYS, 1: today and yesterday stay open).",
        show_default=False,
    ),
]
Now = Annotated[
    datetime | None,
    typer.Option(
        "--now",
        help="Pretend it is this UTC time (ISO 8601), e.g. to replay a backfill.",
        formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"],
    ),
]


def load_settings(database_url: str | None) -> Settings:
    """Settings from the environment, with ``--database-url`` winning over PHASEFIT_DATABASE_URL."""
    from pydantic import ValidationError

    from fleet.settings import Settings

    try:
        return Settings(database_url=database_url) if database_url else Settings()
    except ValidationError as exc:
        die("; ".join(str(error["msg"]) for error in exc.errors()))


def open_engine(settings: Settings) -> Engine:
    from fleet.store.engine import make_engine

    try:
        return make_engine(settings.database_url)
    except Exception as exc:  # a malformed URL or a missing driver: say which, exit non-zero
        die(f"cannot open the store at {settings.database_url}: {exc}")


POINT_AT_A_STORE = (
    "point phasefit at a store: `export PHASEFIT_DATABASE_URL=sqlite:///PATH/phasefit.db` (or "
    "postgresql+psycopg://USER@HOST/DB), or pass --database-url; `phasefit demo` (`make demo`) builds a demo "
    "store and prints its export line, and `phasefit ingest` or `phasefit serve` store telemetry"
)


def missing_sqlite_file(url: str) -> Path | None:
    """The file an SQLite ``url`` names when it does not exist (connecting would create it empty), else
    None (it exists, or the URL is in-memory, a ``file:`` URI or not SQLite)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not url.startswith("sqlite"):
        return None
    try:
        database = make_url(url).database
    except ArgumentError:
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = Path(database)
    return None if path.exists() else path


def _which_store(database_url: str | None) -> str:
    """Where the URL came from, said when the store is missing or empty."""
    import os

    if database_url:
        return "--database-url"
    if os.environ.get("PHASEFIT_DATABASE_URL"):
        return "PHASEFIT_DATABASE_URL"
    return "the default store: PHASEFIT_DATABASE_URL is not set"


CREATE_HERE = "; or create an empty store there with `phasefit db upgrade`"


def _demo_store_hint(database_url: str | None) -> str:
    """Where no store was named and ``make demo`` left one in this folder: the line that points at it."""
    import os

    from phasefit.cli.demo import DEMO_FOLDER, export_line

    demo = DEMO_FOLDER / "phasefit.db"
    if database_url or os.environ.get("PHASEFIT_DATABASE_URL") or not demo.is_file():
        return ""
    return f". The demo's store is in this folder: {export_line(f'sqlite:///{demo.resolve()}')}"


def open_store(database_url: str | None, *, hint: str = "") -> tuple[Settings, Engine]:
    """Settings and an engine on an existing store, for the commands that read one: a missing SQLite file
    is refused with how to point at a store (and ``hint``), never created (connecting would create it)."""
    settings = load_settings(database_url)
    missing = missing_sqlite_file(settings.database_url)
    if missing is not None:
        where = _which_store(database_url)
        die(f"no store at {missing} ({where}): {POINT_AT_A_STORE}{hint}{_demo_store_hint(database_url)}")
    return settings, open_engine(settings)


def check_store_schema(engine: Engine, *, hint: str = "", database_url: str | None = None) -> None:
    """:func:`fleet.store.migrate.ensure_schema` without creating anything, for the commands that read the
    store: a database with no phasefit tables says how to point at a store (and ``hint``) rather than to
    migrate it. Raises ``SchemaNotCurrentError`` (its message says what to do) when the schema is behind
    or ahead."""
    from fleet.store import migrate

    status = migrate.schema_status(engine)
    if status.state is migrate.SchemaState.EMPTY:
        demo = _demo_store_hint(database_url)
        die(f"the store at {store_label(engine)} holds no phasefit tables: {POINT_AT_A_STORE}{hint}{demo}")
    migrate.ensure_schema(engine, create_if_empty=False)


def die(message: str) -> NoReturn:
    """``fail`` with the message taken literally (SQL errors quote ``[SQL: ...]``: not rich markup)."""
    fail(message)
    raise AssertionError("unreachable: fail() raises typer.Exit")


def say(text: str) -> None:
    """One line on stderr, never wrapped, never read as rich markup (URLs and paths may hold brackets)."""
    human().print(text, markup=False, soft_wrap=True)


def store_label(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _close_after(settings: Settings, option: int | None) -> int:
    return option if option is not None else settings.raw_close_after_days


def _retention_start(settings: Settings, moment: datetime) -> datetime:
    """The first UTC day the retention keeps at ``moment`` (PostgreSQL's prune cutoff)."""
    from fleet.store.partitions import floor_day

    return floor_day(moment - timedelta(days=settings.raw_retention_days))


def utc_moment(now: datetime | None) -> datetime:
    """``--now`` (read as UTC), or the current time."""
    return now.replace(tzinfo=UTC) if now is not None else datetime.now(UTC)


@dataclass(frozen=True)
class PartitionChanges:
    created: list[str]
    closed: list[str]
    deferred: list[str]  # to close, but their locks were not granted in time: the next run retries

    def say(self) -> None:
        created, closed = ", ".join(self.created) or "none", ", ".join(self.closed) or "none"
        say(f"partitions created: {created}; closed: {closed}")
        if self.deferred:
            say(f"not closed yet (busy, retried next run): {', '.join(self.deferred)}")


def maintain_partitions(
    engine: Engine, moment: datetime, days_ahead: int, close_after_days: int, keep_from: datetime
) -> PartitionChanges:
    """Create the day partitions due at ``moment``, and those of the days from ``keep_from`` (the
    retention's start) that ``DEFAULT`` holds samples of (a backfill: they move out of it), then close those
    behind the horizon (PostgreSQL)."""
    from fleet.store.closing import close_partitions
    from fleet.store.partitions import ensure_partitions, floor_day, partition_backfilled_days

    ahead = ensure_partitions(engine, moment, days_ahead)
    waiting: list[str] = []  # backfilled days whose locks were not granted: the next run moves them
    horizon = floor_day(moment) + timedelta(days=days_ahead + 1)
    backfilled = partition_backfilled_days(engine, keep_from, until=horizon, deferred=waiting)
    created = [partition.name for partition in (*ahead, *backfilled)]
    closing = close_partitions(engine, moment, close_after_days)
    return PartitionChanges(
        created, [p.name for p in closing.closed], [p.name for p in closing.deferred] + waiting
    )


@app.command()
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseUrl = None,
    days_ahead: DaysAhead = DEFAULT_DAYS_AHEAD,
    close_after_days: CloseAfterDays = None,
) -> None:
    """Migrate the store's schema up to REVISION (default: the latest); creates it in an empty database.
    At the latest revision on PostgreSQL, also creates the raw tables' day partitions ahead and closes
    those behind the ingest horizon."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store import migrate

    settings = load_settings(database_url)
    engine = open_engine(settings)
    changes = PartitionChanges([], [], [])
    try:
        migrate.upgrade(engine, revision)
        current = migrate.current_revision(engine)
        if current == migrate.head_revision():
            moment = utc_moment(None)
            changes = maintain_partitions(
                engine,
                moment,
                days_ahead,
                _close_after(settings, close_after_days),
                _retention_start(settings, moment),
            )
    except (SQLAlchemyError, migrate.CommandError) as exc:
        die(f"upgrade of {store_label(engine)} failed: {exc}")
    finally:
        engine.dispose()
    say(f"{store_label(engine)}: at revision {current}")
    changes.say()


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' removes every phasefit table.")],
    database_url: DatabaseUrl = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Migrate the store's schema down to REVISION; dropped tables lose their data (asks unless --yes)."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store import migrate

    engine = open_engine(load_settings(database_url))
    if not yes:
        typer.confirm(
            f"Downgrade {store_label(engine)} to {revision}? Tables it drops lose their data", abort=True
        )
    try:
        migrate.downgrade(engine, revision)
        current = migrate.current_revision(engine)
    except (SQLAlchemyError, migrate.CommandError) as exc:
        die(f"downgrade of {store_label(engine)} failed: {exc}")
    finally:
        engine.dispose()
    say(f"{store_label(engine)}: at revision {current or 'base (no phasefit tables)'}")


@app.command()
def current(database_url: DatabaseUrl = None, json_output: JsonFlag = False) -> None:
    """Show the store's schema revision, the latest one, and whether an upgrade is needed."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store import migrate

    settings = load_settings(database_url)
    missing = missing_sqlite_file(settings.database_url)
    if missing is not None:  # reading the revision of a file that is not there must not create it
        status = migrate.SchemaStatus(migrate.SchemaState.EMPTY, None, migrate.head_revision())
        label = f"sqlite:///{missing}"
        if json_output:
            emit_json({"database": label, "current": None, "head": status.head, "state": status.state.value})
            return
        say(f"{label}: no such file (head {status.head}); {POINT_AT_A_STORE}")
        return
    engine = open_engine(settings)
    try:
        status = migrate.schema_status(engine)
    except SQLAlchemyError as exc:
        die(f"cannot read {store_label(engine)}: {exc}")
    finally:
        engine.dispose()
    if json_output:
        emit_json({"database": store_label(engine), "current": status.current, "head": status.head,
                   "state": status.state.value})  # fmt: skip
        return
    say(f"{store_label(engine)}: revision {status.current or '-'} (head {status.head}, {status.state})")


@app.command()
def stats(database_url: DatabaseUrl = None, json_output: JsonFlag = False) -> None:
    """Row count of every phasefit table."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store import migrate
    from fleet.store.queries import table_counts

    _, engine = open_store(database_url, hint=CREATE_HERE)
    try:
        check_store_schema(engine, hint=CREATE_HERE)
        with engine.connect() as connection:
            counts = table_counts(connection)
    except (SQLAlchemyError, migrate.SchemaNotCurrentError) as exc:
        die(str(exc))
    finally:
        engine.dispose()
    if json_output:
        emit_json(counts)
        return
    from rich.table import Table

    table = Table(title=plain(f"phasefit store {store_label(engine)}"))
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, count in counts.items():
        add_row(table, name, f"{count:,}")
    human().print(table)


@app.command()
def partitions(
    database_url: DatabaseUrl = None,
    days_ahead: DaysAhead = DEFAULT_DAYS_AHEAD,
    close_after_days: CloseAfterDays = None,
    now: Now = None,
    json_output: JsonFlag = False,
) -> None:
    """Create the raw sample tables' day partitions ahead and close those behind the ingest horizon
    (PostgreSQL), and list every partition."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store import migrate
    from fleet.store.engine import is_sqlite
    from fleet.store.partitions import partition_sizes
    from fleet.store.schema import RAW_SAMPLE_TABLES

    settings = load_settings(database_url)
    engine = open_engine(settings)
    try:
        migrate.ensure_schema(engine, create_if_empty=False)
        moment = utc_moment(now)
        changes = maintain_partitions(
            engine,
            moment,
            days_ahead,
            _close_after(settings, close_after_days),
            _retention_start(settings, moment),
        )
        sizes = []
        if not is_sqlite(engine):
            with engine.connect() as connection:
                sizes = [size for table in RAW_SAMPLE_TABLES for size in partition_sizes(connection, table)]
    except (SQLAlchemyError, migrate.SchemaNotCurrentError, ValueError) as exc:
        die(str(exc))
    finally:
        engine.dispose()
    listed = [
        {"table": s.partition.table, "name": s.partition.name, "bytes": s.bytes, "rows_estimate": s.rows,
         "from": s.partition.start.isoformat() if s.partition.start else None,
         "to": s.partition.end.isoformat() if s.partition.end else None, "open": s.open}
        for s in sizes
    ]  # fmt: skip
    if json_output:
        emit_json({"created": changes.created, "closed": changes.closed, "deferred": changes.deferred,
                   "partitions": listed})  # fmt: skip
        return
    if is_sqlite(engine):
        say(f"{store_label(engine)}: SQLite keeps raw samples unpartitioned (retention deletes rows)")
        return
    changes.say()
    for item in listed:
        span = f"[{item['from']}, {item['to']})" if item["from"] else "DEFAULT (days without a partition)"
        state = "open" if item["open"] else "closed"
        say(f"{item['name']}: {span}, {state}, {item['bytes']:,} bytes, ~{item['rows_estimate']:,} rows")


@app.command()
def prune(
    database_url: DatabaseUrl = None,
    retention_days: Annotated[
        int | None,
        typer.Option(
            "--retention-days",
            min=1,
            help="Days of raw samples to keep (default PHASEFIT_RAW_RETENTION_DAYS).",
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="Recompute every rollup from the oldest raw sample, not the last day."),
    ] = False,
    now: Now = None,
    days_ahead: DaysAhead = DEFAULT_DAYS_AHEAD,
    close_after_days: CloseAfterDays = None,
    json_output: JsonFlag = False,
) -> None:
    """Roll raw samples up per minute and per hour, then delete raw samples older than the retention
    (PostgreSQL: drop their day partitions), create the next days' partitions and close those behind the
    ingest horizon."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store import migrate
    from fleet.store.retention import apply_retention
    from fleet.store.rollup_retention import RollupRetention

    settings = load_settings(database_url)
    moment = utc_moment(now)
    days = retention_days if retention_days is not None else settings.raw_retention_days
    if days > settings.rollup_minute_retention_days:
        die(
            f"--retention-days {days} is longer than PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS "
            f"({settings.rollup_minute_retention_days}): per-minute rollups must be kept at least as long as "
            "raw samples"
        )
    tiers = RollupRetention(settings.rollup_minute_retention_days, settings.rollup_hour_retention_days)
    engine = open_engine(settings)
    try:
        migrate.ensure_schema(engine, create_if_empty=False)
        result = apply_retention(engine, now=moment, retention_days=days, full=full, rollup_retention=tiers)
        close_after = _close_after(settings, close_after_days)
        changes = maintain_partitions(engine, moment, days_ahead, close_after, result.cutoff)
    except (SQLAlchemyError, migrate.SchemaNotCurrentError) as exc:
        die(str(exc))
    finally:
        engine.dispose()
    if json_output:
        emit_json({"cutoff": result.cutoff.isoformat(), "rolled_up_until": result.rolled_up_until.isoformat(),
                   "rollup_rows": result.rollup_rows, "deleted": result.deleted,
                   "rollups_expired": _expired_json(result.rollups_expired),
                   "dropped_partitions": list(result.dropped_partitions),
                   "created_partitions": changes.created, "closed_partitions": changes.closed,
                   "deferred_partitions": changes.deferred})  # fmt: skip
        return
    deleted = ", ".join(f"{count:,} from {name}" for name, count in result.deleted.items())
    rolled = (
        ", ".join(f"{count:,} {name}" for name, count in result.rollup_rows.items()) or "nothing to roll up"
    )
    say(f"rollups up to {result.rolled_up_until:%Y-%m-%d %H:%M} UTC: {rolled}")
    say(f"deleted raw samples before {result.cutoff:%Y-%m-%d %H:%M} UTC: {deleted}")
    if result.dropped_partitions:
        say(f"partitions dropped: {', '.join(result.dropped_partitions)}")
    if result.rollups_expired is not None:
        say(_expired_text(result.rollups_expired))
    changes.say()


def _expired_json(expiry: RollupExpiry | None) -> dict[str, object] | None:
    """``rollups_expired`` of ``prune --json``: per tier, its cutoff (null: kept forever) and rows gone."""
    if expiry is None:
        return None
    rows = expiry.per_tier()
    tiers = {
        tier: {"cutoff": cutoff.isoformat() if cutoff else None, "rows": rows[tier]}
        for tier, cutoff in expiry.cutoffs.items()
    }
    return {"tiers": tiers, "tables": expiry.deleted, "batches": expiry.batches}


def _expired_text(expiry: RollupExpiry) -> str:
    rows = expiry.per_tier()
    parts = [
        f"{rows[tier]:,} {tier} rows before {cutoff:%Y-%m-%d %H:%M} UTC"
        if cutoff is not None
        else f"{tier} rows kept forever"
        for tier, cutoff in expiry.cutoffs.items()
    ]
    return f"rollups expired: {'; '.join(parts)} ({expiry.batches} batches)"
