"""The query API on SQLite: fleet, workers, samples, findings, lost tokens, reports; paging and read auth."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.contract import Finding, FindingKind, FindingStatus, Recommendation, Role
from fleet.store.analysis import put_analysis
from fleet.store.engine import make_engine, writing
from fleet.store.findings import upsert_findings
from fleet.store.reports import Report, put_report
from tests.phasefit.service.conftest import INGEST_A, READ, ClientFactory, auth
from tests.phasefit.service.records import T0, body, engine, fleet_batch, gpu

POOL = "c1/meta-llama/Llama-3.1-70B-Instruct"


def finding(
    worker: str | None, kind: FindingKind, lost: float, first: int, last: int, **fields: Any
) -> Finding:
    return Finding(
        kind=kind,
        worker_id=worker,
        pool=POOL,
        role=Role.DECODE,
        gpu_sku="H100-SXM",
        lost_tokens_per_s=lost,
        lost_tokens_per_s_low=lost / 2,
        lost_tokens_per_s_high=lost * 2,
        first_seen=T0 + timedelta(minutes=first),
        last_seen=T0 + timedelta(minutes=last),
        recommendation=Recommendation(action="swap-roles-in-place", counterpart_worker_id="worker-1"),
        **fields,
    )


@pytest.fixture
def stocked(client: Any, sqlite_engine: Engine) -> Any:
    """4 GPUs and 2 workers over 30 minutes, two findings (one resolved), a report."""
    for start in range(0, 30, 10):
        records = [r for m in range(start, start + 10) for r in fleet_batch(minutes=m + 1, gpus=4)[-6:]]
        assert client.post("/v1/ingest", content=body(records), headers=auth(INGEST_A)).status_code == 200
    assert (
        client.post(
            "/v1/ingest", content=body([gpu(7, 0, worker_id=None)]), headers=auth(INGEST_A)
        ).status_code
        == 200
    )
    now = datetime(2026, 3, 2, 13, 0, tzinfo=UTC)
    with writing(sqlite_engine) as connection:
        upsert_findings(
            connection,
            [
                finding("worker-0", FindingKind.DECODE_ON_LOW_BANDWIDTH, 120.0, 0, 20),
                finding("worker-1", FindingKind.ROLE_DRIFT, 40.0, 5, 10, status=FindingStatus.RESOLVED),
            ],
            now=now,
        )
        put_report(connection, Report("2026-W10", "markdown", now, {"lost_tokens_per_s": 120.0}, "# Audit"))
    return client


def test_fleet_counts_gpus_by_sku_role_and_state(stocked: Any) -> None:
    summary = stocked.get("/v1/fleet").json()
    # where the telemetry starts and ends (the dashboard anchors its ranges there, not on today)
    assert datetime.fromisoformat(summary["data_from"]) == T0
    assert datetime.fromisoformat(summary["data_until"]) == T0 + timedelta(minutes=29, seconds=1)
    assert (summary["gpus"], summary["workers"], summary["nodes"], summary["unattributed_gpus"]) == (
        5,
        2,
        1,
        1,
    )
    groups = {(g["sku"], g["role"], g["state"]): g["gpus"] for g in summary["groups"]}
    assert groups == {
        ("H100-SXM", "prefill", "ok"): 1,
        ("H200-SXM", "prefill", "ok"): 1,
        ("H100-SXM", "decode", "ok"): 1,
        ("H200-SXM", "decode", "ok"): 1,
        ("H200-SXM", "unattributed", "ok"): 1,
    }


def test_workers_are_paginated_with_next_links(stocked: Any) -> None:
    first = stocked.get("/v1/workers", params={"limit": 1}).json()
    assert [w["worker_id"] for w in first["items"]] == ["worker-0"]
    assert first["next"] is not None and "offset=1" in first["next"]
    second = stocked.get(first["next"]).json()
    assert [w["worker_id"] for w in second["items"]] == ["worker-1"]
    assert second["next"] is None
    assert stocked.get("/v1/workers", params={"role": "decode"}).json()["items"][0]["worker_id"] == "worker-1"
    assert stocked.get("/v1/workers", params={"limit": 5000}).json()["limit"] == 1000  # capped


def test_a_worker_shows_its_gpus_and_open_findings(stocked: Any) -> None:
    detail = stocked.get("/v1/workers/worker-0").json()
    assert [g["gpu_uuid"] for g in detail["gpus"]] == ["GPU-0000", "GPU-0001"]
    assert [f["kind"] for f in detail["open_findings"]] == ["decode-on-low-bandwidth"]
    missing = stocked.get("/v1/workers/no-such-worker")
    assert missing.status_code == 404
    assert stocked.get("/v1/workers/no-such/samples").status_code == 404


def test_worker_ids_with_slashes_work(client: Any) -> None:
    records = [engine(0, 0, worker_id="llm/decode-0"), engine(0, 1, worker_id="llm/decode-0")]
    client.post("/v1/ingest", content=body(records), headers=auth(INGEST_A))
    assert client.get("/v1/workers/llm/decode-0").json()["worker_id"] == "llm/decode-0"
    samples = client.get("/v1/workers/llm/decode-0/samples", params={"from": T0.isoformat()}).json()
    assert len(samples["engine"]) == 2


def test_a_worker_shows_what_its_engine_reports_of_itself(client: Any) -> None:
    records = [engine(0, 0, kv_capacity_tokens=92962, max_running_requests=4097), engine(1, 0)]
    assert client.post("/v1/ingest", content=body(records), headers=auth(INGEST_A)).status_code == 200
    reported = client.get("/v1/workers/worker-0").json()
    assert (reported["kv_capacity_tokens"], reported["max_running_requests"]) == (92962, 4097)
    listed = {w["worker_id"]: w for w in client.get("/v1/workers").json()["items"]}
    assert listed["worker-0"]["max_running_requests"] == 4097
    assert listed["worker-1"]["max_running_requests"] is None  # not reported: null, never a default


def test_raw_samples_page_by_time(stocked: Any) -> None:
    params = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=40)).isoformat(), "limit": 12}
    page = stocked.get("/v1/workers/worker-0/samples", params=params).json()
    assert page["source"] == "raw" and page["step_s"] is None
    assert len(page["engine"]) == 12 and len(page["gpus"]) == 24
    assert page["engine"][0]["prompt_tokens"] == 1000
    second = stocked.get(page["next"]).json()
    assert len(second["engine"]) == 12 and second["engine"][0]["ts"] > page["engine"][-1]["ts"]
    last = stocked.get(second["next"]).json()
    assert len(last["engine"]) == 6 and last["next"] is None


def test_bucketed_samples_sum_tokens_and_average_ratios(stocked: Any) -> None:
    params = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=30)).isoformat(), "step": "10m"}
    page = stocked.get("/v1/workers/worker-0/samples", params=params).json()
    assert page["step_s"] == 600
    assert [p["samples"] for p in page["engine"]] == [10, 10, 10]
    first = page["engine"][1]
    assert first["prompt_tokens"] == 10_000 and first["prompt_tokens_per_s"] == pytest.approx(1000 / 60)
    assert first["kv_cache_usage"] == pytest.approx(0.7)
    assert {p["gpu_uuid"] for p in page["gpus"]} == {"GPU-0000", "GPU-0001"}
    assert page["gpus"][0]["sm_active"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "params",
    [
        {"from": "2026-03-01T00:00:00Z", "to": "2026-03-03T00:00:00Z"},  # raw range too long
        {"from": "2026-03-01T00:00:00Z", "to": "2026-03-03T00:00:00Z", "step": "1s"},  # too many buckets
        {"from": "2026-03-02T12:00:00Z", "to": "2026-03-02T11:00:00Z"},  # backwards
        {"from": "2026-03-02T12:00:00"},  # no time zone
        {"step": "fortnightly"},
    ],
    ids=["raw-too-long", "too-many-buckets", "backwards", "naive", "bad-step"],
)
def test_unreasonable_sample_ranges_are_422(stocked: Any, params: dict[str, str]) -> None:
    assert stocked.get("/v1/workers/worker-0/samples", params=params).status_code == 422


def test_findings_filter_and_page(stocked: Any) -> None:
    everything = stocked.get("/v1/findings").json()["items"]
    assert [f["worker_id"] for f in everything] == ["worker-0", "worker-1"]
    open_only = stocked.get("/v1/findings", params={"status": "open"}).json()["items"]
    assert [f["kind"] for f in open_only] == ["decode-on-low-bandwidth"]
    assert open_only[0]["recommendation"]["action"] == "swap-roles-in-place"
    drift = stocked.get("/v1/findings", params={"kind": "role-drift"}).json()["items"]
    assert drift[0]["resolved_at"] is not None
    late = stocked.get("/v1/findings", params={"from": (T0 + timedelta(minutes=15)).isoformat()}).json()
    assert [f["worker_id"] for f in late["items"]] == ["worker-0"]
    assert stocked.get("/v1/findings", params={"kind": "bogus"}).status_code == 422
    page = stocked.get("/v1/findings", params={"limit": 1}).json()
    assert page["next"] is not None


def test_lost_tokens_come_from_findings_until_the_analyzer_records_runs(
    stocked: Any, sqlite_engine: Engine
) -> None:
    params = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=30)).isoformat(), "step": "5m"}
    series = stocked.get("/v1/lost-tokens", params=params).json()
    assert series["source"] == "findings"
    values = [p["lost_tokens_per_s"] for p in series["points"]]
    assert values == [120.0, 160.0, 160.0, 120.0, 120.0, None]  # worker-1 overlaps 5..10 min
    assert series["points"][1]["pools"] == {POOL: 160.0}
    with writing(sqlite_engine) as connection:
        for minute, lost in ((2, 100.0), (4, 300.0), (12, 50.0)):
            end = T0 + timedelta(minutes=minute)
            tokens = {"value": lost, "low": lost / 2, "high": lost * 2}
            summary: dict[str, Any] = {  # version 3: one object per unit
                "pools": [{"pool": POOL, "lost": {"tokens_per_s": tokens}}],
                "fleet": {"lost": {"tokens_per_s": tokens}},
            }
            if minute == 12:  # version 2: flat fields (stored runs are kept as written)
                summary = {
                    "pools": [{"pool": POOL, "lost_tokens_per_s": lost}],
                    "fleet": {"lost_tokens_per_s": lost},
                }
            put_analysis(
                connection, created_at=end, from_ts=end - timedelta(minutes=1), to_ts=end, summary=summary
            )
    series = stocked.get("/v1/lost-tokens", params=params).json()
    assert series["source"] == "analysis-runs"
    assert [p["lost_tokens_per_s"] for p in series["points"]] == [200.0, None, 50.0, None, None, None]
    first, _, third = series["points"][:3]
    assert first["lost_tokens_per_s_low"] == 100.0 and first["pools"] == {POOL: 200.0}
    assert third["lost_tokens_per_s_low"] is None and third["pools"] == {POOL: 50.0}  # version 2: no range


def test_reports_list_and_fetch(stocked: Any) -> None:
    listing = stocked.get("/v1/reports").json()
    assert [r["week"] for r in listing["items"]] == ["2026-W10"]
    report = stocked.get(listing["items"][0]["url"]).json()
    assert report["body"] == "# Audit" and report["summary"] == {"lost_tokens_per_s": 120.0}
    assert stocked.get("/v1/reports/2026-W11").status_code == 404
    assert stocked.get("/v1/reports/2026-W54").status_code == 422
    assert stocked.get("/v1/reports/last-week").status_code == 422


GUARDED = ("/v1/fleet", "/v1/workers", "/v1/findings", "/v1/lost-tokens", "/v1/reports", "/metrics",
           "/openapi.json", "/docs", "/redoc")  # fmt: skip


def test_read_access_can_be_token_guarded_and_the_api_document_is_behind_it(
    make_client: ClientFactory,
) -> None:
    client = make_client(read_access="token")
    for path in GUARDED:
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers=auth(READ)).status_code == 200, path
        assert client.get(path, headers=auth(INGEST_A)).status_code == 403, path
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    openapi = client.get("/openapi.json", headers=auth(READ)).json()
    assert openapi["paths"]["/v1/fleet"]["get"]["security"] == [{"HTTPBearer": []}]
    assert not {"/openapi.json", "/docs", "/redoc"} & set(openapi["paths"])
    assert "/openapi.json" in client.get("/docs", headers=auth(READ)).text
    assert "/openapi.json" in client.get("/redoc", headers=auth(READ)).text


def test_open_reads_on_loopback_serve_the_api_document_without_a_token(make_client: ClientFactory) -> None:
    client = make_client(bind_host="127.0.0.1")
    for path in GUARDED:
        assert client.get(path).status_code == 200, path


def test_reads_answer_503_when_the_store_is_down(make_client: ClientFactory) -> None:
    down = make_engine("postgresql+psycopg://postgres@127.0.0.1:9/none", connect_args={"connect_timeout": 1})
    try:
        client = make_client(engine=down)
        for path in ("/v1/fleet", "/v1/workers", "/v1/findings", "/v1/reports", "/readyz"):
            answer = client.get(path)
            assert answer.status_code == 503, path
        assert client.get("/v1/fleet").headers["Retry-After"] == "5"
        assert client.get("/readyz").json()["store"] == "unreachable"
        assert client.get("/healthz").status_code == 200
        ingest = client.post("/v1/ingest", content=body([gpu()]), headers=auth(INGEST_A))
        assert ingest.status_code == 503
        assert ingest.headers["Retry-After"] == "5"
        assert "phasefit_service_store_up 0.0" in client.get("/metrics").text
    finally:
        down.dispose()


def test_a_finding_that_estimates_no_loss_reads_null_and_adds_nothing(
    stocked: Any, sqlite_engine: Engine
) -> None:
    with writing(sqlite_engine) as connection:
        degraded = Finding(
            kind=FindingKind.TELEMETRY_DEGRADED,
            worker_id="worker-1",
            pool=POOL,
            first_seen=T0,
            last_seen=T0 + timedelta(minutes=30),
        )
        upsert_findings(connection, [degraded], now=datetime(2026, 3, 2, 13, 0, tzinfo=UTC))
    (item,) = stocked.get("/v1/findings", params={"kind": "telemetry-degraded"}).json()["items"]
    assert [item[f"lost_tokens_per_s{b}"] for b in ("", "_low", "_high")] == [None, None, None]  # never 0
    params = {"from": T0.isoformat(), "to": (T0 + timedelta(minutes=30)).isoformat(), "step": "5m"}
    series = stocked.get("/v1/lost-tokens", params=params).json()
    assert [p["lost_tokens_per_s"] for p in series["points"]] == [120.0, 160.0, 160.0, 120.0, 120.0, None]
    document = stocked.get("/openapi.json", headers=auth(READ)).json()
    properties = document["components"]["schemas"]["FindingOut"]["properties"]
    for bound in ("", "_low", "_high"):
        types = {option.get("type") for option in properties[f"lost_tokens_per_s{bound}"]["anyOf"]}
        assert types == {"number", "null"}, bound
