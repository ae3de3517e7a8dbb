"""``GET /v1/gpu-view`` on SQLite and PostgreSQL: a store with GPU samples and no engine (dcgm-exporter alone)
answers the GPU view (unknown activity null, never 0); a store where an engine reported, or a range without a
GPU sample, answers 404 saying which; a bad range is the API's usual 422 naming the parameter; the operation
is documented and conforms to its document (schemathesis, as test_openapi.py runs it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from schemathesis.core.result import Ok
from schemathesis.pytest.lazy import get_all_tests
from sqlalchemy import Engine

from tests.phasefit.service import test_openapi
from tests.phasefit.service.conftest import INGEST_A, READ, ClientFactory, FakeClock, auth
from tests.phasefit.service.records import T0, body, fleet_batch, gpu

PATH = "/v1/gpu-view"
RANGE = {"from": T0.isoformat(), "to": (T0 + timedelta(hours=1)).isoformat()}


def gpu_only_records(minutes: int = 30) -> list[dict[str, Any]]:
    """Three GPUs, no engine: 0 busy (profiled), 1 idle (profiled), 2 without profiling fields."""
    blind: dict[str, Any] = {"sm_active": None, "tensor_active": None, "dram_active": None, "gpu_util": 0.5}
    records = []
    for minute in range(minutes):
        records.append(gpu(0, minute, sm_active=0.9, tensor_active=0.7, dram_active=0.3, gpu_util=1.0))
        records.append(gpu(1, minute, sm_active=0.0, tensor_active=0.0, dram_active=0.0, gpu_util=0.0))
        records.append(gpu(2, minute, worker_id="llm/[bold red]pod[/]", **blind))
    return records


def ingest(client: Any, records: list[dict[str, Any]]) -> None:
    answer = client.post("/v1/ingest", content=body(records), headers=auth(INGEST_A))
    assert answer.status_code == 200, answer.text


@pytest.fixture
def reader(make_client: ClientFactory, store_engine: Engine) -> Any:
    return make_client(engine=store_engine, read_access="token")


def test_a_gpu_only_store_answers_the_gpu_view(reader: Any) -> None:
    ingest(reader, gpu_only_records())
    answer = reader.get(PATH, params=RANGE, headers=auth(READ))
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert (view["from"], view["to"]) == ("2026-03-02T12:00:00Z", "2026-03-02T13:00:00Z")
    assert "no serving engine" in view["reason"]
    gpus = {g["gpu_uuid"]: g for g in view["gpus"]}
    assert set(gpus) == {"GPU-0000", "GPU-0001", "GPU-0002"}
    busy, idle, blind = gpus["GPU-0000"], gpus["GPU-0001"], gpus["GPU-0002"]
    assert busy["sm_active"] == 0.9 and busy["bottleneck"] == "compute" and busy["idle"] is False
    assert idle["idle"] is True and idle["idle_gpu_hours"] == pytest.approx(0.5)
    # unknown is null, never 0
    assert blind["sm_active"] is None and blind["tensor_active"] is None and blind["dram_active"] is None
    assert blind["bottleneck"] == "unknown" and "DCGM_FI_PROF_SM_ACTIVE" in blind["activity_unknown_reason"]
    assert blind["worker_id"] == "llm/[bold red]pod[/]"
    assert {s["sku"]: s["gpus"] for s in view["skus"]} == {"H100-SXM": 2, "H200-SXM": 1}
    totals = view["totals"]
    assert totals["gpus"] == 3 and totals["idle_gpus"] == 1 and totals["gpus_without_profiling"] == 1
    assert view["profiling_help"] and any("DCGM_EXPORTER_COLLECTORS" in w for w in view["warnings"])
    assert {m["engine"] for m in view["engine_metrics_needed"]} == {"vllm", "sglang", "trtllm"}


def test_a_store_where_an_engine_reported_has_no_gpu_view(reader: Any) -> None:
    ingest(reader, fleet_batch(3, 4))
    answer = reader.get(PATH, params=RANGE, headers=auth(READ))
    assert answer.status_code == 404
    assert "engine reported" in answer.json()["detail"]


def test_a_range_without_gpu_samples_has_no_gpu_view(reader: Any) -> None:
    ingest(reader, gpu_only_records(3))
    later = {"from": (T0 + timedelta(hours=2)).isoformat(), "to": (T0 + timedelta(hours=3)).isoformat()}
    answer = reader.get(PATH, params=later, headers=auth(READ))
    assert answer.status_code == 404
    assert "no GPU sample" in answer.json()["detail"]


def test_the_default_range_is_the_last_day(reader: Any) -> None:
    ingest(reader, gpu_only_records(3))  # the clock is an hour after T0
    answer = reader.get(PATH, headers=auth(READ))
    assert answer.status_code == 200 and len(answer.json()["gpus"]) == 3


@pytest.mark.parametrize(
    "params",
    [
        {"from": (T0 + timedelta(hours=1)).isoformat(), "to": T0.isoformat()},
        {"from": T0.isoformat(), "to": T0.isoformat()},
        {"from": "yesterday"},
        {"from": "0001-01-01T00:00:00+05:00"},
    ],
)
def test_a_bad_range_is_refused_naming_from(reader: Any, params: dict[str, str]) -> None:
    answer = reader.get(PATH, params=params, headers=auth(READ))
    assert answer.status_code == 422
    assert [e["loc"] for e in answer.json()["detail"]] == [["query", "from"]]


def test_reads_are_guarded(reader: Any) -> None:
    assert reader.get(PATH, params=RANGE).status_code == 401
    assert reader.get(PATH, params=RANGE, headers=auth(INGEST_A)).status_code == 403


def test_the_operation_is_documented(make_client: ClientFactory) -> None:
    document = make_client(read_access="token").get("/openapi.json", headers=auth(READ)).json()
    operation = document["paths"][PATH]["get"]
    assert {"200", "401", "403", "404", "422", "503"} <= set(operation["responses"])
    assert operation.get("security") and operation["summary"] and operation["description"]
    description = " ".join(operation["description"].split())
    assert "must be before 'to'" in description and "naming 'from'" in description
    assert {p["name"] for p in operation["parameters"]} == {"from", "to"}
    assert all(p.get("description") for p in operation["parameters"])
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/GpuView"}
    schemas = document["components"]["schemas"]
    for name in ("GpuView", "GpuViewGpu", "GpuViewSku", "GpuViewTotals", "EngineMetricsNeeded"):
        assert schemas[name].get("description"), name
    view = schemas["GpuView"]["properties"]
    assert "from" in view and "from_" not in view
    gpu_fields = schemas["GpuViewGpu"]["properties"]
    assert {"type": "null"} in gpu_fields["sm_active"]["anyOf"]  # unknown is null
    assert {"type": "null"} in gpu_fields["idle_gpu_hours"]["anyOf"]


def test_the_operation_conforms_to_its_document(
    make_client: ClientFactory, store_engine: Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """test_openapi.py's schemathesis run (the same checks, phases and settings) on this operation alone,
    over a GPU-only store so that positive cases meet a view."""
    monkeypatch.setitem(test_openapi.CROSS_PARAMETER_RULES, ("GET", PATH), [("from", "must be before 'to'")])
    client = make_client(engine=store_engine, read_access="token")
    ingest(client, gpu_only_records(5))
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", client.app, headers=auth(READ), config=test_openapi.CONFIG
    ).include(path=PATH)

    def run(case: Any) -> None:
        case.call_and_validate(headers=auth(READ), checks=test_openapi.CHECKS)

    failures, tested = [], 0
    for result in get_all_tests(
        schema=schema, test_func=run, settings=test_openapi.SETTINGS, given_kwargs=None
    ):
        assert isinstance(result, Ok), result
        operation, test = result.ok()
        tested += 1
        try:
            test()
        except Exception as exc:
            failures.append(f"{operation.label}: {type(exc).__name__}: {exc}")
    assert tested == 1
    assert not failures, "\n\n".join(failures)
