"""Alembic, run from code: the configuration lives here rather than in an ``alembic.ini``, so migrations
work from an installed package (``migrations/`` ships as a package).

Every schema change goes through a migration; processes that need the schema call :func:`ensure_schema`,
which creates it in an empty database and refuses a database at another revision (``phasefit db upgrade``
is the operator's decision, not a side effect of ingesting a file).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, inspect, text

from fleet.store.schema import Base

MIGRATIONS_PACKAGE = (
    "migrations"  # data to this module: found, never imported (migrations/env.py imports fleet)
)

__all__ = [
    "CommandError",  # Alembic's, re-exported: an unknown revision name raises it
    "SchemaNotCurrentError",
    "SchemaState",
    "SchemaStatus",
    "alembic_config",
    "current_revision",
    "downgrade",
    "ensure_schema",
    "head_revision",
    "schema_status",
    "upgrade",
]

VERSION_TABLE = "alembic_version"
_PG_MIGRATION_LOCK = 0x70686173  # advisory lock key: one migrating process at a time ("phas")


class SchemaState(StrEnum):
    EMPTY = "empty"  # no phasefit tables at all
    CURRENT = "current"  # at the head revision
    BEHIND = "behind"  # an older revision: run `phasefit db upgrade`
    AHEAD = "ahead"  # a revision this phasefit does not know (a newer phasefit migrated it)
    UNMANAGED = "unmanaged"  # phasefit tables without Alembic's version table


@dataclass(frozen=True)
class SchemaStatus:
    state: SchemaState
    current: str | None
    head: str


class SchemaNotCurrentError(RuntimeError):
    """The database is not at the revision this phasefit needs; the message says what to do."""


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's ``Config`` for the packaged ``migrations/``; with ``connection``, migrations run on it."""
    config = Config()
    config.set_main_option("script_location", _script_location())
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _script_location() -> str:
    # The package's search locations rather than ``__file__``: works for a regular package and an editable
    # namespace install, and finding a top-level package imports nothing.
    spec = importlib.util.find_spec(MIGRATIONS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for entry in locations:
        if (Path(entry) / "env.py").is_file():
            return str(Path(entry).resolve())
    raise RuntimeError(f"no Alembic env.py in the {MIGRATIONS_PACKAGE!r} package ({locations})")


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("the migrations package holds no revision")
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def schema_status(engine: Engine) -> SchemaStatus:
    head = head_revision()
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        current = (
            MigrationContext.configure(connection).get_current_revision() if VERSION_TABLE in tables else None
        )
    if current is None:
        state = SchemaState.UNMANAGED if tables & set(Base.metadata.tables) else SchemaState.EMPTY
    elif current == head:
        state = SchemaState.CURRENT
    else:
        known = {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
        state = SchemaState.BEHIND if current in known else SchemaState.AHEAD
    return SchemaStatus(state, current, head)


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as connection:
        _lock(connection)
        command.upgrade(alembic_config(connection), revision)


def downgrade(engine: Engine, revision: str) -> None:
    with engine.begin() as connection:
        _lock(connection)
        command.downgrade(alembic_config(connection), revision)


def _lock(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})


def ensure_schema(engine: Engine, *, create_if_empty: bool = True) -> SchemaStatus:
    """Return the status if the schema is at head; create it in an empty database when allowed; otherwise
    raise :class:`SchemaNotCurrentError` saying what the operator should do."""
    status = schema_status(engine)
    url = engine.url.render_as_string(hide_password=True)
    if status.state is SchemaState.CURRENT:
        return status
    if status.state is SchemaState.EMPTY and create_if_empty:
        upgrade(engine)
        return schema_status(engine)
    if status.state is SchemaState.EMPTY:
        raise SchemaNotCurrentError(f"the store at {url} is empty: run `phasefit db upgrade`")
    if status.state is SchemaState.BEHIND:
        raise SchemaNotCurrentError(
            f"the store at {url} is at revision {status.current}, this phasefit needs {status.head}: "
            "run `phasefit db upgrade`"
        )
    if status.state is SchemaState.AHEAD:
        raise SchemaNotCurrentError(
            f"the store at {url} is at revision {status.current}, newer than this phasefit knows "
            f"(head {status.head}): upgrade phasefit"
        )
    raise SchemaNotCurrentError(
        f"the store at {url} holds phasefit tables but no {VERSION_TABLE} table: it was not created by "
        "`phasefit db upgrade`; point PHASEFIT_DATABASE_URL at an empty database or stamp it with Alembic"
    )
