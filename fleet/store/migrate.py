"""Alembic, run from code: the configuration lives here rather than in an ``alembic.ini``, so migrations
work from an installed package (``migrations/`` ships as a package).

Every schema change goes through a migration; processes that need the schema call :func:`ensure_schema`,
which creates it in an empty database and refuses a database at another revision (``phasefit db upgrade``
is the operator's decision, not a side effect of ingesting a file).

Alembic is imported only to migrate or to tell an older revision from an unknown one: checking a store at
the head revision reads the revision ids from the scripts and the store's version table itself (importing
Alembic, with Mako and Pygments behind it, cost ingest ~0.15 s of its start-up).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, inspect, text

from fleet.store.schema import Base

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_PACKAGE = (
    "migrations"  # data to this module: found, never imported (migrations/env.py imports fleet)
)

__all__ = [
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


def __getattr__(name: str) -> Any:
    if name == "CommandError":  # Alembic's, re-exported (an unknown revision raises it), imported on use
        from alembic.util import CommandError

        return CommandError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's ``Config`` for the packaged ``migrations/``; with ``connection``, migrations run on it."""
    from alembic.config import Config

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


_REVISION_LINE = re.compile(r"""^(down_revision|revision)\b[^=]*=\s*(?:None|"([^"]*)"|'([^']*)')\s*$""", re.M)


@cache
def head_revision() -> str:
    """The revision the scripts lead to: read from their ``revision`` / ``down_revision`` lines; through
    Alembic when a script states them in any other way or the history is not one line."""
    head = _head_from_scripts()
    if head is not None:
        return head
    from alembic.script import ScriptDirectory

    found = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if found is None:
        raise RuntimeError("the migrations package holds no revision")
    return found


def _head_from_scripts() -> str | None:
    """The only revision no script revises, when every script states both ids plainly; else None."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for script in Path(_script_location(), "versions").glob("*.py"):
        if script.name.startswith((".", "_")):
            continue  # an editor's lock or backup file, or a package marker: not a migration (as Alembic)
        found = [
            (m[1], m[2] or m[3] or None) for m in _REVISION_LINE.finditer(script.read_text(encoding="utf-8"))
        ]
        ids = dict(found)
        if len(found) != 2 or set(ids) != {"revision", "down_revision"} or ids["revision"] is None:
            return None  # stated otherwise, or more than once: Alembic reads it
        revisions.add(ids["revision"])
        if ids["down_revision"] is not None:
            revised.add(ids["down_revision"])
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 and revised <= revisions else None


def current_revision(engine: Engine) -> str | None:
    return _tables_and_revision(engine)[1]


def _tables_and_revision(engine: Engine) -> tuple[set[str], str | None]:
    """The store's table names, and the revision in Alembic's version table (None without one)."""
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        return tables, _stored_revision(connection) if VERSION_TABLE in tables else None


def _stored_revision(connection: Connection) -> str | None:
    """The revision in Alembic's version table (one row; none while the schema is being created)."""
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:
        raise SchemaNotCurrentError(
            f"{VERSION_TABLE} holds {len(rows)} revisions ({', '.join(rows)}): phasefit's history is one "
            "line, so something else migrated this store; point PHASEFIT_DATABASE_URL at a phasefit store"
        )
    return rows[0] if rows else None


def schema_status(engine: Engine) -> SchemaStatus:
    head = head_revision()
    tables, current = _tables_and_revision(engine)
    if current is None:
        state = SchemaState.UNMANAGED if tables & set(Base.metadata.tables) else SchemaState.EMPTY
    elif current == head:
        state = SchemaState.CURRENT
    else:
        from alembic.script import ScriptDirectory

        known = {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
        state = SchemaState.BEHIND if current in known else SchemaState.AHEAD
    return SchemaStatus(state, current, head)


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    with engine.begin() as connection:
        _lock(connection)
        command.upgrade(alembic_config(connection), revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

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
