"""POST /v1/alerts/alertmanager with the payload captured from Alertmanager 0.25 (conventions.md §A2.1)."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.store.alerts import list_alert_events
from tests.phasefit.service.conftest import ALERTMANAGER, INGEST_A, ClientFactory, auth

# The shape of an Alertmanager 0.25.0 webhook notification (firing), as its documentation shows it.
FIRING: dict[str, Any] = {
    "receiver": "phasefit",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "PhasefitPrefillOnH200Underused",
                "cluster": "c1",
                "pod": "prefill-0",
                "severity": "warning",
            },
            "annotations": {
                "runbook_url": "https://example.invalid/rb",
                "summary": "Prefill pod holds an H200 but uses under half of its HBM.",
            },
            "startsAt": "2026-11-29T18:40:05Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example/graph?g0.expr=x",
            "fingerprint": "1a529c69dd235647",
        }
    ],
    "groupLabels": {"alertname": "PhasefitPrefillOnH200Underused", "cluster": "c1"},
    "commonLabels": {
        "alertname": "PhasefitPrefillOnH200Underused",
        "cluster": "c1",
        "pod": "prefill-0",
        "severity": "warning",
    },
    "commonAnnotations": {
        "runbook_url": "https://example.invalid/rb",
        "summary": "Prefill pod holds an H200 but uses under half of its HBM.",
    },
    "externalURL": "http://127.0.0.1:19093",
    "version": "4",
    "groupKey": '{}:{alertname="PhasefitPrefillOnH200Underused", cluster="c1"}',
    "truncatedAlerts": 0,
}


def resolved() -> dict[str, Any]:
    payload = copy.deepcopy(FIRING)
    payload["status"] = payload["alerts"][0]["status"] = "resolved"
    payload["alerts"][0]["endsAt"] = "2026-11-29T18:40:16Z"
    return payload


def deliver(client: Any, payload: Any, headers: dict[str, str] | None = None) -> Any:
    return client.post(
        "/v1/alerts/alertmanager",
        content=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "Alertmanager/0.25.0", **(headers or {})},
    )


def events(engine: Engine) -> list[Any]:
    with engine.connect() as connection:
        return list_alert_events(connection)


def test_the_captured_payload_is_stored_once_and_its_resolution_updates_the_row(
    client: Any, sqlite_engine: Engine
) -> None:
    first = deliver(client, FIRING, auth(ALERTMANAGER))
    assert first.status_code == 200, first.text
    assert first.json() == {"alerts": 1, "inserted": 1, "updated": 0}
    for _ in range(3):  # group flushes and HA peers deliver the same notification again
        assert deliver(client, FIRING, auth(ALERTMANAGER)).json() == {
            "alerts": 1,
            "inserted": 0,
            "updated": 1,
        }
    [stored] = events(sqlite_engine)
    assert stored.event.status == "firing"
    assert stored.event.ends_at is None  # 0001-01-01 means "still firing"
    assert stored.event.labels["alertname"] == "PhasefitPrefillOnH200Underused"
    assert stored.event.receiver == "phasefit"
    assert deliver(client, resolved(), auth(ALERTMANAGER)).json()["updated"] == 1
    [closed] = events(sqlite_engine)
    assert closed.id == stored.id
    assert closed.event.status == "resolved"
    assert closed.event.ends_at == datetime(2026, 11, 29, 18, 40, 16, tzinfo=UTC)
    deliver(client, FIRING, auth(ALERTMANAGER))  # a late retry of the old firing notification
    [still] = events(sqlite_engine)
    assert still.event.status == "resolved"


def test_a_refire_is_a_new_episode(client: Any, sqlite_engine: Engine) -> None:
    deliver(client, resolved(), auth(ALERTMANAGER))
    again = copy.deepcopy(FIRING)
    again["alerts"][0]["startsAt"] = "2026-11-29T19:00:00Z"
    deliver(client, again, auth(ALERTMANAGER))
    stored = events(sqlite_engine)
    assert [e.event.status for e in stored] == ["firing", "resolved"]


def test_newer_alertmanager_fields_are_tolerated_and_kept(client: Any, sqlite_engine: Engine) -> None:
    payload = copy.deepcopy(FIRING)
    payload["notification_reason"] = "new_alerts"  # Alertmanager 0.32
    payload["routeLabels"] = {"team": "inference"}  # Alertmanager 0.34
    payload["alerts"][0]["futureField"] = {"nested": True}
    assert deliver(client, payload, auth(ALERTMANAGER)).status_code == 200
    assert events(sqlite_engine)[0].event.raw["futureField"] == {"nested": True}


def test_truncated_alerts_are_counted(client: Any) -> None:
    payload = copy.deepcopy(FIRING)
    payload["truncatedAlerts"] = 3
    assert deliver(client, payload, auth(ALERTMANAGER)).status_code == 200
    registry = client.app.state.phasefit.registry
    assert registry.get_sample_value("phasefit_service_alertmanager_truncated_alerts_total") == 3


@pytest.mark.parametrize(
    "payload",
    [
        b"{not json",
        {**FIRING, "version": "3"},
        {"text": "a user-templated payload"},
        {**FIRING, "alerts": [{**FIRING["alerts"][0], "status": "pending"}]},
        {**FIRING, "alerts": [{**FIRING["alerts"][0], "fingerprint": "f" * 65}]},
        {**FIRING, "alerts": [{**FIRING["alerts"][0], "labels": {"alertname": "A\x00B"}}]},
    ],
    ids=["malformed", "version-3", "custom-payload", "unknown-status", "long-fingerprint", "nul-label"],
)
def test_bodies_that_can_never_be_valid_are_422(client: Any, sqlite_engine: Engine, payload: Any) -> None:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    answer = client.post("/v1/alerts/alertmanager", content=content, headers=auth(ALERTMANAGER))
    assert answer.status_code == 422
    assert events(sqlite_engine) == []


def test_an_oversized_notification_is_413(make_client: ClientFactory) -> None:
    client = make_client(alert_max_body_bytes=4096)
    payload = copy.deepcopy(FIRING)
    payload["commonAnnotations"]["description"] = "x" * 8192
    assert deliver(client, payload, auth(ALERTMANAGER)).status_code == 413


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), (auth("wrong-token-0123456789"), 401), (auth(INGEST_A), 401), (auth(ALERTMANAGER), 200)],
    ids=["missing", "wrong", "collector-token", "alertmanager-token"],
)
def test_bearer_auth(client: Any, sqlite_engine: Engine, headers: dict[str, str], status: int) -> None:
    assert deliver(client, FIRING, headers).status_code == status
    assert len(events(sqlite_engine)) == (1 if status == 200 else 0)


def test_basic_auth_as_alertmanager_sends_it(make_client: ClientFactory, sqlite_engine: Engine) -> None:
    client = make_client(
        alertmanager_tokens=None, alertmanager_username="am", alertmanager_password="s3cret-pass"
    )

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    refused = deliver(client, FIRING, basic("am", "wrong"))
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == "Basic"
    assert deliver(client, FIRING, basic("other", "s3cret-pass")).status_code == 401
    assert deliver(client, FIRING, basic("am", "s3cret-pass")).status_code == 200
    assert len(events(sqlite_engine)) == 1


def test_without_credentials_configured_the_receiver_refuses_unless_dev(make_client: ClientFactory) -> None:
    locked = make_client(alertmanager_tokens=None)
    answer = deliver(locked, FIRING)
    assert answer.status_code == 401
    assert "no credentials configured" in answer.json()["detail"]
    assert deliver(make_client(alertmanager_tokens=None, dev=True), FIRING).status_code == 200


def test_a_locked_store_answers_503_so_alertmanager_retries(client: Any, sqlite_engine: Engine) -> None:
    blocker = sqlite_engine.raw_connection()
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        answer = deliver(client, FIRING, auth(ALERTMANAGER))
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "5"
    assert deliver(client, FIRING, auth(ALERTMANAGER)).json()["inserted"] == 1
