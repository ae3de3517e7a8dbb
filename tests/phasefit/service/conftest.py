"""Service fixtures: an app on a migrated SQLite store (or the shared PostgreSQL fixture), a token file,
an injected clock and a fresh metrics registry per app."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from fleet.store.engine import make_engine
from fleet.store.migrate import upgrade
from phasefit.service.app import create_app
from phasefit.service.settings import ServiceSettings
from phasefit.service.tokens import hash_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice that its TestClient will move to httpx2
    from fastapi.testclient import TestClient

INGEST_A = "collector-a-0123456789abcdef"  # a plain token, any node
INGEST_B = "collector-b-0123456789abcdef"  # stored hashed, bound to node-b*
READ = "dashboard-read-0123456789abcd"
ALERTMANAGER = "alertmanager-0123456789abcdef"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class FakeClock:
    def __init__(self, start: datetime = datetime(2026, 3, 2, 13, 0, tzinfo=UTC)) -> None:
        self.current = start
        self.elapsed = 0.0

    def now(self) -> datetime:
        return self.current

    def monotonic(self) -> float:
        return self.elapsed

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)
        self.elapsed += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}", busy_timeout_ms=200)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "ingest-tokens"
    path.write_text(f"# collectors\n{INGEST_A}\nnode-b:{hash_token(INGEST_B)}:node-b,node-b-*\n")
    return path


@pytest.fixture
def read_file(tmp_path: Path) -> Path:
    path = tmp_path / "read-tokens"
    path.write_text(f"dashboard:{hash_token(READ)}\n")
    return path


ClientFactory = Callable[..., Any]


@pytest.fixture
def make_client(
    sqlite_engine: Engine, token_file: Path, read_file: Path, clock: FakeClock
) -> Iterator[ClientFactory]:
    """``make_client(engine=None, **settings)``: a started TestClient (lifespan run) on its own app."""
    started: list[Any] = []

    def make(engine: Engine | None = None, **overrides: Any) -> Any:
        values: dict[str, Any] = {
            "database_url": "sqlite:///unused.db",
            "ingest_tokens_file": token_file,
            "read_tokens_file": read_file,
            "alertmanager_tokens": ALERTMANAGER,
        }
        values.update(overrides)
        settings = ServiceSettings(**values)
        app = create_app(settings, engine=engine or sqlite_engine, clock=clock, registry=CollectorRegistry())
        client = TestClient(app)
        client.__enter__()
        started.append(client)
        return client

    yield make
    for client in started:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory) -> Any:
    return make_client()
