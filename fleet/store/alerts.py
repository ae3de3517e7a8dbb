"""Alertmanager webhook events, idempotent on (fingerprint, starts_at): one row per alert episode.

A re-delivered notification updates the row instead of adding one; resolution sets status and ends_at.
Resolved is final for an episode (Alertmanager gives a re-fired alert a new startsAt), so a late retry of
an older "firing" notification cannot reopen it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, case, select
from sqlalchemy.dialects import postgresql, sqlite

from fleet.store.engine import is_sqlite
from fleet.store.schema import AlertEventRow, table_of

AlertStatus = Literal["firing", "resolved"]


@dataclass(frozen=True)
class AlertEvent:
    """One alert of a webhook notification. ``ends_at`` None (or Alertmanager's 0001-01-01) while firing."""

    fingerprint: str
    starts_at: datetime
    status: AlertStatus
    receiver: str
    ends_at: datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    generator_url: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)  # the alert object as delivered


@dataclass(frozen=True)
class StoredAlertEvent:
    id: int
    event: AlertEvent
    received_at: datetime
    updated_at: datetime


def _real_end(ends_at: datetime | None) -> datetime | None:
    return None if ends_at is None or ends_at.year <= 1 else ends_at


def upsert_alert_event(
    connection: Connection, event: AlertEvent, *, now: datetime
) -> Literal["inserted", "updated"]:
    """Store one alert episode or update it; says which happened."""
    if event.status not in ("firing", "resolved"):
        raise ValueError(f"alert status must be 'firing' or 'resolved', not {event.status!r}")
    table = table_of(AlertEventRow)
    exists = connection.execute(
        select(AlertEventRow.id).where(
            AlertEventRow.fingerprint == event.fingerprint, AlertEventRow.starts_at == event.starts_at
        )
    ).first()
    statement = sqlite.insert(table) if is_sqlite(connection) else postgresql.insert(table)
    statement = statement.values(
        fingerprint=event.fingerprint,
        starts_at=event.starts_at,
        ends_at=_real_end(event.ends_at),
        status=event.status,
        alertname=event.labels.get("alertname"),
        labels=event.labels,
        annotations=event.annotations,
        receiver=event.receiver,
        generator_url=event.generator_url,
        raw=event.raw,
        received_at=now,
        updated_at=now,
    )
    new = statement.excluded
    was_resolved = table.c.status == "resolved"
    keep_old = was_resolved & (new.status == "firing")
    connection.execute(
        statement.on_conflict_do_update(
            index_elements=["fingerprint", "starts_at"],
            set_={
                "status": case((was_resolved, table.c.status), else_=new.status),
                "ends_at": case((keep_old, table.c.ends_at), else_=new.ends_at),
                "labels": case((keep_old, table.c.labels), else_=new.labels),
                "annotations": case((keep_old, table.c.annotations), else_=new.annotations),
                "receiver": new.receiver,
                "generator_url": new.generator_url,
                "raw": case((keep_old, table.c.raw), else_=new.raw),
                "alertname": new.alertname,
                "updated_at": new.updated_at,
            },
        )
    )
    return "updated" if exists is not None else "inserted"


def list_alert_events(
    connection: Connection,
    *,
    status: AlertStatus | None = None,
    alertname: str | None = None,
    since: datetime | None = None,
    limit: int | None = 100,
    offset: int = 0,
) -> list[StoredAlertEvent]:
    """Alert episodes, latest start first; ``since`` keeps episodes that started at or after it."""
    statement = select(AlertEventRow).order_by(AlertEventRow.starts_at.desc(), AlertEventRow.id.desc())
    if status is not None:
        statement = statement.where(AlertEventRow.status == status)
    if alertname is not None:
        statement = statement.where(AlertEventRow.alertname == alertname)
    if since is not None:
        statement = statement.where(AlertEventRow.starts_at >= since)
    rows = connection.execute(statement.offset(offset).limit(limit)).mappings()
    return [
        StoredAlertEvent(
            row["id"],
            AlertEvent(
                fingerprint=row["fingerprint"],
                starts_at=row["starts_at"],
                status=row["status"],
                receiver=row["receiver"],
                ends_at=_real_end(row["ends_at"]),
                labels=row["labels"],
                annotations=row["annotations"],
                generator_url=row["generator_url"],
                raw=row["raw"],
            ),
            row["received_at"],
            row["updated_at"],
        )
        for row in rows
    ]
