"""POST /v1/ingest on SQLite: stored whole or not at all, idempotent, authenticated, limited."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.store.queries import table_counts
from phasefit.service.tokens import hash_token
from tests.phasefit.service.conftest import INGEST_A, INGEST_B, READ, ClientFactory, FakeClock, auth
from tests.phasefit.service.records import body, engine, fleet_batch, gpu


def samples(engine_: Engine) -> int:
    with engine_.connect() as connection:
        counts = table_counts(connection)
    return counts["gpu_samples"] + counts["engine_samples"]


def post(client: Any, records: list[Any], token: str = INGEST_A, **kwargs: Any) -> Any:
    return client.post("/v1/ingest", content=body(records), headers=auth(token), **kwargs)


def test_a_batch_is_stored_and_a_resent_batch_stores_nothing_twice(
    client: Any, sqlite_engine: Engine
) -> None:
    records = fleet_batch(minutes=3, gpus=4)
    first = post(client, records)
    assert first.status_code == 200, first.text
    assert first.json() == {"accepted": 18, "stored": 18, "duplicates": 0}
    again = client.post(
        "/v1/ingest",
        content=body(records, compress=True),
        headers={**auth(INGEST_A), "Content-Encoding": "gzip"},
    )
    assert again.json() == {"accepted": 18, "stored": 0, "duplicates": 18}
    overlapping = post(client, records[-6:] + fleet_batch(minutes=4, gpus=4)[-6:])
    assert overlapping.json() == {"accepted": 12, "stored": 6, "duplicates": 6}
    assert samples(sqlite_engine) == 24
    with sqlite_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpus"], counts["workers"], counts["nodes"]) == (4, 2, 1)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer not-a-known-token-at-all"}, 401),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401),
        (auth(READ), 403),
    ],
    ids=["missing", "wrong", "not-bearer", "read-only"],
)
def test_credentials_are_checked_before_anything_is_stored(
    client: Any, sqlite_engine: Engine, headers: dict[str, str], status: int
) -> None:
    answer = client.post("/v1/ingest", content=body(fleet_batch()), headers=headers)
    assert answer.status_code == status
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert samples(sqlite_engine) == 0


def test_removing_a_line_from_the_token_file_revokes_that_collector_at_once(
    client: Any, token_file: Path, sqlite_engine: Engine
) -> None:
    assert post(client, [gpu(0, 0)]).status_code == 200
    assert post(client, [gpu(1, 0, node="node-b")], token=INGEST_B).status_code == 200
    token_file.write_text(f"node-b:{hash_token(INGEST_B)}:node-b\n# collector A revoked\n")
    revoked = post(client, [gpu(0, 1)])
    assert revoked.status_code == 401
    assert revoked.json() == {"detail": "unknown or revoked token"}
    assert post(client, [gpu(1, 1, node="node-b")], token=INGEST_B).status_code == 200
    token_file.write_text("this line is not a token file entry: refused, so the previous tokens stay\n")
    assert post(client, [gpu(1, 2, node="node-b")], token=INGEST_B).status_code == 200
    assert samples(sqlite_engine) == 4


def test_a_node_bound_token_cannot_write_another_nodes_telemetry(client: Any, sqlite_engine: Engine) -> None:
    answer = post(client, [gpu(8, 0, node="node-b-2"), gpu(9, 0, node="node-c")], token=INGEST_B)
    assert answer.status_code == 403
    assert answer.json()["detail"] == [
        {"index": 1, "field": "node", "message": "this token may not write records for node 'node-c'"}
    ]
    assert samples(sqlite_engine) == 0


BAD_RECORDS: list[tuple[str, Any, int | None, str | None]] = [
    ("ratio above 1", gpu(0, 0, sm_active=1.5), 0, "sm_active"),
    ("negative ratio", gpu(0, 0, dram_active=-0.1), 0, "dram_active"),
    ("wrong type", gpu(0, 0, gpu_index="zero"), 0, "gpu_index"),
    ("missing field", {k: v for k, v in gpu(0, 0).items() if k != "node"}, 0, "node"),
    ("unknown field", gpu(0, 0, verdict="misplaced"), 0, "verdict"),
    ("naive timestamp", gpu(0, 0, ts="2026-03-02T12:00:00"), 0, "ts"),
    ("unknown kind", gpu(0, 0, kind="cpu_sample"), 0, "kind"),
    ("not an object", [1, 2, 3], 0, None),
    ("huge string", gpu(0, 0, gpu_name="H" * 100_000), 0, "gpu_name"),
    ("control character", gpu(0, 0, node="node\n0"), 0, "node"),
    ("NUL in a uuid list", engine(0, 0, gpu_uuids=["GPU-0000", "GPU-\x00"]), 0, "gpu_uuids.1"),
    ("integer beyond 64 bits", gpu(0, 0, mem_used_bytes=2**64), 0, "mem_used_bytes"),
    ("NaN ratio", gpu(0, 0, tensor_active=float("nan")), 0, "tensor_active"),
    ("a concurrency cap of 0", engine(0, 0, max_running_requests=0), 0, "max_running_requests"),
    ("a negative concurrency cap", engine(0, 0, max_running_requests=-1), 0, "max_running_requests"),
    ("a float concurrency cap", engine(0, 0, max_running_requests=256.0), 0, "max_running_requests"),
    ("a boolean concurrency cap", engine(0, 0, max_running_requests=True), 0, "max_running_requests"),
]


@pytest.mark.parametrize(
    ("record", "index", "field"), [case[1:] for case in BAD_RECORDS], ids=[case[0] for case in BAD_RECORDS]
)
def test_an_invalid_record_names_its_index_and_field_and_nothing_is_stored(
    client: Any, sqlite_engine: Engine, record: Any, index: int, field: str | None
) -> None:
    good = [gpu(1, 0), engine(0, 0)]
    answer = post(client, [*good, record]) if index is None else post(client, [record, *good])
    assert answer.status_code == 422, answer.text
    errors = answer.json()["detail"]
    assert {"index": index, "field": field} == {k: errors[0][k] for k in ("index", "field")}
    assert errors[0]["message"]
    assert samples(sqlite_engine) == 0


def test_a_bad_record_late_in_a_batch_still_stores_nothing(client: Any, sqlite_engine: Engine) -> None:
    records = [*fleet_batch(minutes=5, gpus=8), gpu(3, 9, power_w=-5)]
    answer = post(client, records)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["index"] == len(records) - 1
    assert samples(sqlite_engine) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[" * 50_000 + b"]" * 50_000, "not valid JSON"),
        (json.dumps({"records": {"a": 1}}).encode(), "valid array"),
        (json.dumps({"records": [], "extra": 1}).encode(), "Extra inputs"),
        (json.dumps([{"kind": "gpu_sample"}]).encode(), "not a JSON object"),
        (b"", "not valid JSON"),
    ],
    ids=["malformed", "deep-nesting", "records-not-a-list", "extra-envelope-field", "bare-list", "empty"],
)
def test_malformed_envelopes_are_422(
    client: Any, sqlite_engine: Engine, content: bytes, message: str
) -> None:
    answer = client.post("/v1/ingest", content=content, headers=auth(INGEST_A))
    assert answer.status_code == 422
    assert message in answer.json()["detail"][0]["message"]
    assert samples(sqlite_engine) == 0


def test_a_10_mb_body_is_413_and_a_gzip_bomb_is_413(
    make_client: ClientFactory, sqlite_engine: Engine
) -> None:
    client = make_client(max_body_bytes=1024 * 1024, max_decompressed_bytes=4 * 1024 * 1024)
    big = b'{"records": [' + b" " * (10 * 1024 * 1024) + b"]}"
    assert client.post("/v1/ingest", content=big, headers=auth(INGEST_A)).status_code == 413
    streamed = client.post(
        "/v1/ingest", content=iter([big[:5_000_000], big[5_000_000:]]), headers=auth(INGEST_A)
    )
    assert streamed.status_code == 413  # no Content-Length: counted as it streams
    bomb = gzip.compress(b'{"records": [' + b" " * (64 * 1024 * 1024) + b"]}", compresslevel=9)
    assert len(bomb) < 1024 * 1024
    answer = client.post("/v1/ingest", content=bomb, headers={**auth(INGEST_A), "Content-Encoding": "gzip"})
    assert answer.status_code == 413
    assert "decodes to more than" in answer.json()["detail"][0]["message"]
    assert samples(sqlite_engine) == 0


def test_encodings_other_than_gzip_and_broken_gzip_are_refused(client: Any) -> None:
    headers = auth(INGEST_A)
    assert (
        client.post(
            "/v1/ingest", content=body([gpu()]), headers={**headers, "Content-Encoding": "br"}
        ).status_code
        == 415
    )
    broken = gzip.compress(body([gpu()]))[:-12]
    assert (
        client.post("/v1/ingest", content=broken, headers={**headers, "Content-Encoding": "gzip"}).status_code
        == 400
    )


def test_too_many_records_in_one_batch_is_413_so_the_collector_splits_it(
    make_client: ClientFactory, sqlite_engine: Engine
) -> None:
    client = make_client(max_records_per_batch=5)
    answer = post(client, [gpu(0, minute) for minute in range(6)])
    assert answer.status_code == 413
    assert post(client, [gpu(0, minute) for minute in range(5)]).status_code == 200
    assert samples(sqlite_engine) == 5


def test_names_longer_than_the_configured_limit_are_422(make_client: ClientFactory) -> None:
    client = make_client(max_string_length=16)
    answer = post(client, [gpu(0, 0, node="a-node-name-longer-than-16")])
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["field"] == "node"


def test_the_cardinality_guard_limits_new_gpus_and_workers_per_token_per_hour(
    make_client: ClientFactory, clock: FakeClock, sqlite_engine: Engine
) -> None:
    client = make_client(max_new_series_per_token_per_hour=5)
    assert post(client, [gpu(0, 0), gpu(1, 0), engine(0, 0)]).status_code == 200  # 2 GPUs + 1 worker
    assert post(client, [gpu(0, 1), gpu(1, 1), engine(0, 1)]).status_code == 200  # nothing new
    refused = post(client, [gpu(2, 0), gpu(3, 0), engine(1, 0)])  # 3 more would make 6
    assert refused.status_code == 429
    assert "at most 5 new GPUs or workers per hour" in refused.json()["detail"]
    assert 3590 <= int(refused.headers["Retry-After"]) <= 3600
    assert post(client, [gpu(12, 0, node="node-b")], token=INGEST_B).status_code == 200  # its own budget
    clock.advance(3601)
    assert post(client, [gpu(2, 0), gpu(3, 0), engine(1, 0)]).status_code == 200
    assert samples(sqlite_engine) == 10


def test_an_overloaded_service_answers_429_with_retry_after_and_stores_nothing(
    client: Any, sqlite_engine: Engine
) -> None:
    gate = client.app.state.phasefit.gate
    gate.pending = gate.max_pending  # every admission slot taken
    try:
        answer = post(client, fleet_batch())
    finally:
        gate.pending = 0
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "2"
    assert samples(sqlite_engine) == 0
    assert post(client, fleet_batch()).status_code == 200


def test_a_locked_store_answers_503_with_retry_after_and_the_resend_is_stored_once(
    client: Any, sqlite_engine: Engine
) -> None:
    blocker = sqlite_engine.raw_connection()
    try:
        blocker.execute("BEGIN EXCLUSIVE")  # the store's lock held elsewhere, past the busy timeout
        answer = post(client, fleet_batch())
        assert answer.status_code == 503
        assert answer.headers["Retry-After"] == "5"
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    assert post(client, fleet_batch()).json()["stored"] == 18
    assert samples(sqlite_engine) == 18


def test_development_mode_needs_no_token(make_client: ClientFactory) -> None:
    client = make_client(dev=True, ingest_tokens_file=None)
    assert client.post("/v1/ingest", content=body([gpu()])).status_code == 200


def test_rejections_and_records_are_counted_in_metrics(client: Any) -> None:
    post(client, fleet_batch())
    post(client, [gpu(0, 0, sm_active=2)])
    client.post("/v1/ingest", content=body([gpu()]))
    registry = client.app.state.phasefit.registry
    assert registry.get_sample_value("phasefit_service_ingest_records_total", {"kind": "gpu_sample"}) == 12
    assert registry.get_sample_value("phasefit_service_ingest_stored_records_total") == 18
    assert registry.get_sample_value("phasefit_service_ingest_rejections_total", {"reason": "invalid"}) == 1
    assert (
        registry.get_sample_value(
            "phasefit_service_auth_failures_total", {"area": "ingest", "reason": "missing"}
        )
        == 1
    )
    assert registry.get_sample_value("phasefit_service_store_write_seconds_count") == 1
