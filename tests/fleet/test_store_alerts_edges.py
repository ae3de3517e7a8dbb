"""Alert events and stored times at the calendar's edges (issue 16), on SQLite and PostgreSQL.

Before the service bounded the times it accepts, a notification with ``startsAt`` at year 1 or 9999 was
stored (SQLite: as integer microseconds, also a few hours beyond the calendar when an offset pushed it
there). Reading such rows must not fail the whole read; writing a time that UTC cannot represent is refused
with a message that says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import StatementError

from fleet.store.alerts import AlertEvent, list_alert_events, upsert_alert_event
from fleet.store.columns import from_epoch_us, to_epoch_us
from fleet.store.engine import is_sqlite, writing

YEAR_1 = datetime(1, 1, 1, tzinfo=UTC)
YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
FIVE_HOURS_US = 5 * 3600 * 1_000_000


def event(fingerprint: str, starts_at: datetime, ends_at: datetime | None = None) -> AlertEvent:
    return AlertEvent(
        fingerprint=fingerprint,
        starts_at=starts_at,
        ends_at=ends_at,
        status="resolved" if ends_at is not None else "firing",
        receiver="phasefit",
        labels={"alertname": "PhasefitWorkerMisplaced"},
    )


def test_epoch_microseconds_beyond_the_calendar_read_as_its_first_or_last_instant() -> None:
    assert from_epoch_us(to_epoch_us(YEAR_1)) == YEAR_1
    assert from_epoch_us(to_epoch_us(YEAR_9999)) == YEAR_9999
    assert from_epoch_us(to_epoch_us(YEAR_1) - FIVE_HOURS_US) == YEAR_1
    assert from_epoch_us(to_epoch_us(YEAR_9999) + FIVE_HOURS_US) == YEAR_9999
    assert from_epoch_us(-(2**63)) == YEAR_1 and from_epoch_us(2**63 - 1) == YEAR_9999
    # what "0001-01-01T00:00:00+05:00" became on SQLite: 5 h before the calendar starts
    shifted = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    assert to_epoch_us(shifted) == to_epoch_us(YEAR_1) - FIVE_HOURS_US


def test_alerts_at_the_calendar_edges_are_listed(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        upsert_alert_event(connection, event("edge-1", YEAR_1), now=NOW)
        upsert_alert_event(connection, event("edge-9999", YEAR_9999, YEAR_9999), now=NOW)
        upsert_alert_event(connection, event("ordinary", NOW, YEAR_9999), now=NOW)
        if is_sqlite(store_engine):  # as an older service stored "0001-01-01T00:00:00+05:00"
            connection.execute(
                text("UPDATE alert_events SET starts_at = :us, ends_at = :us WHERE fingerprint = 'edge-1'"),
                {"us": to_epoch_us(YEAR_1) - FIVE_HOURS_US},
            )
    with store_engine.connect() as connection:
        listed = {s.event.fingerprint: s.event for s in list_alert_events(connection, limit=None)}
        recent = list_alert_events(connection, since=NOW - timedelta(days=1))
    assert list(listed) == ["edge-9999", "ordinary", "edge-1"]  # latest start first
    assert listed["edge-1"].starts_at == YEAR_1
    assert listed["edge-1"].ends_at is None  # year 1 is Alertmanager's "still firing", read or written
    assert listed["edge-9999"].starts_at == YEAR_9999 and listed["ordinary"].ends_at == YEAR_9999
    assert [s.event.fingerprint for s in recent] == ["edge-9999", "ordinary"]


def test_a_time_utc_cannot_hold_is_refused_in_words(store_engine: Engine) -> None:
    before_the_calendar = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    if is_sqlite(store_engine):  # microseconds can hold it: read back at the calendar's start
        with writing(store_engine) as connection:
            upsert_alert_event(connection, event("shifted", before_the_calendar), now=NOW)
        with store_engine.connect() as connection:
            [stored] = list_alert_events(connection)
        assert stored.event.starts_at == YEAR_1
        return
    refused = pytest.raises(StatementError, match="outside the calendar in UTC")
    with refused, writing(store_engine) as connection:
        upsert_alert_event(connection, event("shifted", before_the_calendar), now=NOW)
