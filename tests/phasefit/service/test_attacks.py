"""Issue 16: each attack of docs/security.md's table as a test, on SQLite and PostgreSQL (``store_engine``).

- a node-bound token taking over another node's GPU or worker (403, nothing stored; an unbound token moves);
- a re-sent sample key with other values (409 naming the key, nothing changed; identical re-sends stay 200);
- 256 slow bodies under one token against a real uvicorn while another collector's batches land (200);
- reads, /metrics and the API document closed on a non-loopback address;
- a client that disconnects mid-body: one log line and code 499, never a 500 with a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from fleet.store.rows import RowBatch
from fleet.store.writer import WriteCounts
from phasefit.service.batches import BatchRejectedError
from phasefit.service.claims import references
from phasefit.service.guards import CardinalityGuard
from phasefit.service.state import store_unavailable
from phasefit.service.tokens import Token, hash_token
from phasefit.service.writes import BatchWriter, SeriesCache
from tests.phasefit.service.conftest import (
    ALERTMANAGER,
    INGEST_A,
    INGEST_B,
    JSON,
    READ,
    ClientFactory,
    LiveFactory,
    LiveService,
    auth,
)
from tests.phasefit.service.records import H200, body, engine, gpu
from tests.phasefit.service.test_read_api import GUARDED
from tests.phasefit.service.test_stores import as_one_group, rows

NODE_A = "collector-node-a-0123456789abcdef"  # bound to node-a
TABLES = ("gpu_samples", "engine_samples", "gpus", "workers", "nodes")


@pytest.fixture
def node_a_token(token_file: Path) -> str:
    with token_file.open("a") as tokens:
        tokens.write(f"node-a:{hash_token(NODE_A)}:node-a\n")
    return NODE_A


def post(client: Any, records: list[Any], token: str = INGEST_A) -> Any:
    return client.post("/v1/ingest", content=body(records), headers=auth(token))


def snapshot(engine_: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables ingest writes, in key order."""
    with engine_.connect() as connection:
        return {
            table: [tuple(row) for row in connection.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2"))]
            for table in TABLES
        }


def node_of(engine_: Engine, table: str, key: str, value: str) -> str:
    with engine_.connect() as connection:
        node: str = connection.execute(
            text(f"SELECT node FROM {table} WHERE {key} = :value"), {"value": value}
        ).scalar_one()
    return node


# --- 2. node-bound tokens bind the GPUs and workers they write ----------------------------------------------


def test_a_node_bound_token_cannot_take_over_another_nodes_gpu_or_worker(
    make_client: ClientFactory, store_engine: Engine, node_a_token: str
) -> None:
    client = make_client(engine=store_engine)
    assert post(client, [gpu(2, 0, node="node-b"), engine(1, 0, node="node-b")], INGEST_B).status_code == 200
    before = snapshot(store_engine)
    # node-a's token, records saying node-a, carrying node-b's GPU-0002 and worker-1 (and an innocent GPU).
    taken = post(client, [gpu(0, 1, node="node-a", worker_id=None), gpu(2, 1, node="node-a"),
                          engine(1, 1, node="node-a")], node_a_token)  # fmt: skip
    assert taken.status_code == 403
    errors = taken.json()["detail"]
    assert [(e["index"], e["field"]) for e in errors] == [(1, "gpu_uuid"), (1, "worker_id")]
    assert errors[0]["message"].startswith(
        "GPU 'GPU-0002' is known on node 'node-b', which token 'node-a' may not write (it writes for node-a)"
    )
    assert "worker 'worker-1' is known on node 'node-b'" in errors[1]["message"]
    assert snapshot(store_engine) == before  # nothing of the batch, not even the innocent GPU
    assert node_of(store_engine, "gpus", "gpu_uuid", "GPU-0002") == "node-b"
    assert node_of(store_engine, "workers", "worker_id", "worker-1") == "node-b"
    # References count too: its GPU said to serve node-b's worker, its worker said to use node-b's GPU.
    assert (
        post(client, [gpu(0, 1, node="node-a", worker_id="worker-1")], node_a_token).json()["detail"][0][
            "field"
        ]
        == "worker_id"
    )
    claim = engine(0, 1, node="node-a", gpu_uuids=["GPU-0000", "GPU-0002"])
    assert post(client, [claim], node_a_token).json()["detail"][0]["field"] == "gpu_uuids.1"
    assert snapshot(store_engine) == before
    # Its own new GPU and worker are fine.
    assert post(client, [gpu(0, 1, node="node-a", worker_id="worker-0"), engine(0, 1, node="node-a",
                gpu_uuids=["GPU-0000"])], node_a_token).status_code == 200  # fmt: skip


def test_a_real_move_goes_through_an_unbound_token_and_then_binds_the_other_way(
    make_client: ClientFactory, store_engine: Engine, node_a_token: str
) -> None:
    client = make_client(engine=store_engine)
    assert post(client, [gpu(2, 0, node="node-b"), engine(1, 0, node="node-b")], INGEST_B).status_code == 200
    moved = post(client, [gpu(2, 1, node="node-a"), engine(1, 1, node="node-a")], INGEST_A)  # unbound
    assert moved.status_code == 200, moved.text
    assert node_of(store_engine, "gpus", "gpu_uuid", "GPU-0002") == "node-a"
    assert node_of(store_engine, "workers", "worker_id", "worker-1") == "node-a"
    refused = post(client, [gpu(2, 2, node="node-b")], INGEST_B)
    assert refused.status_code == 403
    assert "GPU 'GPU-0002' is known on node 'node-a'" in refused.json()["detail"][0]["message"]
    assert (
        post(client, [gpu(2, 2, node="node-a"), engine(1, 2, node="node-a")], node_a_token).status_code == 200
    )
    registry = client.app.state.phasefit.registry
    assert (
        registry.get_sample_value("phasefit_service_ingest_rejections_total", {"reason": "foreign_series"})
        == 1
    )


def _writer(engine_: Engine) -> BatchWriter:
    return BatchWriter(
        engine_, threads=1, max_queued=100, max_wait_s=60, retry_after_s=1, cache=SeriesCache(),
        guard=CardinalityGuard(1000, lambda: 0.0), sku_resolver=None,
        unavailable=lambda exc: store_unavailable(engine_, exc), monotonic=lambda: 0.0,
    )  # fmt: skip


def _encoding(engine_: Engine) -> str:
    return "epoch_us" if engine_.dialect.name == "sqlite" else "datetime"


def test_in_one_group_commit_a_refused_batch_never_fails_or_follows_the_others(store_engine: Engine) -> None:
    from fleet.contract import RECORD_ADAPTER

    encoding = _encoding(store_engine)
    writer = _writer(store_engine)
    bound = Token("node-a", "", ("node-a",))
    try:
        seeded = as_one_group(writer, [("b", rows([gpu(2, 0, node="node-b"), gpu(4, 0)], encoding))],
                              plug=rows([gpu(99, 0, worker_id=None)], encoding))  # fmt: skip
        assert seeded == [WriteCounts(stored=2)]
        outcomes: list[Any] = []
        done = threading.Semaphore(0)
        plugged, release = threading.Event(), threading.Event()

        def hold(_: Any) -> None:
            plugged.set()
            release.wait(30)

        writer.submit(rows([gpu(99, 1, worker_id=None)], encoding), Token("plug", ""), hold)
        assert plugged.wait(30)
        foreign = [RECORD_ADAPTER.validate_python(gpu(2, 1, node="node-a", worker_id=None))]
        changed = [RECORD_ADAPTER.validate_python(gpu(4, 0, power_w=123.0))]
        fresh = [RECORD_ADAPTER.validate_python(gpu(5, 0))]

        def settle(outcome: WriteCounts | BaseException) -> None:
            outcomes.append(outcome)
            done.release()

        for records, token in ((foreign, bound), (changed, Token("b", "")), (fresh, Token("b", ""))):
            batch = RowBatch(encoding)  # type: ignore[arg-type]
            for record in records:
                batch.add(record)
            refs = references(records) if token.nodes else None
            writer.submit(batch.finish(), token, settle, records=records, references=refs)
        release.set()
        for _ in range(3):
            assert done.acquire(timeout=30)
    finally:
        writer.close()
    refused = [o for o in outcomes if isinstance(o, BatchRejectedError)]
    assert sorted(o.status for o in refused) == [403, 409]
    assert WriteCounts(stored=1) in outcomes  # the fresh batch, in the same group
    with store_engine.connect() as connection:
        power = connection.execute(text("SELECT power_w FROM gpu_samples WHERE gpu_uuid = 'GPU-0004'")).all()
        assert power == [(500.0,)]
        assert connection.execute(text("SELECT node FROM gpus WHERE gpu_uuid = 'GPU-0002'")).all() == [
            ("node-b",)
        ]
        assert (
            connection.execute(text("SELECT count(*) FROM gpu_samples WHERE gpu_uuid = 'GPU-0005'")).scalar()
            == 1
        )


# --- 2. a re-sent key must carry the same values ------------------------------------------------------------


def test_a_resent_key_with_other_values_is_409_naming_it_and_changes_nothing(
    make_client: ClientFactory, store_engine: Engine
) -> None:
    client = make_client(engine=store_engine)
    first = [gpu(0, 0), gpu(0, 1), engine(0, 1)]
    assert post(client, first).json() == {"accepted": 3, "stored": 3, "duplicates": 0}
    before = snapshot(store_engine)
    assert post(client, first).json() == {"accepted": 3, "stored": 0, "duplicates": 3}  # identical: 200
    assert snapshot(store_engine) == before

    changed = post(client, [gpu(0, 5), gpu(0, 1, sm_active=0.9)])  # a new window and a changed re-send
    assert changed.status_code == 409
    [error] = changed.json()["detail"]
    assert (error["index"], error["field"]) == (1, "sm_active")
    assert error["message"].startswith(
        "gpu_sample (gpu_uuid 'GPU-0000', ts 2026-03-02T12:01:00Z) is already stored with other values "
        "(sm_active: stored 0.5, sent 0.9)"
    )
    # The GPU row was last written from that key: other attributes there would rewrite it (the old bug).
    renamed = post(client, [gpu(0, 1, gpu_name=H200, gpu_index=5)])
    assert renamed.status_code == 409
    [error] = renamed.json()["detail"]
    assert error["field"] == "gpu_index"
    assert (
        "gpu_index: stored 0, sent 5; gpu_name: stored 'NVIDIA H100 80GB HBM3', sent 'NVIDIA H200'"
        in (error["message"])
    )
    role = post(client, [engine(0, 1, role="decode")])
    assert role.status_code == 409
    assert role.json()["detail"][0]["message"].count("role:") == 1  # a sample column and a worker attribute
    assert role.json()["detail"][0]["message"].startswith(
        "engine_sample (worker_id 'worker-0', ts 2026-03-02T12:01:00Z) is already stored with other values "
        "(role: stored 'prefill', sent 'decode'"
    )
    assert snapshot(store_engine) == before
    # An older window's attributes are not stored any more: its re-send cannot contradict them, and
    # rewrites nothing (the GPU row keeps the later window's).
    assert post(client, [gpu(0, 0, gpu_index=5)]).json() == {"accepted": 1, "stored": 0, "duplicates": 1}
    assert snapshot(store_engine) == before
    registry = client.app.state.phasefit.registry
    assert registry.get_sample_value("phasefit_service_ingest_rejections_total", {"reason": "conflict"}) == 3


def test_a_key_repeated_inside_one_batch_must_repeat_its_values(
    make_client: ClientFactory, store_engine: Engine
) -> None:
    client = make_client(engine=store_engine)
    answer = post(client, [gpu(1, 0), gpu(3, 0), gpu(1, 0, power_w=300.0)])
    assert answer.status_code == 409
    [error] = answer.json()["detail"]
    assert (error["index"], error["field"]) == (2, "power_w")
    assert "repeats record 0 with other values (power_w)" in error["message"]
    assert snapshot(store_engine)["gpu_samples"] == []
    same = post(client, [gpu(1, 0), gpu(1, 0), gpu(3, 0)])
    assert same.json() == {"accepted": 3, "stored": 2, "duplicates": 1}


# --- 3. slow bodies hold no admission slot, and one token cannot hold them all ------------------------------

SLOW = 256
BODY_TIMEOUT_S = 3.0


def _slow_request(port: int, token: str) -> socket.socket:
    """Headers, a Content-Length it will never honour, and the first byte of the body."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        f"POST /v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{".encode()
    )
    return sock


def _answer(sock: socket.socket, wait_s: float) -> tuple[int, dict[str, str]] | None:
    """The status and headers of the answer on ``sock``, or None if none came within ``wait_s``."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                return None
            data += chunk
    except (TimeoutError, OSError):
        return None
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
    return int(head[0].split()[1]), headers


def test_256_slow_bodies_under_one_token_do_not_stop_another_collectors_batches(
    live_service: LiveFactory, store_engine: Engine
) -> None:
    started = time.monotonic()
    with live_service(store_engine, body_timeout_s=BODY_TIMEOUT_S) as service:
        assert isinstance(service, LiveService)
        state = service.app.state.phasefit
        limit = state.settings.ingest_limit_per_token
        assert limit == 64  # the default: a quarter of the 256 admission slots
        slow = [_slow_request(service.port, INGEST_A) for _ in range(SLOW)]
        stop = threading.Event()

        def trickle() -> None:  # a byte per connection per 0.5 s: never enough, never silent
            while not stop.wait(0.5):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.sendall(b" ")

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        try:
            answers: dict[int, tuple[int, dict[str, str]]] = {}
            deadline = time.monotonic() + 10
            while len(answers) < SLOW - limit and time.monotonic() < deadline:
                for index, sock in enumerate(slow):
                    if index not in answers and (found := _answer(sock, 0.01)) is not None:
                        answers[index] = found
            refused = list(answers.values())
            assert len(refused) == SLOW - limit
            assert {status for status, _ in refused} == {429}
            assert all(h["connection"] == "close" and h["retry-after"] == "2" for _, h in refused)
            assert state.token_slots.held("token-" + hash_token(INGEST_A)[:8]) == limit
            assert state.gate.pending == 0  # a body still arriving holds no admission slot

            with httpx.Client(base_url=service.url, timeout=5) as collector:
                landed = [
                    collector.post("/v1/ingest", content=body([gpu(12, m, node="node-b")]),
                                   headers={**JSON, **auth(INGEST_B)}).status_code
                    for m in range(5)
                ]  # fmt: skip
            assert landed == [200] * 5

            held = [sock for index, sock in enumerate(slow) if index not in answers]
            timed_out = [_answer(sock, BODY_TIMEOUT_S + 5) for sock in held]
        finally:
            stop.set()
            trickler.join(5)
            for sock in slow:
                sock.close()
        assert [answer and answer[0] for answer in timed_out] == [408] * limit
        assert all(answer and answer[1]["connection"] == "close" for answer in timed_out)
        rejections = "phasefit_service_ingest_rejections_total"
        assert service.sample(rejections, {"reason": "token_busy"}) == SLOW - limit
        assert service.sample(rejections, {"reason": "body_timeout"}) == limit
        assert state.token_slots.held("token-" + hash_token(INGEST_A)[:8]) == 0
    with store_engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM gpu_samples")).scalar() == 5
    assert time.monotonic() - started < 30


def test_a_body_within_the_deadline_is_stored(live_service: LiveFactory, store_engine: Engine) -> None:
    with live_service(store_engine, body_timeout_s=BODY_TIMEOUT_S) as service:
        payload = body([gpu(0, 0), gpu(1, 0)])
        sock = socket.create_connection(("127.0.0.1", service.port))
        try:
            sock.sendall(
                f"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {INGEST_A}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
            )
            for start in range(0, len(payload), len(payload) // 4 + 1):  # in pieces, well in time
                sock.sendall(payload[start : start + len(payload) // 4 + 1])
                time.sleep(0.2)
            answer = _answer(sock, 5)
        finally:
            sock.close()
        assert answer is not None and answer[0] == 200


def test_a_slow_alertmanager_body_is_503_which_alertmanager_retries(
    live_service: LiveFactory, store_engine: Engine
) -> None:
    with live_service(store_engine, body_timeout_s=1.0) as service:
        sock = socket.create_connection(("127.0.0.1", service.port))
        try:
            sock.sendall(
                "POST /v1/alerts/alertmanager HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {ALERTMANAGER}\r\nContent-Type: application/json\r\n"
                "Content-Length: 5000\r\n\r\n{".encode()
            )
            answer = _answer(sock, 10)
        finally:
            sock.close()
        assert answer is not None and answer[0] == 503 and answer[1]["retry-after"] == "5"
        rejections = "phasefit_service_alertmanager_rejections_total"
        assert service.sample(rejections, {"reason": "body_timeout"}) == 1


# --- 4. closed by default on the network -------------------------------------------------------------------


def test_on_a_non_loopback_address_reads_metrics_and_the_api_document_need_a_read_token(
    make_client: ClientFactory, store_engine: Engine
) -> None:
    client = make_client(engine=store_engine, bind_host="0.0.0.0")
    assert client.app.state.phasefit.settings.read_mode == "token"
    for path in GUARDED:
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers=auth(INGEST_A)).status_code == 403, path
        assert client.get(path, headers=auth(READ)).status_code == 200, path
    assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200


# --- 6. a client that goes away mid-body -----------------------------------------------------------------


def test_a_client_that_disconnects_mid_body_is_one_log_line_and_code_499(
    live_service: LiveFactory, store_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with live_service(store_engine) as service:
        caplog.clear()
        sock = socket.create_connection(("127.0.0.1", service.port))
        sock.sendall(
            f"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {INGEST_A}\r\n"
            'Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"records": ['.encode()
        )
        time.sleep(0.3)
        sock.close()
        disconnects = "phasefit_service_client_disconnects_total"
        labels = {"method": "POST", "route": "/v1/ingest"}
        deadline = time.monotonic() + 10
        while service.sample(disconnects, labels) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        records = list(caplog.records)
        requests = "phasefit_service_requests_total"
        assert service.sample(disconnects, labels) == 1
        assert service.sample(requests, {**labels, "code": "499"}) == 1
        assert service.sample(requests, {**labels, "code": "500"}) == 0
        assert service.sample("phasefit_service_ingest_pending_requests") == 0
        assert state_is_clear(service)
    [line] = [r.getMessage() for r in records]
    assert re.fullmatch(
        r"127\.0\.0\.1:\d+ disconnected before its POST /v1/ingest body arrived whole; nothing stored "
        r"\(counted as 499\)",
        line,
    ), line
    assert not any(r.exc_info for r in records)
    with store_engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM gpu_samples")).scalar() == 0


def state_is_clear(service: LiveService) -> bool:
    state = service.app.state.phasefit
    return bool(state.gate.pending == 0) and state.token_slots.held("token-" + hash_token(INGEST_A)[:8]) == 0
