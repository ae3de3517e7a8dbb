"""What ``phasefit analyze`` prints of latency targets: none set said once, each pool's targets and rule."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.settings import AnalyzerSettings
from fleet.catalog import load_catalog
from phasefit.cli.result_output import print_result
from tests.analyzer.synthetic import H100, H200, Fleet, workers


def _printed(result: AnalysisResult) -> str:
    out = io.StringIO()
    print_result(result, Console(file=out, width=250, highlight=False))
    return out.getvalue()


def _analysis() -> AnalysisResult:
    gpu, eng = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=4).columns()
    return analyze(input_from_samples(gpu, eng), load_catalog(), AnalyzerSettings().params())


def test_no_targets_is_said_once() -> None:
    text = _printed(_analysis())
    assert text.count("No latency targets set: capacity is raw throughput") == 1
    assert "latency targets: " not in text


def test_each_pool_with_targets_says_them_and_their_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", '[{"model": "llama-3.1-70b", "tpot_p90_s": 0.05}]')
    text = _printed(_analysis())
    assert "No latency targets set" not in text
    notes = text.split("Pool notes", 1)[1]
    assert (
        "default/meta-llama/Llama-3.1-70B-Instruct: latency targets: TPOT p90 0.05 s "
        "(settings, PHASEFIT_ANALYZER_TARGETS[0])" in notes
    )
    # The synthetic engines send no p90s: its attainment is unknown, and says why.
    unknown = "measured: TPOT unknown (no decode or colocated worker reported a p90 time per output token"
    assert unknown in notes


def test_measured_attainment_is_printed_with_the_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", '[{"tpot_p90_s": 0.05}]')
    gpu, eng = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=4).columns()
    eng["tpot_p90_s"] = [0.04 if role == "decode" else None for role in eng["role"]]
    result = analyze(input_from_samples(gpu, eng), load_catalog(), AnalyzerSettings().params())
    notes = _printed(result).split("Pool notes", 1)[1]
    assert "measured: TPOT p90 met 100% of serving time (p90 0.04 s)" in notes
