"""The OpenAPI document is complete, and a property-based run of schemathesis over it finds no 5xx, no
undocumented status code and no response that breaks its schema."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine

from fleet.contract import Finding, FindingKind, Role
from fleet.store.engine import writing
from fleet.store.findings import upsert_findings
from tests.phasefit.service.conftest import ALERTMANAGER, INGEST_A, READ, ClientFactory, auth
from tests.phasefit.service.records import T0, body, fleet_batch

MAX_EXAMPLES = 10  # per operation and mode: the whole run takes seconds, not minutes
# No 5xx, no status code, content type, header or body the document does not declare, and no operation
# that declares auth but answers without it. Left out: positive_data_acceptance and negative_data_rejection,
# which expect the JSON Schema to be the whole contract (it cannot say "an ISO week that exists", "a name
# without control characters" or "'from' before 'to'", and FastAPI ignores unknown query parameters).
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]


def test_every_operation_documents_its_errors_and_typed_answers(make_client: ClientFactory) -> None:
    document = make_client(read_access="token").get("/openapi.json", headers=auth(READ)).json()
    assert document["openapi"].startswith("3.")
    operations = {
        (method.upper(), path): op for path, item in document["paths"].items() for method, op in item.items()
    }
    assert set(operations) == {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("POST", "/v1/ingest"),
        ("POST", "/v1/alerts/alertmanager"),
        ("GET", "/v1/fleet"),
        ("GET", "/v1/workers"),
        ("GET", "/v1/workers/{worker_id}"),
        ("GET", "/v1/workers/{worker_id}/samples"),
        ("GET", "/v1/findings"),
        ("GET", "/v1/lost-tokens"),
        ("GET", "/v1/reports"),
        ("GET", "/v1/reports/{week}"),
        ("GET", "/metrics"),
    }
    for key, operation in operations.items():
        assert "200" in operation["responses"], key
        if key[1].startswith("/v1/"):
            assert {"401", "503"} <= set(operation["responses"]), key
            assert operation.get("security"), key
    ingest = operations[("POST", "/v1/ingest")]
    assert {"400", "401", "403", "408", "409", "413", "415", "422", "429", "503"} <= set(ingest["responses"])
    assert ingest["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/IngestBatch"
    }
    schemas = document["components"]["schemas"]
    assert {"GpuSample", "EngineSample", "IngestBatch", "AlertmanagerPayload"} <= set(schemas)
    assert schemas["IngestBatch"]["properties"]["records"]["maxItems"] == 10_000
    alerts = operations[("POST", "/v1/alerts/alertmanager")]
    assert {"HTTPBearer", "HTTPBasic"} == {name for entry in alerts["security"] for name in entry}


OPERATIONS = sorted(
    {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("POST", "/v1/ingest"),
        ("POST", "/v1/alerts/alertmanager"),
        ("GET", "/v1/fleet"),
        ("GET", "/v1/workers"),
        ("GET", "/v1/workers/{worker_id}"),
        ("GET", "/v1/workers/{worker_id}/samples"),
        ("GET", "/v1/findings"),
        ("GET", "/v1/lost-tokens"),
        ("GET", "/v1/reports"),
        ("GET", "/v1/reports/{week}"),
        ("GET", "/metrics"),
    }
)


def _credentials(path: str) -> dict[str, str]:
    if path == "/v1/ingest":
        return auth(INGEST_A)
    if path == "/v1/alerts/alertmanager":
        return auth(ALERTMANAGER)
    return auth(READ)


WITHOUT_INPUT = {"/healthz", "/readyz", "/metrics"}  # nothing to make invalid
RUNS = [
    (method, path, mode)
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or path not in WITHOUT_INPUT
]


@pytest.mark.parametrize(
    ("method", "path", "mode"), RUNS, ids=[f"{m} {p} {mode.value}" for m, p, mode in RUNS]
)
def test_schemathesis_finds_no_server_error_and_no_answer_off_the_document(
    make_client: ClientFactory, sqlite_engine: Engine, method: str, path: str, mode: GenerationMode
) -> None:
    run_schemathesis(make_client, sqlite_engine, method, path, mode)


def run_schemathesis(
    make_client: ClientFactory, sqlite_engine: Engine, method: str, path: str, mode: GenerationMode
) -> None:
    """One operation in one mode against an app on ``sqlite_engine`` (any store, despite the name)."""
    client = make_client(
        engine=sqlite_engine,
        read_access="token",
        max_body_bytes=256 * 1024,
        max_decompressed_bytes=1024 * 1024,
    )
    client.post("/v1/ingest", content=body(fleet_batch(minutes=3, gpus=4)), headers=auth(INGEST_A))
    with writing(sqlite_engine) as connection:
        finding = Finding(
            kind=FindingKind.ROLE_DRIFT, worker_id="worker-0", role=Role.DECODE, first_seen=T0, last_seen=T0
        )
        upsert_findings(connection, [finding], now=T0)
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app, headers=auth(READ))
    [operation] = [
        result.ok() for result in schema.get_all_operations()
        if result.ok().method.upper() == method and result.ok().path == path
    ]  # fmt: skip
    headers = _credentials(path)

    @given(case=operation.as_strategy(mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    run()
