from __future__ import annotations

import json

import numpy as np
import pytest

from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.settings import AnalyzerSettings
from analyzer.summarize import NO_PLACEMENT
from fleet.catalog import load_catalog
from fleet.contract import Finding, FindingKind, FindingStatus, Severity
from tests.analyzer.synthetic import H100, H200, Fleet, Worker, workers

CATALOG = load_catalog()


def _run(fleet: Fleet) -> AnalysisResult:
    gpu, engine = fleet.columns()
    return analyze(input_from_samples(gpu, engine), CATALOG)


def _kinds(findings: list[Finding]) -> set[FindingKind]:
    return {f.kind for f in findings}


@pytest.fixture(scope="module")
def balanced() -> AnalysisResult:
    return _run(
        Fleet(workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]), hours=24, rate_rps=lambda h: 40.0)
    )


def test_a_well_placed_fleet_has_no_findings(balanced: AnalysisResult) -> None:
    assert balanced.findings == []
    fleet = balanced.summary["fleet"]
    assert fleet["lost"]["tokens_per_s"]["value"] == 0.0
    assert fleet["misplaced_workers"] == 0
    assert fleet["open_findings"] == 0


def test_the_summary_is_json_and_names_every_worker(balanced: AnalysisResult) -> None:
    summary = json.loads(json.dumps(balanced.summary))
    assert set(summary) >= {"version", "from", "to", "fleet", "pools", "workers", "model"}
    assert summary["from"] == "2024-06-03T00:00:00Z"
    assert {w["worker_id"] for w in summary["workers"]} == set(balanced.grid.workers)
    worker = summary["workers"][0]
    assert set(worker) >= {"pool", "sku", "role", "bottleneck", "misplaced", "lost_tokens_per_s", "model"}
    pool = summary["pools"][0]
    for key in (
        "lost",
        "lost_mean",
        "loss_range_to_zero",
        "capacity_tokens_per_s",
        "prefill_decode_ratio",
        "recommended_prefill_decode_ratio",
        "ratio_drift",
        "segments",
        "traffic",
        "checks",
    ):
        assert key in pool, key
    assert pool["workers_by_sku_role"] == {
        "H100-SXM": {"prefill": 4},
        "H200-SXM": {"decode": 2, "prefill": 2},
    }
    assert pool["traffic"]["mean_prompt_tokens"] == pytest.approx(1300.0, rel=0.01)


def test_measured_bottlenecks_follow_the_counters(balanced: AnalysisResult) -> None:
    roles = {w["worker_id"]: w for w in balanced.summary["workers"]}
    assert roles["node00/prefill-1"]["bottleneck"] in ("compute", "underutilised")
    assert roles["node01/decode-1"]["bottleneck"] == "memory-bandwidth"


def test_the_analysis_is_deterministic() -> None:
    fleet = Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=8,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 600.0,
    )
    first, second = _run(fleet), _run(fleet)
    assert [f.model_dump() for f in first.findings] == [f.model_dump() for f in second.findings]
    assert first.summary == second.summary


def test_an_engine_that_serves_nothing_is_found() -> None:
    fleet = Fleet(
        workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]),
        hours=12,
        silent=[("node00/prefill-2", 6.0, 12.0)],
    )
    findings = [f for f in _run(fleet).findings if f.kind is FindingKind.HEALTHY_NOT_SERVING]
    assert [f.worker_id for f in findings] == ["node00/prefill-2"]
    (finding,) = findings
    assert finding.status is FindingStatus.OPEN
    # Buckets hold the windows whose end falls in them (as the store's rollups do): the 06:00 bucket still
    # holds the window that ended at 06:00, so the first whole silent bucket starts at 07:00.
    assert finding.first_seen.isoformat() == "2024-06-03T07:00:00+00:00"
    assert finding.tokens_per_s == 0.0


def test_a_lost_gpu_degrades_telemetry_and_leaves_the_placement() -> None:
    fleet = Fleet(
        workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]),
        hours=12,
        lost=[("node01/decode-2", 9.0, 12.0)],
    )
    result = _run(fleet)
    (degraded,) = [f for f in result.findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    assert degraded.worker_id == "node01/decode-2"
    assert degraded.severity is Severity.WARNING
    assert "lost" in str(degraded.evidence["main"])
    last = result.pools[0].segments[-1]
    assert result.grid.row("node01/decode-2") not in last.roles  # not counted while its GPUs are gone


def test_a_gpu_lost_briefly_and_recovered_is_reported_as_resolved() -> None:
    # Lost for 2 of 24 hours (8%, under the 25% a gap must last) and back since: a hardware fault still.
    fleet = Fleet(
        workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]),
        hours=24,
        lost=[("node01/decode-2", 9.0, 11.0)],
    )
    result = _run(fleet)
    (degraded,) = [f for f in result.findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    assert degraded.worker_id == "node01/decode-2" and "lost" in str(degraded.evidence["main"])
    assert degraded.status is FindingStatus.RESOLVED and degraded.severity is Severity.WARNING
    assert float(degraded.evidence["flagged_share"]) < 0.25


def test_basic_nvml_telemetry_says_it_cannot_tell() -> None:
    result = _run(
        Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=6, source="nvml-basic")
    )
    degraded = [f for f in result.findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    assert len(degraded) == 4
    assert all(f.severity is Severity.INFO for f in degraded)
    assert all("utilisation only" in str(f.evidence["main"]) for f in degraded)


def test_a_prefill_worker_reading_memory_bound_has_role_drift() -> None:
    fleet = Fleet(
        workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]),
        hours=12,
        gpu_override={"node00/prefill-3": {"tensor": 0.05, "dram": 0.7, "util": 1.0}},
    )
    (drift,) = [f for f in _run(fleet).findings if f.kind is FindingKind.ROLE_DRIFT]
    assert drift.worker_id == "node00/prefill-3"
    assert drift.bottleneck.value == "memory-bandwidth"
    assert float(str(drift.evidence["hours"])) >= 6


def test_workers_of_a_colocated_pool_are_never_misplaced() -> None:
    fleet = Fleet([Worker(f"node0{i}/mixed-1", H100 if i < 2 else H200, "mixed") for i in range(4)], hours=6)
    result = _run(fleet)
    assert result.summary["pools"][0]["serving"] == "colocated"
    assert not _kinds(result.findings) & {
        FindingKind.DECODE_ON_LOW_BANDWIDTH,
        FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    }


def test_operator_settings_become_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_ANALYZER_TPOT_SLO_S", "0.03")
    monkeypatch.setenv("PHASEFIT_ANALYZER_KV_LINK_GB_S", "50")
    monkeypatch.setenv("PHASEFIT_ANALYZER_CLUSTERS", '{"node00": "east", "node01": "east"}')
    params = AnalyzerSettings().params()
    assert params.pool.capacity.tpot_slo_s == 0.03
    assert params.findings.kv_fabric.link_bytes_per_s == 50e9
    assert params.clusters == {"node00": "east", "node01": "east"}
    fleet = Fleet(workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)]), hours=6)
    gpu, engine = fleet.columns()
    tight = analyze(input_from_samples(gpu, engine), CATALOG, params)
    assert tight.summary["pools"][0]["pool"].startswith("east/")
    segment = tight.pools[0].segments[-1]
    decode = segment.capacities[1].decode
    assert decode.tpot_s is not None and decode.tpot_s <= 0.03 + 1e-6


def test_an_empty_range_raises_nothing_and_finds_nothing() -> None:
    fleet = Fleet(workers([("node00", H100, 1, 1)]), hours=2)
    gpu, engine = fleet.columns()
    data = input_from_samples(
        gpu, engine, start=float(np.max(gpu["ts"])) + 7200.0, end=float(np.max(gpu["ts"])) + 4 * 3600.0
    )
    result = analyze(data, CATALOG)
    assert [f for f in result.findings if f.kind in (FindingKind.DECODE_ON_LOW_BANDWIDTH,)] == []
    fleet = result.summary["fleet"]
    # Nothing was seen, so nothing is known: no loss, no capacity, no cost (null, never 0 or $0).
    for unit in ("tokens_per_s", "output_tokens_per_s", "requests_per_s"):
        assert fleet["lost"][unit] == fleet["lost_mean"][unit] == {"value": None, "low": None, "high": None}
    assert fleet["capacity_tokens_per_s"] is None
    assert fleet["weekly_cost_usd"] is None and fleet["misplacement_cost_per_week_usd"] is None
    assert fleet["judged_workers"] == 0
    assert fleet["unjudged_workers"] == fleet["workers"] == 2
    assert all(w["misplaced"] is None and w["unjudged_reason"] for w in result.summary["workers"])


def test_lost_capacity_comes_in_output_tokens_and_requests_first(balanced: AnalysisResult) -> None:
    result = _run(
        Fleet(
            workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
            hours=8,
            window_s=900.0,
            rate_rps=lambda h: 12.0,
            osl=lambda h: 900.0,
        )
    )
    fleet = result.summary["fleet"]
    for field in ("lost", "lost_mean"):
        for unit in ("output_tokens_per_s", "requests_per_s", "tokens_per_s"):
            for bound in ("value", "low", "high"):
                assert fleet[field][unit][bound] is not None, f"{field}.{unit}.{bound}"
    assert 0 < fleet["lost"]["output_tokens_per_s"]["value"] < fleet["lost"]["tokens_per_s"]["value"]
    pool = result.summary["pools"][0]
    # tokens = requests x (prompt + output); output tokens = requests x output
    mix = pool["traffic"]["mean_prompt_tokens"] + pool["traffic"]["mean_output_tokens"]
    lost = pool["lost"]
    assert lost["tokens_per_s"]["value"] == pytest.approx(lost["requests_per_s"]["value"] * mix, rel=0.05)
    assert pool["cluster"] == "default" and "deployment" in pool
    assert {"output_tokens_per_s", "requests_per_s"} <= set(pool["segments"][-1]["lost"])
    misplaced = [w for w in result.summary["workers"] if w["misplaced"]]
    assert misplaced and all(w["lost_output_tokens_per_s"] > 0 for w in misplaced)


def test_a_price_that_is_not_set_is_never_zero_dollars(balanced: AnalysisResult) -> None:
    fleet = balanced.summary["fleet"]
    assert fleet["price"] == "price not set"  # the default catalog carries no prices
    for key in ("weekly_cost_usd", "idle_cost_per_week_usd", "misplacement_cost_per_week_usd"):
        assert fleet[key] is None, key
        assert balanced.summary["pools"][0][key] is None, key


def test_every_worker_is_judged_where_the_counters_are_measured(balanced: AnalysisResult) -> None:
    fleet = balanced.summary["fleet"]
    assert fleet["judged_workers"] == fleet["workers"] and fleet["unjudged_workers"] == 0
    assert fleet["unjudged_reasons"] == {}
    assert fleet["physical_gpus"] == fleet["gpus"] == 16
    assert all(w["misplaced"] is False and w["unjudged_reason"] is None for w in balanced.summary["workers"])


def test_workers_without_profiling_fields_are_not_judged() -> None:
    result = _run(
        Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=6, source="nvml-basic")
    )
    fleet = result.summary["fleet"]
    assert fleet["judged_workers"] == 0 and fleet["unjudged_workers"] == 4
    (reason,) = fleet["unjudged_reasons"]
    assert "profiling" in reason
    for worker in result.summary["workers"]:
        assert worker["bottleneck"] == "unknown"
        assert worker["misplaced"] is None and worker["unjudged_reason"] == reason


def test_pool_notes_and_a_callers_warnings_reach_the_summary() -> None:
    fleet = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=4)
    gpu, engine = fleet.columns()
    engine["precision"] = [None] * len(engine["ts"])
    result = analyze(
        input_from_samples(gpu, engine), CATALOG, extra_warnings=["prometheus: 3 series dropped"]
    )
    warnings = result.summary["warnings"]
    pool = result.summary["pools"][0]["pool"]
    assert f"{pool}: no worker reports its precision: assumed bf16" in warnings
    assert warnings[-1] == "prometheus: 3 series dropped"


def test_a_worker_with_no_tp_and_no_gpus_is_kept_and_left_unjudged() -> None:
    """An engine the collector could not join to GPUs (tp and gpu_uuids unknown) neither crashes the
    analysis nor gets a TP degree by default: it stays in its pool, outside every SKU group, unjudged."""
    spec = workers([("node00", H100, 4, 0), ("node01", H200, 2, 2)])
    gpu, engine = Fleet(spec, hours=24, rate_rps=lambda h: 40.0).columns()
    lonely = engine["worker_id"][0]
    for i, worker_id in enumerate(engine["worker_id"]):
        if worker_id == lonely:
            engine["tp"][i], engine["gpu_uuids"][i] = None, []
    gpu["worker_id"] = [None if w == lonely else w for w in gpu["worker_id"]]
    result = analyze(input_from_samples(gpu, engine), CATALOG)
    row = next(w for w in result.summary["workers"] if w["worker_id"] == lonely)
    assert row["misplaced"] is None and row["unjudged_reason"]
    assert row["sku"] == "unknown"
    pool = result.summary["pools"][0]
    assert any("neither a TP degree nor their GPUs" in note for note in pool["notes"])
    fleet_summary = result.summary["fleet"]
    assert fleet_summary["judged_workers"] + fleet_summary["unjudged_workers"] == fleet_summary["workers"]


def test_a_pool_whose_placement_cannot_be_weighed_judges_none_of_its_workers() -> None:
    """A model the catalog does not know, on a fleet whose telemetry does not measure capacities either: its
    workers' bottlenecks are measured, but no worker is called well placed (misplaced: null, with why)."""
    spec = workers([("node00", H100, 2, 2), ("node01", H200, 2, 2)])
    gpu, engine = Fleet(spec, hours=24, rate_rps=lambda h: 40.0, model="acme/uncatalogued-70b").columns()
    result = analyze(input_from_samples(gpu, engine), CATALOG)
    assert result.summary["pools"][0]["capacity_tokens_per_s"] is None
    assert {w["misplaced"] for w in result.summary["workers"]} == {None}
    fleet = result.summary["fleet"]
    assert fleet["judged_workers"] == 0 and fleet["unjudged_workers"] == len(result.summary["workers"])
    assert list(fleet["unjudged_reasons"]) == [NO_PLACEMENT]
