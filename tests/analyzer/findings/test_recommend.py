from __future__ import annotations

import math

import pytest

from analyzer.findings.kv_fabric import KvFabricParams, kv_handoff_check
from analyzer.findings.recommend import pair_swaps, recommended_ratio
from analyzer.findings.registry import FindingParams, rules_of_thumb
from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.pools.analysis import PoolAnalysis
from fleet.catalog import load_catalog
from fleet.models import kv_bytes_per_token
from fleet.precision import Precision
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


@pytest.fixture(scope="module")
def result() -> AnalysisResult:
    fleet = Fleet(
        workers([("node00", H100, 0, 4), ("node01", H200, 4, 0)]),
        hours=12,
        rate_rps=lambda h: 30.0,
        osl=lambda h: 900.0,
    )
    gpu, engine = fleet.columns()
    return analyze(input_from_samples(gpu, engine), CATALOG)


def _pool(result: AnalysisResult) -> PoolAnalysis:
    (pool,) = result.pools
    return pool


def test_swaps_pair_a_low_bandwidth_decoder_with_a_high_bandwidth_prefiller(result: AnalysisResult) -> None:
    segment = _pool(result).segments[-1]
    assert segment.placement is not None
    pairs = pair_swaps(segment.placement.changes, segment.placement.groups)
    assert pairs
    for a, b in pairs.items():
        assert pairs[b] == a
    workers = result.grid.workers
    assert {workers[a].split("/")[0] for a in pairs} == {"node00", "node01"}


def test_the_recommended_ratio_follows_the_dynamo_planner(result: AnalysisResult) -> None:
    pool = _pool(result)
    segment = pool.segments[-1]
    ratio = recommended_ratio(pool, segment)
    assert ratio is not None
    assert ratio.prefill_now + ratio.decode_now == 8
    assert ratio.prefill_best + ratio.decode_best == 8
    assert ratio.ratio_recommended == pytest.approx(ratio.prefill_best / ratio.decode_best)
    per_sku = ratio.per_sku["H200-SXM/tp2"]
    mix = segment.mix
    expected = math.ceil(ratio.peak_requests_per_s * mix.osl / per_sku.decode_tokens_per_s_per_worker)
    assert per_sku.decode_replicas_for_peak == pytest.approx(expected, abs=1)
    assert "H100-SXM/tp2: 0P/4D ->" in ratio.per_sku_text()
    summary = result.summary["pools"][0]
    assert summary["prefill_decode_now"] == "4:4"
    assert summary["recommended"]["H200-SXM/tp2"]["prefill_now"] == 4


def test_rules_of_thumb_are_computed_with_their_values(result: AnalysisResult) -> None:
    pool = _pool(result)
    checks = {c.name: c for c in rules_of_thumb(pool, pool.segments[-1])}
    assert checks["model-size"].passed is True and checks["model-size"].value == pytest.approx(
        70.55e9, rel=0.01
    )
    assert checks["output-length"].passed is True
    assert checks["utilisation"].value is not None and 0 < checks["utilisation"].value < 1.5
    assert checks["kv-handoff"].passed is None  # no link configured: the need, without a verdict
    assert "colocated-vs-disaggregated" in checks


def test_the_kv_handoff_is_checked_against_the_link(result: AnalysisResult) -> None:
    pool = _pool(result)
    segment = pool.segments[-1]
    need = kv_handoff_check(pool, segment).value
    assert need is not None
    arch = CATALOG.models.get("llama-3.1-70b")
    per_worker_prompt = 30.0 * 1300.0 / 4  # 4 prefill workers
    assert need == pytest.approx(per_worker_prompt * kv_bytes_per_token(arch, Precision.FP8), rel=0.1)
    slow = kv_handoff_check(pool, segment, KvFabricParams(link_bytes_per_s=need / 2))
    fast = kv_handoff_check(pool, segment, KvFabricParams(link_bytes_per_s=need * 10))
    assert slow.passed is False and fast.passed is True


def test_a_slow_fabric_becomes_a_finding() -> None:
    from analyzer.pipeline import AnalyzerParams
    from fleet.contract import FindingKind

    fleet = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=8, rate_rps=lambda h: 30.0)
    gpu, engine = fleet.columns()
    params = AnalyzerParams(findings=FindingParams(kv_fabric=KvFabricParams(link_bytes_per_s=1e9)))
    findings = analyze(input_from_samples(gpu, engine), CATALOG, params).findings
    (fabric,) = [f for f in findings if f.kind is FindingKind.KV_FABRIC_UNDERPROVISIONED]
    assert "GB/s link" in str(fabric.evidence["kv-handoff_detail"])
