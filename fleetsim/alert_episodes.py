"""Alertmanager episodes for a simulated fleet, as phasefit's webhook receiver stores them.

The dashboard's and the report's alert panels need some: one firing misplacement alert, one resolved
pool-drift alert, placed in the simulated week. The store is imported when they are stored, not before:
the collector image ships fleetsim without the store's dependencies.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from fleet.store.alerts import AlertEvent


def alert_episodes(start: datetime, pool: str, worker: str = "node03/decode-1") -> list[AlertEvent]:
    """Two episodes: a firing PhasefitWorkerMisplaced on ``worker``, a resolved PhasefitPoolRatioDrift."""
    from fleet.store.alerts import AlertEvent

    return [
        AlertEvent(
            fingerprint="4b1e6c0f9d2a7e31",
            starts_at=start + timedelta(hours=30),
            status="firing",
            receiver="phasefit",
            labels={
                "alertname": "PhasefitWorkerMisplaced",
                "severity": "warning",
                "worker": worker,
                "pool": pool,
                "kind": "decode-on-low-bandwidth",
            },
            annotations={"summary": "A worker runs on a GPU model that does not suit its bottleneck."},
        ),
        AlertEvent(
            fingerprint="9c0d51e2aa3f6b70",
            starts_at=start + timedelta(hours=62),
            status="resolved",
            ends_at=start + timedelta(hours=66),
            receiver="phasefit",
            labels={"alertname": "PhasefitPoolRatioDrift", "severity": "warning", "pool": pool},
            annotations={"summary": "A pool's prefill:decode capacity no longer matches its traffic."},
        ),
    ]


def store_alert_episodes(connection: Connection, start: datetime, pool: str) -> None:
    """:func:`alert_episodes` into the store, each received a minute after it started."""
    from fleet.store.alerts import upsert_alert_event

    for event in alert_episodes(start, pool):
        upsert_alert_event(connection, event, now=event.starts_at + timedelta(minutes=1))
