"""Engines from a database URL: SQLite (the embedded default) or PostgreSQL through psycopg 3.

SQLite connections run in WAL mode (readers never block the writer), with foreign keys on, a busy timeout
instead of an immediate "database is locked", and transactions that phasefit begins itself (``BEGIN``
emitted by SQLAlchemy, not guessed by the sqlite3 module), so a batch is stored whole or not at all. Write
transactions take the write lock up front (``BEGIN IMMEDIATE``, see :func:`writing`) so two writers queue
on the busy timeout instead of failing on a lock upgrade. ``synchronous`` stays at SQLite's default (FULL):
a committed batch survives a power loss, not only a process crash.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

SQLITE_BUSY_TIMEOUT_MS = 10_000
_BEGIN_OPTION = "phasefit_sqlite_begin"


def is_sqlite(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: str, *, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS, **kwargs: Any) -> Engine:
    """An engine for ``url`` (``sqlite:///PATH`` or ``postgresql+psycopg://...``); extra kwargs go to
    :func:`sqlalchemy.create_engine`. The SQLite file's folder is created when missing."""
    if url.startswith("sqlite"):
        path = _sqlite_file(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, **kwargs)
        _configure_sqlite(engine, busy_timeout_ms, in_memory=path is None)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    # Sessions in UTC whatever the server's time zone: instants come back as UTC, and times at the very edge
    # of the calendar (stored before the contract bounded them) stay readable by psycopg.
    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("options", "-c timezone=UTC")
    return create_engine(url, connect_args=connect_args, **kwargs)


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, *, in_memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # no implicit BEGIN/COMMIT from the sqlite3 module
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """A connection inside one write transaction: committed on success, rolled back on any exception."""
    with engine.connect() as connection:
        if is_sqlite(engine):
            connection.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        with connection.begin():
            yield connection


def driver_connection(connection: Connection) -> Any:
    """The DBAPI connection (sqlite3 or psycopg) under ``connection``, for COPY and executemany fast paths;
    it shares the SQLAlchemy transaction."""
    return connection.connection.driver_connection
