"""Alembic environment: runs on the connection :mod:`fleet.store.migrate` passes in, or on
``sqlalchemy.url`` when Alembic's own command line is used with a config that sets it."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, pool

from fleet.store.engine import make_engine
from fleet.store.partitions import compared_by_autogenerate
from fleet.store.schema import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite barely supports ALTER
        include_object=compared_by_autogenerate,  # partitions and reading views are not drift
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection given and no sqlalchemy.url set")
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as connection:
            _run(connection)
    finally:
        engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
