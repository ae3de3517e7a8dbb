"""Measured attainment of latency targets from the engines' p90s (analyzer.pools.attainment)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from analyzer.pipeline import AnalysisInput, analyze, input_from_samples
from analyzer.settings import AnalyzerSettings
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


def _input(p90: dict[str, Any] | None) -> AnalysisInput:
    """One pool of two prefill and two decode workers over six hours; ``p90`` sets engine columns (a
    callable of the sample's worker id and role) where given."""
    gpu, engine = Fleet(workers([("node00", H100, 2, 2)]), hours=6).columns()
    if p90 is not None:
        for column, value in p90.items():
            engine[column] = [value(w, r) for w, r in zip(engine["worker_id"], engine["role"], strict=True)]
    return input_from_samples(gpu, engine)


def _roles() -> tuple[list[str], list[str]]:
    _, engine = Fleet(workers([("node00", H100, 2, 2)]), hours=6).columns()
    return list(engine["worker_id"]), list(engine["role"])


def _attainment(data: AnalysisInput, monkeypatch: pytest.MonkeyPatch, targets: str) -> list[dict[str, Any]]:
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", targets)
    result = analyze(data, CATALOG, AnalyzerSettings().params())
    (pool,) = result.summary["pools"]
    return list(pool["targets"]["attainment"])


def test_attainment_is_the_share_of_serving_time_whose_p90_met_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One decode worker's TPOT p90 is 40 ms, the other's 60 ms; prefill workers report none (they emit one
    # token), and their TTFT p90 is 0.3 s in every window.
    decode = sorted({w for w, r in zip(*_roles(), strict=True) if r == "decode"})
    data = _input(
        {
            "tpot_p90_s": lambda w, role: (0.04 if w == decode[0] else 0.06) if role == "decode" else None,
            "ttft_p90_s": lambda w, role: 0.3 if role == "prefill" else 5.0,  # decode's own view: not counted
        }
    )
    tpot, ttft = _attainment(data, monkeypatch, json.dumps([{"tpot_p90_s": 0.05, "ttft_p90_s": 0.5}]))[::-1]
    assert (tpot["metric"], ttft["metric"]) == ("tpot", "ttft")
    assert tpot["share"] == pytest.approx(0.5) and tpot["p90_s"] == pytest.approx(0.05)
    assert tpot["worker_buckets"] > 0 and tpot["reason"] is None
    assert ttft["share"] == 1.0 and ttft["p90_s"] == pytest.approx(0.3)  # prefill workers only
    (tight,) = _attainment(data, monkeypatch, json.dumps([{"ttft_p90_s": 0.2}]))
    assert tight["share"] == 0.0


def test_attainment_is_unknown_where_no_engine_reports_the_quantile(monkeypatch: pytest.MonkeyPatch) -> None:
    (e2e,) = _attainment(_input(None), monkeypatch, json.dumps([{"e2e_p90_s": 10}]))
    assert e2e["share"] is None and e2e["p90_s"] is None and e2e["worker_buckets"] == 0
    assert "no decode or colocated worker reported a p90 end-to-end latency" in e2e["reason"]


def test_no_target_no_attainment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHASEFIT_ANALYZER_TARGETS", raising=False)
    result = analyze(_input({"tpot_p90_s": lambda w, role: 0.05}), CATALOG, AnalyzerSettings().params())
    (pool,) = result.summary["pools"]
    assert pool["targets"]["attainment"] == [] and pool["targets"]["source"] == "none"
    assert not np.isnan(result.grid.tpot_p90_s).all()  # measured, kept on the grid all the same


def test_a_simulated_fleets_engines_give_the_attainment_of_its_own_tpot_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulator's decode engines size their batches to the scenario's TPOT target (80 ms): measured
    against a looser target they meet it almost always, against a much tighter one almost never."""
    run = simulate("balanced", CATALOG, days=0.5, window_s=300.0, truth=False)
    data = input_from_samples(run.gpu_columns, run.engine_columns)
    (loose,) = _attainment(data, monkeypatch, json.dumps([{"tpot_p90_s": 0.5}]))
    (tight,) = _attainment(data, monkeypatch, json.dumps([{"tpot_p90_s": 0.005}]))
    assert loose["share"] is not None and loose["share"] > 0.95
    assert tight["share"] is not None and tight["share"] < 0.05
    assert loose["p90_s"] == tight["p90_s"] and 0.005 < loose["p90_s"] < 0.5


def test_a_misplaced_decode_worker_missing_the_tpot_target_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode on the H100s, prefill on the H200s (the demo's misplacement), the H100 decode engines' TPOT p90
    at 70 ms against a 50 ms target: the finding carries it and says what the placement costs."""
    fleet = Fleet(
        workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]),
        hours=8,
        window_s=900.0,
        rate_rps=lambda h: 12.0,
        osl=lambda h: 900.0,
    )
    gpu, engine = fleet.columns()
    engine["tpot_p90_s"] = [0.07 if role == "decode" else None for role in engine["role"]]
    monkeypatch.setenv("PHASEFIT_ANALYZER_TARGETS", json.dumps([{"tpot_p90_s": 0.05}]))
    result = analyze(input_from_samples(gpu, engine), CATALOG, AnalyzerSettings().params())
    decode = [f for f in result.findings if f.kind.value == "decode-on-low-bandwidth"]
    assert decode, [f.kind for f in result.findings]
    for finding in decode:
        assert finding.evidence["tpot_target_s"] == 0.05
        assert finding.evidence["tpot_p90_s"] == pytest.approx(0.07)
        assert finding.evidence["tpot_target_met_share"] == 0.0
        assert finding.recommendation is not None
        assert "costs latency as well as throughput" in finding.recommendation.detail
    monkeypatch.delenv("PHASEFIT_ANALYZER_TARGETS")
    plain = analyze(input_from_samples(gpu, engine), CATALOG, AnalyzerSettings().params())
    assert all("tpot_target_s" not in f.evidence for f in plain.findings)  # no target, no such evidence
