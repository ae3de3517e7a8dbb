"""The OpenAPI document is complete and says exactly what the service validates: schemathesis, with its
conformance checks on (no 5xx, no undocumented status code, content type, header or body, no operation that
ignores its auth, every schema-valid request accepted and every schema-violating one refused), over its
examples, coverage and fuzzing phases, on SQLite and on PostgreSQL.

The same run from the command line, against a service on loopback (one token valid for ingest, reads and
Alertmanager, the records' ``ts`` set near the service's clock by ``--max-examples`` cases aside):

    schemathesis run http://127.0.0.1:8000/openapi.json -H 'Authorization: Bearer TOKEN' \
        --checks all --exclude-checks use_after_free,ensure_resource_availability,object_level_authorization \
        --phases examples,coverage,fuzzing -n 20 --generation-deterministic
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.pytest.lazy import get_all_tests
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)
from sqlalchemy import Engine

from fleet.contract import Finding, FindingKind, Role
from fleet.store.engine import writing
from fleet.store.findings import upsert_findings
from tests.phasefit.service.conftest import ALERTMANAGER, INGEST_A, READ, ClientFactory, FakeClock, auth
from tests.phasefit.service.records import T0, body, fleet_batch

OPERATIONS = {
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
    ("GET", "/v1/gpu-view"),
    ("GET", "/v1/reports"),
    ("GET", "/v1/reports/{week}"),
    ("GET", "/metrics"),
}


def test_every_operation_documents_its_errors_and_typed_answers(make_client: ClientFactory) -> None:
    document = make_client(read_access="token").get("/openapi.json", headers=auth(READ)).json()
    assert document["openapi"].startswith("3.")
    operations = {
        (method.upper(), path): op for path, item in document["paths"].items() for method, op in item.items()
    }
    assert set(operations) == OPERATIONS
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


MAX_EXAMPLES = 8  # fuzzed cases per operation, on top of the examples and coverage phases
# What JSON Schema cannot say, declared in the operation's description and refused with 422 naming the
# parameter: a schemathesis "schema-valid" request refused for one of these is the document's own rule.
CROSS_PARAMETER_RULES: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("GET", "/v1/gpu-view"): [("from", "must be before 'to'")],
    ("GET", "/v1/findings"): [("from", "must be before 'to'")],
    ("GET", "/v1/lost-tokens"): [("from", "must be before 'to'"), ("step", "buckets requested")],
    ("GET", "/v1/workers/{worker_id}/samples"): [
        ("from", "must be before 'to'"),
        ("step", "buckets requested"),
        ("step", "raw samples span at most"),
    ],
}
# 413: a body over the configured byte limit is refused whatever the schema says (the collector splits it);
# it is a refusal all the same for schema-violating bodies.
ACCEPTED = ["2xx", "401", "403", "404", "409", "413", "429"]
REFUSED = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "429"]
CONFIG = schemathesis.Config.from_dict({
    "checks": {
        "positive_data_acceptance": {"expected-statuses": ACCEPTED},
        "negative_data_rejection": {"expected-statuses": REFUSED},
    },
})  # fmt: skip


def declared_refusal(case: Any, response: Any) -> bool:
    """A 422 whose every error is one of the operation's declared cross-parameter rules."""
    rules = CROSS_PARAMETER_RULES.get((case.operation.method.upper(), case.operation.path), [])
    if response.status_code != 422 or not rules:
        return False
    errors = response.json()["detail"]
    return all(
        any(error["loc"] == ["query", name] and phrase in error["msg"] for name, phrase in rules)
        for error in errors
    )


def valid_data_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    """positive_data_acceptance, but for the refusals the document declares in words."""
    if declared_refusal(case, response):
        return None
    result: bool | None = positive_data_acceptance(ctx, response, case)
    return result


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
    unsupported_method,
    valid_data_accepted,
    negative_data_rejection,
]


def test_cross_parameter_rules_are_in_the_document(make_client: ClientFactory) -> None:
    document = make_client(read_access="token").get("/openapi.json", headers=auth(READ)).json()
    for (method, path), rules in CROSS_PARAMETER_RULES.items():
        description = " ".join(document["paths"][path][method.lower()]["description"].split())
        for name, phrase in rules:
            assert phrase in description and f"naming '{name}'" in description, (path, name)
    ingest = document["components"]["schemas"]["GpuSample"]
    assert ingest["required"][0] == "kind" and "default" not in ingest["properties"]["kind"]
    assert "PHASEFIT_INGEST_MAX_AGE_S" in ingest["properties"]["ts"]["description"]


def _credentials(path: str) -> dict[str, str]:
    if path == "/v1/ingest":
        return auth(INGEST_A)
    if path == "/v1/alerts/alertmanager":
        return auth(ALERTMANAGER)
    return auth(READ)


def _integral_as_int(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_as_int(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_as_int(v) for v in value]
    return value


def as_a_collector_sends(case: Any, clock: FakeClock) -> None:
    """A schema-valid ingest body as a collector would send it: each record stamped inside the window around
    the service's clock (the document says so in words; JSON Schema has no "now"), and integers written as
    integers (the contract's ints are strict: ``5.0`` is refused where JSON Schema calls it an integer)."""
    if case.operation.path != "/v1/ingest" or case.meta is None:
        return
    if case.meta.generation.mode is not GenerationMode.POSITIVE or not isinstance(case.body, dict):
        return
    records = case.body.get("records")
    if isinstance(records, list):
        for index, record in enumerate(records):
            if isinstance(record, dict) and "ts" in record:
                record["ts"] = (clock.now() - timedelta(minutes=30, seconds=index)).isoformat()
            for name in ("ttft_histogram", "tpot_histogram", "e2e_histogram"):
                if isinstance(record, dict) and isinstance(record.get(name), dict):
                    record[name] = _a_histogram(record[name])
    case.body = _integral_as_int(case.body)


def _a_histogram(drawn: dict[str, Any]) -> dict[str, Any]:
    """A drawn histogram made one, as its schema's description says in words (bounds rising, cumulative
    counts never falling and one per bound, the count at least the last): JSON Schema cannot say it."""
    le = sorted(set(drawn["le"]))
    counts = sorted(drawn["counts"])[: len(le)]
    counts += [counts[-1] if counts else 0] * (len(le) - len(counts))
    return {"le": le, "counts": counts, "count": max([drawn["count"], *counts])}


@pytest.fixture
def api_schema(make_client: ClientFactory, store_engine: Engine) -> Any:
    """The document of an app on ``store_engine`` (SQLite or PostgreSQL), seeded with a small fleet and one
    finding so reads find something."""
    client = make_client(
        engine=store_engine,
        read_access="token",
        max_body_bytes=256 * 1024,
        max_decompressed_bytes=1024 * 1024,
    )
    seeded = client.post("/v1/ingest", content=body(fleet_batch(3, 4)), headers=auth(INGEST_A))
    assert seeded.status_code == 200
    with writing(store_engine) as connection:
        finding = Finding(
            kind=FindingKind.ROLE_DRIFT, worker_id="worker-0", role=Role.DECODE, first_seen=T0, last_seen=T0
        )
        upsert_findings(connection, [finding], now=T0)
    return schemathesis.openapi.from_asgi("/openapi.json", client.app, headers=auth(READ), config=CONFIG)


SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


def test_the_service_validates_exactly_what_its_document_says(api_schema: Any, clock: FakeClock) -> None:
    """Every operation through schemathesis's examples, coverage and fuzzing phases (the tests its pytest
    plugin builds; the plugin's own runner does not work under pytest 9), every failure collected."""

    def run(case: Any) -> None:
        as_a_collector_sends(case, clock)
        case.call_and_validate(headers=_credentials(case.operation.path), checks=CHECKS)

    failures, tested = [], 0
    for result in get_all_tests(schema=api_schema, test_func=run, settings=SETTINGS, given_kwargs=None):
        assert isinstance(result, Ok), result
        operation, test = result.ok()
        tested += 1
        try:
            test()
        except Exception as exc:  # a FailureGroup, or an error of the test itself: both are failures here
            failures.append(f"{operation.label}: {type(exc).__name__}: {exc}")
    assert tested == len(OPERATIONS)
    assert not failures, "\n\n".join(failures)
