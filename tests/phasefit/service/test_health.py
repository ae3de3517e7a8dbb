"""/healthz and /readyz, and how the service starts against stores in every state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import text

from fleet.store.engine import make_engine
from tests.phasefit.service.conftest import INGEST_A, ClientFactory, auth
from tests.phasefit.service.records import body, gpu


def test_ready_when_the_schema_is_at_head(client: Any) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["schema_state"] == "current"
    assert ready["schema_revision"] == ready["head_revision"]


def test_an_empty_store_gets_the_schema_at_start_unless_told_not_to(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    fresh = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    untouched = make_engine(f"sqlite:///{tmp_path / 'untouched.db'}")
    try:
        assert make_client(engine=fresh).get("/readyz").status_code == 200
        client = make_client(engine=untouched, create_schema=False)
        answer = client.get("/readyz")
        assert answer.status_code == 503 and answer.json()["schema_state"] == "empty"
        refused = client.post("/v1/ingest", content=body([gpu()]), headers=auth(INGEST_A))
        assert refused.status_code == 503 and "phasefit db upgrade" in refused.json()["detail"]
        assert client.get("/v1/fleet").status_code == 503
    finally:
        fresh.dispose()
        untouched.dispose()


def test_a_store_at_another_revision_is_not_ready_and_never_migrated(
    make_client: ClientFactory, sqlite_engine: Any
) -> None:
    with sqlite_engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'f00dcafe'"))
    client = make_client()
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["schema_state"] == "ahead"
    with sqlite_engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "f00dcafe"
