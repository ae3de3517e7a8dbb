"""Without profiling fields (dcgm-exporter's default): busy-time counters are weaker evidence. A decode worker
whose memory controller is busy while it is, on the lower-bandwidth SKU, may be flagged, at most as a warning
and saying what the counters cannot tell; a worker they cannot decide stays unjudged, with the reason."""

from __future__ import annotations

import pytest

from analyzer.findings.evidence import UTILISATION_CAVEAT
from analyzer.findings.loss import SeverityParams
from analyzer.findings.registry import FindingParams
from analyzer.pipeline import AnalysisResult, AnalyzerParams, analyze, input_from_samples
from analyzer.summarize import NO_PROFILING, UTILISATION_UNDECIDED
from fleet.catalog import load_catalog
from fleet.contract import Finding, FindingKind, Severity
from tests.analyzer.synthetic import BUSY_ONLY, H100, H200, PROFILING, UTILISATION, Fleet, workers

CATALOG = load_catalog()
# Each worker's share of the loss is about 8% of the pool's capacity: critical from 5% in these tests.
PARAMS = AnalyzerParams(findings=FindingParams(severity=SeverityParams(critical_share=0.05)))
DECODE = {"node00/decode-1", "node00/decode-2"}
PREFILL = {"node01/prefill-1", "node01/prefill-2"}


def _inverted(counters: str, **kwargs: object) -> AnalysisResult:
    """Decode on the H100s, prefill on the H200s, supply-limited (requests queue at the decode workers)."""
    fleet = Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=8,
        window_s=900.0,
        rate_rps=lambda h: 14.0,
        osl=lambda h: 900.0,
        decode_waiting=3.0,
        counters=counters,
        **kwargs,  # type: ignore[arg-type]
    )
    return analyze(input_from_samples(*fleet.columns()), CATALOG, PARAMS)


def _misplaced(result: AnalysisResult) -> dict[str, Finding]:
    return {
        f.worker_id: f
        for f in result.findings
        if f.worker_id
        and f.kind
        in (
            FindingKind.DECODE_ON_LOW_BANDWIDTH,
            FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
            FindingKind.CAPACITY_ON_SMALL_MEMORY,
        )
    }


def test_on_profiling_fields_the_same_fleet_is_critical() -> None:
    """The control: with DRAM and tensor activity the decode findings are critical here."""
    found = _misplaced(_inverted(PROFILING))
    assert set(found) == DECODE | PREFILL
    assert {found[w].severity for w in DECODE} == {Severity.CRITICAL}
    assert all(f.evidence["activity_evidence"] == "profiling" for f in found.values())
    assert all("evidence_caveat" not in f.evidence for f in found.values())


def test_a_memory_busy_decode_worker_on_the_lower_bandwidth_sku_is_flagged_on_weak_evidence() -> None:
    result = _inverted(UTILISATION)
    found = _misplaced(result)
    assert set(found) == DECODE  # the H200 prefill workers cannot be decided: not flagged
    for finding in found.values():
        assert finding.kind is FindingKind.DECODE_ON_LOW_BANDWIDTH
        assert finding.severity is Severity.WARNING  # never critical on weak evidence
        assert finding.evidence["activity_evidence"] == "utilisation"
        assert finding.evidence["evidence_caveat"] == UTILISATION_CAVEAT
        assert "not whether bandwidth or compute limited throughput" in UTILISATION_CAVEAT
        assert "weak evidence" in str(finding.evidence["severity_basis"])
        assert finding.recommendation is not None
        assert finding.recommendation.detail.startswith("Weak evidence (judged on utilisation counters only")
        assert finding.evidence["mem_copy_util"] == pytest.approx(0.75)
        assert finding.lost_output_tokens_per_s is not None and finding.lost_output_tokens_per_s > 0


def test_counts_stay_honest_on_weak_evidence() -> None:
    summary = _inverted(UTILISATION).summary
    fleet = summary["fleet"]
    assert fleet["judged_workers"] + fleet["unjudged_workers"] == fleet["workers"] == 4
    assert fleet["judged_by_evidence"] == {"utilisation": 2}
    assert fleet["unjudged_reasons"] == {UTILISATION_UNDECIDED: 2}
    assert fleet["misplaced_workers"] == 2
    for worker in summary["workers"]:
        if worker["worker_id"] in DECODE:
            assert worker["misplaced"] is True and worker["activity_evidence"] == "utilisation"
        else:
            assert worker["misplaced"] is None and worker["activity_evidence"] is None
            assert worker["unjudged_reason"] == UTILISATION_UNDECIDED
    assert "cannot decide" in UTILISATION_UNDECIDED


def test_a_decode_worker_whose_memory_controller_idles_stays_unjudged() -> None:
    result = _inverted(UTILISATION, gpu_override={"node00/decode-1": {"mem_copy": 0.3}})
    assert set(_misplaced(result)) == {"node00/decode-2"}
    (worker,) = [w for w in result.summary["workers"] if w["worker_id"] == "node00/decode-1"]
    assert worker["misplaced"] is None and worker["unjudged_reason"] == UTILISATION_UNDECIDED


def test_busy_time_alone_judges_nobody_and_flags_nobody() -> None:
    result = _inverted(BUSY_ONLY)
    assert _misplaced(result) == {}
    fleet = result.summary["fleet"]
    assert fleet["judged_workers"] == 0 and fleet["unjudged_reasons"] == {NO_PROFILING: 4}
    assert fleet["misplaced_workers"] == 0
    # The placement model still sees the pool's loss: it stays in the pool's figures, on no worker.
    pool = result.summary["pools"][0]
    output = pool["lost"]["output_tokens_per_s"]["value"]
    assert output is not None and output > 0
    assert all(w["misplaced"] is None for w in result.summary["workers"])
    degraded = [f for f in result.findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    assert len(degraded) == 4 and all(f.severity is Severity.INFO for f in degraded)


def test_a_utilisation_only_finding_names_the_dcgm_fields_to_enable() -> None:
    degraded = [f for f in _inverted(BUSY_ONLY).findings if f.kind is FindingKind.TELEMETRY_DEGRADED]
    assert degraded
    for f in degraded:
        detail = f.recommendation.detail
        assert "utilisation only" in detail
        assert "DCGM_FI_PROF_SM_ACTIVE" in detail and "DCGM_FI_PROF_DRAM_ACTIVE" in detail
        assert "dcgm-exporter -f" in detail


def test_an_engine_with_no_gpu_joined_is_a_failed_join_not_silent_gpus() -> None:
    from analyzer.findings.telemetry_degraded import _cause, _fix

    assert _cause("no GPU telemetry while the engine reports", "unknown") == "no GPU joined to this engine"
    assert "pod" in _fix("no GPU telemetry while the engine reports", "unknown")
    # GPUs that are attributed but fall silent stay described as such.
    assert _cause("no GPU telemetry while the engine reports", "H100-SXM") == (
        "no GPU telemetry while the engine reports"
    )
    assert _fix("no GPU telemetry while the engine reports", "H100-SXM") == ""
