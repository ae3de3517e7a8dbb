"""GET /metrics: the analyzer's conclusions under the agreed names, and the service's own health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from fleet.contract import Finding, FindingKind, FindingStatus, Role
from fleet.store.analysis import latest_analysis, put_analysis
from fleet.store.engine import writing
from fleet.store.findings import list_findings, upsert_findings
from phasefit.service.analyzer_gauges import conclude
from tests.phasefit.service.conftest import INGEST_A, auth
from tests.phasefit.service.records import T0, body, engine, gpu

POOL = "c1/meta-llama/Llama-3.1-70B-Instruct"
NOW = datetime(2026, 3, 2, 13, 0, tzinfo=UTC)
LOST = {  # a version-3 summary's loss (a version-2 one held flat lost_<unit>_per_s fields)
    "output_tokens_per_s": {"value": 120.0, "low": 100.0, "high": 140.0},
    "requests_per_s": {"value": 0.5, "low": 0.4, "high": 0.6},
    "tokens_per_s": {"value": 300.0, "low": 250.0, "high": 350.0},
}


def finding(worker: str | None, kind: FindingKind, lost: float, **fields: Any) -> Finding:
    values: dict[str, Any] = {
        "kind": kind,
        "worker_id": worker,
        "pool": POOL,
        "role": Role.DECODE,
        "gpu_sku": "H100-SXM",
        "lost_tokens_per_s": lost,
        "first_seen": T0,
        "last_seen": T0 + timedelta(minutes=10),
    }
    return Finding(**{**values, **fields})


def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def store(engine_: Engine, *findings: Finding) -> None:
    with writing(engine_) as connection:
        upsert_findings(connection, findings, now=NOW)


def test_open_findings_become_worker_and_pool_gauges(client: Any, sqlite_engine: Engine) -> None:
    client.post("/v1/ingest", content=body([engine(0, 0), engine(1, 0)]), headers=auth(INGEST_A))
    store(
        sqlite_engine,
        finding("worker-0", FindingKind.DECODE_ON_LOW_BANDWIDTH, 120.0),
        finding("worker-0", FindingKind.ROLE_DRIFT, 80.0),  # same worker: the larger loss counts, once
        finding("worker-1", FindingKind.CAPACITY_ON_SMALL_MEMORY, 30.0, status=FindingStatus.RESOLVED),
        finding("worker-1", FindingKind.HEALTHY_NOT_SERVING, 10.0),  # open, but not a misplacement
        finding(None, FindingKind.POOL_RATIO_DRIFT, 0.0),
    )
    metrics = scrape(client)
    labels = (
        ("model", "meta-llama/Llama-3.1-70B-Instruct"),
        ("pool", POOL),
        ("role", "decode"),
        ("sku", "H100-SXM"),
        ("worker", "worker-0"),
    )
    assert metrics[("phasefit_worker_misplaced", (("kind", "decode-on-low-bandwidth"), *labels))] == 1
    assert metrics[("phasefit_worker_misplaced", (("kind", "role-drift"), *labels))] == 1
    assert not [k for k in metrics if k[0] == "phasefit_worker_misplaced" and ("worker", "worker-1") in k[1]]
    assert metrics[("phasefit_worker_lost_tokens_per_second", labels)] == 120.0
    assert metrics[("phasefit_pool_lost_tokens_per_second", (("pool", POOL),))] == 130.0
    assert metrics[("phasefit_pool_ratio_drift", (("pool", POOL),))] == 1
    assert metrics[("phasefit_fleet_lost_tokens_per_second", ())] == 130.0
    assert metrics[("phasefit_analyzer_last_run_timestamp_seconds", ())] == NOW.timestamp()
    assert metrics[("phasefit_service_store_up", ())] == 1


def test_the_latest_analyzer_run_supplies_pool_figures(client: Any, sqlite_engine: Engine) -> None:
    store(sqlite_engine, finding("worker-0", FindingKind.DECODE_ON_LOW_BANDWIDTH, 120.0))
    with writing(sqlite_engine) as connection:
        for minutes, lost in ((0, 999.0), (5, 250.0)):
            at = NOW + timedelta(minutes=minutes)
            put_analysis(
                connection,
                created_at=at,
                from_ts=at - timedelta(hours=1),
                to_ts=at,
                summary={
                    "pools": [
                        {
                            "pool": POOL,
                            "lost_tokens_per_s": lost,
                            "capacity_tokens_per_s": 5000.0,
                            "prefill_decode_ratio": 0.5,
                            "recommended_prefill_decode_ratio": 0.75,
                            "ratio_drift": True,
                            "recommended": {
                                "H100-SXM/tp2": {
                                    "prefill_now": 3,
                                    "decode_now": 2,
                                    "prefill_best": 5,
                                    "decode_best": 0,
                                },
                                "H100-SXM/1g.10gb/tp1": {
                                    "prefill_now": 4,
                                    "decode_now": 0,
                                    "prefill_best": 4,
                                    "decode_best": None,
                                },
                                "no-tp-here": {"prefill_now": 1},
                            },
                        }
                    ],
                    "fleet": {"lost_tokens_per_s": lost},
                },
            )
    metrics = scrape(client)
    pool = (("pool", POOL),)
    assert metrics[("phasefit_pool_lost_tokens_per_second", pool)] == 250.0
    assert metrics[("phasefit_pool_capacity_tokens_per_second", pool)] == 5000.0
    assert metrics[("phasefit_pool_prefill_decode_ratio", pool)] == 0.5
    assert metrics[("phasefit_pool_recommended_prefill_decode_ratio", pool)] == 0.75
    assert metrics[("phasefit_pool_ratio_drift", pool)] == 1
    # The plan for autoscalers: workers per GPU model, TP and role, as placed and as recommended.
    workers = {
        dict(labels)["gpu_sku"]
        + "/"
        + dict(labels)["tp"]
        + "/"
        + dict(labels)["role"]
        + "/"
        + dict(labels)["state"]: v
        for (name, labels), v in metrics.items()
        if name == "phasefit_pool_workers"
    }
    assert workers == {
        "H100-SXM/2/prefill/current": 3,
        "H100-SXM/2/prefill/recommended": 5,
        "H100-SXM/2/decode/current": 2,
        "H100-SXM/2/decode/recommended": 0,
        "H100-SXM/1g.10gb/1/prefill/current": 4,
        "H100-SXM/1g.10gb/1/prefill/recommended": 4,
        "H100-SXM/1g.10gb/1/decode/current": 0,  # the recommended count is unknown: no series, never 0
    }
    assert metrics[("phasefit_fleet_lost_tokens_per_second", ())] == 250.0
    at = (NOW + timedelta(minutes=5)).timestamp()
    assert metrics[("phasefit_analyzer_last_run_timestamp_seconds", ())] == at


def test_an_analyzer_that_never_ran_reads_as_timestamp_zero(client: Any) -> None:
    metrics = scrape(client)
    assert metrics[("phasefit_analyzer_last_run_timestamp_seconds", ())] == 0
    assert metrics[("phasefit_fleet_lost_tokens_per_second", ())] == 0


def test_conclusions_are_a_pure_function_of_findings_and_summary(sqlite_engine: Engine) -> None:
    store(sqlite_engine, finding("w-9", FindingKind.PREFILL_ON_HIGH_BANDWIDTH, 7.0, pool=None))
    with sqlite_engine.connect() as connection:
        stored = list_findings(connection)
        assert latest_analysis(connection) is None
    result = conclude(stored, {}, None)
    assert result.misplaced == {("", "w-9", "H100-SXM", "decode", "", "prefill-on-high-bandwidth")}
    assert result.fleet_lost == 7.0  # a worker outside any pool still counts for the fleet
    assert result.pool_lost == {}


def test_a_finding_that_estimates_no_loss_has_no_loss_series(sqlite_engine: Engine) -> None:
    degraded = finding("w-8", FindingKind.TELEMETRY_DEGRADED, 0.0, pool=None, lost_tokens_per_s=None)
    store(sqlite_engine, degraded, finding("w-9", FindingKind.PREFILL_ON_HIGH_BANDWIDTH, 7.0, pool=None))
    with sqlite_engine.connect() as connection:
        stored = list_findings(connection)
    assert {s.finding.worker_id: s.finding.lost_tokens_per_s for s in stored} == {"w-8": None, "w-9": 7.0}
    result = conclude(stored, {}, None)
    assert [key[1] for key in result.worker_lost] == ["w-9"]  # unknown: no series, never 0
    assert result.fleet_lost == 7.0  # the unknown adds nothing


def test_requests_are_counted_by_route_template(client: Any) -> None:
    client.get("/v1/workers/a/samples")
    client.get("/v1/workers/b/samples")
    client.get("/no/such/path")
    client.post("/v1/ingest", content=body([gpu()]), headers=auth(INGEST_A))
    registry = client.app.state.phasefit.registry
    route = "/v1/workers/{worker_id:path}/samples"
    assert (
        registry.get_sample_value(
            "phasefit_service_requests_total", {"method": "GET", "route": route, "code": "404"}
        )
        == 2
    )
    assert (
        registry.get_sample_value(
            "phasefit_service_requests_total", {"method": "GET", "route": "unmatched", "code": "404"}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "phasefit_service_request_duration_seconds_count", {"method": "POST", "route": "/v1/ingest"}
        )
        == 1
    )


def test_lost_output_tokens_and_requests_are_gauges_and_unknown_has_no_series(
    client: Any, sqlite_engine: Engine
) -> None:
    deployed = "c1/router-a/meta-llama/Llama-3.1-70B-Instruct"  # "<cluster>/<deployment>/<model>"
    store(
        sqlite_engine,
        finding(
            "worker-7",
            FindingKind.DECODE_ON_LOW_BANDWIDTH,
            300.0,
            pool=deployed,
            lost_output_tokens_per_s=120.0,
            lost_requests_per_s=0.5,
        ),
    )
    with writing(sqlite_engine) as connection:
        put_analysis(
            connection,
            created_at=NOW,
            from_ts=NOW - timedelta(hours=1),
            to_ts=NOW,
            summary={
                "version": 3,
                "pools": [
                    {
                        "pool": deployed,
                        "cluster": "c1",
                        "deployment": "router-a",
                        "model": "meta-llama/Llama-3.1-70B-Instruct",
                        "lost": LOST,
                        "capacity_tokens_per_s": None,  # unknown: no series, never 0
                    }
                ],
                "fleet": {
                    "lost": LOST,
                    "judged_workers": 3,
                    "unjudged_workers": 2,
                    "unjudged_reasons": {"unknown role": 2},
                },
            },
        )
    metrics = scrape(client)
    pool = (("pool", deployed),)
    assert metrics[("phasefit_pool_lost_output_tokens_per_second", pool)] == 120.0
    assert metrics[("phasefit_pool_lost_requests_per_second", pool)] == 0.5
    assert metrics[("phasefit_pool_lost_tokens_per_second", pool)] == 300.0
    assert not [k for k in metrics if k[0] == "phasefit_pool_capacity_tokens_per_second"]
    assert metrics[("phasefit_fleet_lost_output_tokens_per_second", ())] == 120.0
    assert metrics[("phasefit_fleet_lost_requests_per_second", ())] == 0.5
    assert metrics[("phasefit_fleet_judged_workers", ())] == 3
    assert metrics[("phasefit_fleet_unjudged_workers", (("reason", "unknown role"),))] == 2
    labels = (
        ("model", "meta-llama/Llama-3.1-70B-Instruct"),  # from the pool row, not from splitting its key
        ("pool", deployed),
        ("role", "decode"),
        ("sku", "H100-SXM"),
        ("worker", "worker-7"),
    )
    assert metrics[("phasefit_worker_lost_output_tokens_per_second", labels)] == 120.0
    assert metrics[("phasefit_worker_lost_requests_per_second", labels)] == 0.5
    assert metrics[("phasefit_worker_lost_tokens_per_second", labels)] == 300.0
    text = client.get("/metrics").text
    assert "# HELP phasefit_fleet_lost_tokens_per_second Secondary: total (prompt + output)" in text


def test_without_a_run_the_output_gauges_have_no_sample(client: Any) -> None:
    metrics = scrape(client)
    assert ("phasefit_fleet_lost_output_tokens_per_second", ()) not in metrics
    assert ("phasefit_fleet_lost_requests_per_second", ()) not in metrics
