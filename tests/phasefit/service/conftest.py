"""Service fixtures: an app on a migrated SQLite store (or the shared PostgreSQL fixture), a token file,
an injected clock and a fresh metrics registry per app; ``live_service`` runs one under a real uvicorn on
loopback (a thread of the test process) for what only real sockets show."""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
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


JSON = {"Content-Type": "application/json"}


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


class PinnedWallClock(FakeClock):
    """The FakeClock's wall time (records.T0 is an hour before it), with real monotonic time: for a service
    under uvicorn, whose deadlines and budgets run on their own."""

    def monotonic(self) -> float:
        return time.monotonic()


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


def service_settings(token_file: Path, read_file: Path, **overrides: Any) -> ServiceSettings:
    values: dict[str, Any] = {
        "database_url": "sqlite:///unused.db",
        "ingest_tokens_file": token_file,
        "read_tokens_file": read_file,
        "alertmanager_tokens": ALERTMANAGER,
    }
    values.update(overrides)
    return ServiceSettings(**values)


@pytest.fixture
def make_client(
    sqlite_engine: Engine, token_file: Path, read_file: Path, clock: FakeClock
) -> Iterator[ClientFactory]:
    """``make_client(engine=None, **settings)``: a started TestClient (lifespan run) on its own app."""
    started: list[Any] = []

    def make(engine: Engine | None = None, **overrides: Any) -> Any:
        settings = service_settings(token_file, read_file, **overrides)
        app = create_app(settings, engine=engine or sqlite_engine, clock=clock, registry=CollectorRegistry())
        client = TestClient(app, headers=JSON)  # as collectors and Alertmanager send their bodies
        client.__enter__()
        started.append(client)
        return client

    yield make
    for client in started:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory) -> Any:
    return make_client()


@dataclass(frozen=True)
class LiveService:
    app: FastAPI
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.app.state.phasefit.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else float(value)


LiveFactory = Callable[..., Any]


@pytest.fixture
def live_service(token_file: Path, read_file: Path) -> Iterator[LiveFactory]:
    """``with live_service(engine, **settings) as service:`` the app under uvicorn on 127.0.0.1 (its logs
    propagate to pytest's caplog: uvicorn is given no logging configuration of its own)."""

    @contextmanager
    def run(engine: Engine, **overrides: Any) -> Iterator[LiveService]:
        settings = service_settings(token_file, read_file, bind_host="127.0.0.1", **overrides)
        app = create_app(settings, engine=engine, clock=PinnedWallClock(), registry=CollectorRegistry())
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_config=None, access_log=False, backlog=2048,
            timeout_graceful_shutdown=5,
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="live-service", daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the service did not start under uvicorn")
            time.sleep(0.02)
        try:
            yield LiveService(app, port)
        finally:
            server.should_exit = True
            thread.join(timeout=15)

    yield run
