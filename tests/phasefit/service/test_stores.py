"""The service end to end on both stores (SQLite, and PostgreSQL when PHASEFIT_TEST_POSTGRES_URL is set), and
the group-commit writer's per-batch outcomes."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.contract import RECORD_ADAPTER
from fleet.store.alerts import list_alert_events
from fleet.store.queries import table_counts
from fleet.store.rows import RowBatch
from fleet.store.writer import WriteCounts, write_sample_rows
from phasefit.service import writes
from phasefit.service.guards import CardinalityExceededError, CardinalityGuard
from phasefit.service.state import store_unavailable
from phasefit.service.tokens import Token
from phasefit.service.writes import BatchWriter, SeriesCache
from tests.phasefit.service.conftest import ALERTMANAGER, INGEST_A, ClientFactory, auth
from tests.phasefit.service.records import body, engine, fleet_batch, gpu
from tests.phasefit.service.test_alerts import FIRING, deliver, resolved


def test_ingest_read_and_alerts_end_to_end(make_client: ClientFactory, store_engine: Engine) -> None:
    client = make_client(engine=store_engine)
    records = fleet_batch(minutes=5, gpus=4)
    assert client.post("/v1/ingest", content=body(records), headers=auth(INGEST_A)).json()["stored"] == 30
    again = client.post(
        "/v1/ingest",
        content=body(records, compress=True),
        headers={**auth(INGEST_A), "Content-Encoding": "gzip"},
    )
    assert again.json() == {"accepted": 30, "stored": 0, "duplicates": 30}
    bad = client.post("/v1/ingest", content=body([gpu(9, 9), gpu(9, 9, sm_active=3)]), headers=auth(INGEST_A))
    assert bad.status_code == 422
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpu_samples"], counts["engine_samples"], counts["gpus"]) == (20, 10, 4)
    assert client.get("/v1/fleet").json()["gpus"] == 4
    assert [w["worker_id"] for w in client.get("/v1/workers").json()["items"]] == ["worker-0", "worker-1"]
    samples = client.get(
        "/v1/workers/worker-1/samples", params={"from": "2026-03-02T12:00:00Z", "step": "2m"}
    )
    assert [p["samples"] for p in samples.json()["engine"]] == [2, 2, 1]
    assert client.get("/readyz").status_code == 200
    assert deliver(client, FIRING, auth(ALERTMANAGER)).json()["inserted"] == 1
    assert deliver(client, FIRING, auth(ALERTMANAGER)).json()["inserted"] == 0
    assert deliver(client, resolved(), auth(ALERTMANAGER)).status_code == 200
    with store_engine.connect() as connection:
        [event] = list_alert_events(connection)
    assert event.event.status == "resolved" and event.event.ends_at is not None
    assert "phasefit_service_store_up 1.0" in client.get("/metrics").text
    for path, params in (("/v1/workers", {"model": "a\x00b"}), ("/v1/workers/a%00b", {}),
                         ("/v1/findings", {"pool": "\x00"})):  # fmt: skip
        assert client.get(path, params=params).status_code == 422, path  # PostgreSQL text cannot hold NUL


def rows(records: list[dict[str, Any]], encoding: str) -> RowBatch:
    batch = RowBatch(encoding)  # type: ignore[arg-type]
    for record in records:
        batch.add(RECORD_ADAPTER.validate_python(record))
    return batch.finish()


def as_one_group(writer: BatchWriter, batches: list[tuple[str, RowBatch]], plug: RowBatch) -> list[Any]:
    """Write ``batches`` as one group: a plug batch first keeps the writer thread busy (in its callback)
    until all of them are queued."""
    plugged, release, settled = threading.Event(), threading.Event(), threading.Semaphore(0)
    results: dict[int, Any] = {}

    def hold(_: Any) -> None:
        plugged.set()
        release.wait(30)

    writer.submit(plug, Token("plug", ""), hold)
    assert plugged.wait(30)
    for index, (token, batch) in enumerate(batches):

        def settle(outcome: Any, index: int = index) -> None:
            results[index] = outcome
            settled.release()

        writer.submit(batch, Token(token, ""), settle)
    release.set()
    for _ in batches:
        assert settled.acquire(timeout=30)
    return [results[i] for i in range(len(batches))]


def test_a_group_commit_reports_each_batchs_own_counts(
    store_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[int] = []

    def counting(connection: Any, batch: RowBatch, **kwargs: Any) -> WriteCounts:
        written.append(len(batch))
        return write_sample_rows(connection, batch, **kwargs)

    monkeypatch.setattr(writes, "write_sample_rows", counting)
    encoding = "epoch_us" if store_engine.dialect.name == "sqlite" else "datetime"
    writer = BatchWriter(
        store_engine,
        threads=1,
        max_queued=100,
        max_wait_s=60,
        retry_after_s=1,
        cache=SeriesCache(),
        guard=CardinalityGuard(6, lambda: 0.0),
        sku_resolver=None,
        unavailable=lambda exc: store_unavailable(store_engine, exc),
        monotonic=lambda: 0.0,
    )
    try:
        fresh = as_one_group(
            writer,
            [
                ("a", rows([gpu(0, 0), gpu(1, 0), engine(0, 0)], encoding)),  # 3 new series
                ("a", rows([gpu(0, 1), gpu(1, 1)], encoding)),
                ("a", rows([gpu(2, 0)], encoding)),  # 1 new: 4 of token a's 6
            ],
            plug=rows([gpu(99, 0, worker_id=None)], encoding),
        )
        assert fresh == [WriteCounts(stored=3), WriteCounts(stored=2), WriteCounts(stored=1)]
        assert written == [1, 6]  # the plug, then the whole group in one statement
        mixed = as_one_group(
            writer,
            [
                ("a", rows([gpu(0, 1), gpu(0, 2)], encoding)),  # half a re-send: written batch by batch
                ("a", rows([gpu(3, 0), gpu(4, 0), gpu(5, 0)], encoding)),  # 3 new would make 7 > 6
                ("b", rows([gpu(6, 0, node="node-b")], encoding)),  # another token's budget
            ],
            plug=rows([gpu(99, 1, worker_id=None)], encoding),
        )
    finally:
        writer.close()
    assert mixed[0] == WriteCounts(stored=1, duplicates=1)
    assert isinstance(mixed[1], CardinalityExceededError)
    assert mixed[2] == WriteCounts(stored=1)
    assert written[2:] == [1, 3, 2, 1]  # plug, the accepted two as one (rolled back: a duplicate), one by one
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpu_samples"], counts["engine_samples"], counts["gpus"], counts["workers"]) == (
        9,
        1,
        5,
        1,
    )
