"""Issue 16: what a store may already hold from before the service bounded its times (rows at year 1 and year
9999, and on SQLite epoch values a few hours beyond the calendar, which ``0001-01-01T00:00:00+05:00`` used to
store) is read by every read path and by ``phasefit report`` without a 500, on SQLite and PostgreSQL.

The rows are planted with the store's own writers, bypassing validation (``model_construct``), as an older
service would have written them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from fleet.contract import EngineSample, Finding, FindingKind, GpuSample, Role
from fleet.store.alerts import AlertEvent, list_alert_events, upsert_alert_event
from fleet.store.analysis import put_analysis
from fleet.store.columns import to_epoch_us
from fleet.store.engine import writing
from fleet.store.findings import upsert_findings
from fleet.store.rows import RowBatch
from fleet.store.writer import time_encoding_for, write_batch
from phasefit.cli.report import make_report
from tests.fleet.store_factories import engine_sample, gpu_sample
from tests.phasefit.service.conftest import READ, ClientFactory, auth

YEAR_1 = datetime(1, 1, 1, tzinfo=UTC)
YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 13, 0, tzinfo=UTC)  # the FakeClock's
WEEK = "2026-W10"  # the week of tests.fleet.store_factories.T0, where the ordinary rows lie
EDGE_WORKERS = ("worker-5", "worker-6")  # planted at year 1 and year 9999
BEYOND_US = 5 * 3600 * 1_000_000  # 5 h past either edge of the calendar
POOL = "default/meta-llama/Llama-3.1-70B-Instruct"
WIDE = {"from": "1970-01-01T00:00:00Z", "to": "2099-12-31T00:00:00Z", "step": "30d"}


def plant(engine_: Engine) -> None:
    """Ordinary telemetry of one worker in WEEK, plus GPUs, workers, samples, alerts and an analysis run at
    the calendar's edges."""
    with writing(engine_) as connection:
        batch = RowBatch(time_encoding_for(connection))
        for minute in range(30):  # the ordinary fleet: GPUs 0-1 and worker-0
            batch.add(gpu_sample(0, minute))
            batch.add(gpu_sample(1, minute))
            batch.add(engine_sample(0, minute))
        for worker, ts in zip((5, 6), (YEAR_1, YEAR_9999), strict=True):
            for gpu in (2 * worker, 2 * worker + 1):
                batch.add(GpuSample.model_construct(**{**dict(gpu_sample(gpu)), "ts": ts}))
            batch.add(EngineSample.model_construct(**{**dict(engine_sample(worker)), "ts": ts}))
        write_batch(connection, batch.finish())
        events = (("edge-start-1", YEAR_1, None), ("edge-start-9999", YEAR_9999, YEAR_9999),
                  ("edge-end-9999", NOW - timedelta(days=1), YEAR_9999))  # fmt: skip
        for fingerprint, starts_at, ends_at in events:
            event = AlertEvent(
                fingerprint=fingerprint, starts_at=starts_at, ends_at=ends_at, receiver="phasefit",
                status="resolved" if ends_at else "firing",
                labels={"alertname": "PhasefitWorkerMisplaced", "pool": POOL},
            )  # fmt: skip
            upsert_alert_event(connection, event, now=NOW)
        put_analysis(connection, created_at=YEAR_9999, from_ts=YEAR_1, to_ts=YEAR_9999,
                     summary={"fleet": {"lost_tokens_per_s": 1.0}, "pools": []})  # fmt: skip
        if time_encoding_for(connection) == "epoch_us":  # beyond the calendar: only SQLite's integers hold it
            connection.execute(
                text("UPDATE alert_events SET starts_at = :us WHERE fingerprint = 'edge-start-1'"),
                {"us": to_epoch_us(YEAR_1) - BEYOND_US},
            )
            connection.execute(
                text(
                    "UPDATE raw_gpu_samples SET ts = :us "
                    "WHERE gpu_key = (SELECT id FROM gpu_keys WHERE gpu_uuid = 'GPU-0013')"
                ),
                {"us": to_epoch_us(YEAR_9999) + BEYOND_US},
            )


READS: list[tuple[str, dict[str, str]]] = [
    ("/v1/fleet", {}),
    ("/v1/fleet", {"since": "1970-01-01T00:00:00Z"}),
    ("/v1/workers", {}),
    *((f"/v1/workers/{worker}", {}) for worker in EDGE_WORKERS),
    *((f"/v1/workers/{worker}/samples", {}) for worker in EDGE_WORKERS),
    *((f"/v1/workers/{worker}/samples", WIDE) for worker in EDGE_WORKERS),
    ("/v1/workers/worker-0/samples", {"from": "2026-03-02T12:00:00Z", "to": "2026-03-02T13:00:00Z"}),
    ("/v1/findings", {}),
    ("/v1/lost-tokens", {}),
    ("/v1/lost-tokens", WIDE),
    ("/v1/reports", {}),
    ("/metrics", {}),
    ("/readyz", {}),
]


def read_everything(client: Any) -> dict[str, int]:
    return {
        f"{path} {params}": client.get(path, params=params, headers=auth(READ)).status_code
        for path, params in READS
    }


def test_rows_at_the_calendar_edges_are_read_without_a_500(
    make_client: ClientFactory, store_url: str, store_engine: Engine
) -> None:
    plant(store_engine)
    client = make_client(engine=store_engine, read_access="token")
    assert read_everything(client) == dict.fromkeys(read_everything(client), 200)
    edge = client.get(f"/v1/workers/{EDGE_WORKERS[1]}", headers=auth(READ)).json()
    assert edge["last_seen"].startswith("9999-12-31T23:59:59")
    with store_engine.connect() as connection:
        events = {e.event.fingerprint: e.event for e in list_alert_events(connection, limit=None)}
    assert events["edge-start-1"].starts_at == YEAR_1  # SQLite: 5 h before the calendar, read at its start
    assert events["edge-start-9999"].starts_at == YEAR_9999
    rendered, written = make_report(WEEK, database_url=store_url, out=None)
    assert WEEK in rendered.html and written == []
    assert client.get(f"/v1/reports/{WEEK}", headers=auth(READ)).status_code == 200


def test_a_finding_at_the_calendar_edges_is_read_without_a_500(
    make_client: ClientFactory, store_engine: Engine
) -> None:
    plant(store_engine)
    edge = Finding(kind=FindingKind.ROLE_DRIFT, worker_id="worker-0", role=Role.DECODE, first_seen=NOW,
                   last_seen=NOW)  # fmt: skip
    with writing(store_engine) as connection:
        upsert_findings(connection, [edge.model_copy(update={"first_seen": YEAR_1, "last_seen": YEAR_9999})],
                        now=NOW)  # fmt: skip
    client = make_client(engine=store_engine, read_access="token")
    assert read_everything(client) == dict.fromkeys(read_everything(client), 200)
