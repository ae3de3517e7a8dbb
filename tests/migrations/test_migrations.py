"""Alembic: `upgrade head` builds exactly the models' schema, `downgrade base` removes it."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, MetaData, inspect, text

from fleet.store import migrate
from fleet.store.engine import make_engine
from fleet.store.schema import Base


def _diffs(engine: Engine, metadata: MetaData) -> list[Any]:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, metadata))


@pytest.fixture
def engine(store_url: str) -> Any:
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


def test_upgrade_head_on_an_empty_database_builds_exactly_the_models(engine: Engine) -> None:
    assert migrate.schema_status(engine).state is migrate.SchemaState.EMPTY
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert _diffs(engine, Base.metadata) == []
    tables = set(inspect(engine).get_table_names())
    assert tables == set(Base.metadata.tables) | {"alembic_version"}


def test_the_comparison_would_see_a_difference(engine: Engine) -> None:
    """Guards the test above: a model the migrations do not build must show up as a difference."""
    migrate.upgrade(engine)
    changed = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["reports"].append_column(Column("pages", Integer, nullable=True))
    kinds = [diff[0] for diff in _diffs(engine, changed)]
    assert kinds == ["add_column"]


def test_downgrade_to_base_leaves_only_the_version_table(engine: Engine) -> None:
    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    assert migrate.current_revision(engine) is None
    assert migrate.schema_status(engine).state is migrate.SchemaState.EMPTY
    migrate.upgrade(engine)  # and back up again
    assert migrate.schema_status(engine).state is migrate.SchemaState.CURRENT


def test_ensure_schema_creates_an_empty_store_and_refuses_other_revisions(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(migrate.SchemaNotCurrentError, match="empty"):
        migrate.ensure_schema(engine, create_if_empty=False)
    assert migrate.ensure_schema(engine).state is migrate.SchemaState.CURRENT
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'f00dcafe'"))
    with pytest.raises(migrate.SchemaNotCurrentError, match="newer than this phasefit"):
        migrate.ensure_schema(engine)
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE alembic_version SET version_num = '{migrate.head_revision()}'"))
    # a phasefit whose head is a later revision sees this store as behind
    monkeypatch.setattr(migrate, "head_revision", lambda: "0099")
    with pytest.raises(migrate.SchemaNotCurrentError, match="run `phasefit db upgrade`"):
        migrate.ensure_schema(engine)
    monkeypatch.undo()
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE alembic_version"))
    assert migrate.schema_status(engine).state is migrate.SchemaState.UNMANAGED
    with pytest.raises(migrate.SchemaNotCurrentError, match="not created by"):
        migrate.ensure_schema(engine)
