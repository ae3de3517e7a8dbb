"""Alertmanager events (idempotent on fingerprint and startsAt) and weekly reports (one per ISO week)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from fleet.store.alerts import AlertEvent, list_alert_events, upsert_alert_event
from fleet.store.engine import writing
from fleet.store.reports import Report, check_week, get_report, iso_week, list_reports, put_report
from tests.fleet.store_factories import T0

STILL_FIRING = datetime(1, 1, 1, tzinfo=UTC)  # what Alertmanager sends as endsAt of a firing alert


def alert(
    status: str = "firing", ends_at: datetime | None = STILL_FIRING, summary: str = "lost tokens"
) -> AlertEvent:
    return AlertEvent(
        fingerprint="a1b2c3d4e5f60718",
        starts_at=T0,
        status=status,  # type: ignore[arg-type]
        receiver="phasefit",
        ends_at=ends_at,
        labels={"alertname": "PhasefitWorkerMisplaced", "worker": "worker-1"},
        annotations={"summary": summary},
        generator_url="http://prometheus:9090/graph",
        raw={
            "status": status,
            "fingerprint": "a1b2c3d4e5f60718",
            "labels": {"alertname": "PhasefitWorkerMisplaced"},
        },
    )


def test_a_redelivered_alert_is_stored_once_and_resolution_updates_it(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        assert upsert_alert_event(connection, alert(), now=T0) == "inserted"
        assert upsert_alert_event(connection, alert(), now=T0 + timedelta(minutes=1)) == "updated"
    with store_engine.connect() as connection:
        (firing,) = list_alert_events(connection)
    assert firing.event.status == "firing" and firing.event.ends_at is None
    ended = T0 + timedelta(minutes=30)
    with writing(store_engine) as connection:
        upsert_alert_event(connection, alert("resolved", ended, "gone"), now=ended)
        upsert_alert_event(connection, alert(), now=ended + timedelta(minutes=1))  # a late retry of "firing"
    with store_engine.connect() as connection:
        (resolved,) = list_alert_events(connection)
        assert list_alert_events(connection, status="firing") == []
        assert len(list_alert_events(connection, alertname="PhasefitWorkerMisplaced", since=T0)) == 1
    assert (resolved.event.status, resolved.event.ends_at) == ("resolved", ended)
    assert resolved.event.annotations == {"summary": "gone"} and resolved.event.raw["status"] == "resolved"
    assert resolved.received_at == T0 and resolved.updated_at == ended + timedelta(minutes=1)


def test_a_new_firing_of_the_same_alert_is_a_new_episode(store_engine: Engine) -> None:
    refired = AlertEvent(fingerprint="a1b2c3d4e5f60718", starts_at=T0 + timedelta(hours=2), status="firing",
                         receiver="phasefit")  # fmt: skip
    with writing(store_engine) as connection:
        upsert_alert_event(connection, alert(), now=T0)
        assert upsert_alert_event(connection, refired, now=T0) == "inserted"
    with store_engine.connect() as connection:
        assert [e.event.starts_at for e in list_alert_events(connection)] == [T0 + timedelta(hours=2), T0]


def test_reports_are_one_per_iso_week_and_listed_newest_first(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        put_report(connection, Report("2026-W09", "markdown", T0, {"lost_tokens_per_s": 1200.0}, "# week 9"))
        put_report(connection, Report("2026-W10", "markdown", T0, {}, "# week 10"))
        put_report(connection, Report("2026-W09", "html", T0 + timedelta(days=1), {"lost": 1}, "<h1>9</h1>"))
    with store_engine.connect() as connection:
        week_9 = get_report(connection, "2026-W09")
        listed = list_reports(connection)
        assert get_report(connection, "2025-W01") is None
    assert week_9 == Report("2026-W09", "html", T0 + timedelta(days=1), {"lost": 1}, "<h1>9</h1>")
    assert [(r.week, r.format) for r in listed] == [("2026-W10", "markdown"), ("2026-W09", "html")]


def test_week_names() -> None:
    assert iso_week(T0) == "2026-W10"
    assert iso_week(datetime(2027, 1, 1, tzinfo=UTC)) == "2026-W53"
    assert check_week("2026-W53") == "2026-W53"
    for bad in ("2025-W53", "2026-W00", "2026-48", "2026-W7"):
        with pytest.raises(ValueError, match="ISO week"):
            check_week(bad)
    for edge in ("0001-W01", "9999-W52", "1999-W52", "2100-W01"):  # no sample can lie there
        with pytest.raises(ValueError, match="outside the years 2000-2099"):
            check_week(edge)
