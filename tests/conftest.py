"""Shared fixtures: stores on SQLite and, when PHASEFIT_TEST_POSTGRES_URL is set, on PostgreSQL.

- ``store_url``: the URL of an empty store, once per dialect (parametrised ``sqlite`` / ``postgresql``). The
  PostgreSQL one is a throwaway database created per test module (``pf_test_<random>``, dropped at the end)
  whose ``public`` schema is emptied before each test, so tests never see each other's rows.
- ``store_engine``: an engine on such a store, migrated to the head revision.

Without PHASEFIT_TEST_POSTGRES_URL the PostgreSQL cases skip with a visible reason; under ``CI=true`` they
fail instead, as they do when the server cannot be reached.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

from tests.availability import unavailable

if TYPE_CHECKING:
    from sqlalchemy import Engine

POSTGRES_ENV = "PHASEFIT_TEST_POSTGRES_URL"


def _unavailable(reason: str) -> NoReturn:
    unavailable(reason, "the PostgreSQL cases")


@pytest.fixture(scope="module")
def postgres_database() -> Iterator[str]:
    """URL of a PostgreSQL database created for this test module and dropped after it."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    admin_url = os.environ.get(POSTGRES_ENV, "").strip()
    if not admin_url:
        _unavailable(f"{POSTGRES_ENV} is not set")
    name = f"pf_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except SQLAlchemyError as exc:
        admin.dispose()
        _unavailable(
            f"PostgreSQL at {POSTGRES_ENV}={admin_url} is unreachable: {exc.__class__.__name__}: {exc}"
        )
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _empty_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """URL of an empty store (no tables): a new SQLite file, or this module's PostgreSQL database emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store') / 'phasefit.db'}"
    url: str = request.getfixturevalue("postgres_database")
    _empty_postgres(url)
    return url


@pytest.fixture
def store_engine(store_url: str) -> Iterator[Engine]:
    """An engine on an empty store at the head revision."""
    from fleet.store.engine import make_engine
    from fleet.store.migrate import upgrade

    engine = make_engine(store_url)
    upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()
