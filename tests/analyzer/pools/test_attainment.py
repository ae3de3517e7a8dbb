"""Measured attainment of latency targets from the engines' p90s (analyzer.pools.attainment)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from analyzer.pipeline import AnalysisInput, analyze, input_from_samples
from analyzer.settings import AnalyzerSettings
from fleet import histograms
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


def test_the_pool_p90_comes_from_the_workers_histograms_merged_bucket_by_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Decode worker A serves 950 tokens a window, all in (30, 40] ms; worker B 100, all in (50, 60] ms. The
    # mean of their p90s is about 49 ms, but 90% of the pool's tokens took under 40 ms: the pool's p90 is
    # the 945th of 1,050, as histogram_quantile(0.9, sum by (le) (...)) gives it. A prefill worker's TPOT
    # histogram (its one token) is not the pool's TPOT.
    decode = sorted({w for w, r in zip(*_roles(), strict=True) if r == "decode"})
    fast = histograms.rebin([0.03, 0.04, 0.05], [0.0, 950.0, 950.0], 950.0)
    slow = histograms.encode(histograms.rebin([0.05, 0.06, 0.075], [0.0, 100.0, 100.0], 100.0))  # as stored
    prefill_view = histograms.rebin([1.0, 2.0], [0.0, 50.0], 50.0)
    data = _input(
        {
            "tpot_p90_s": lambda w, role: (0.039 if w == decode[0] else 0.059) if role == "decode" else None,
            "tpot_histogram": lambda w, role: (
                (fast if w == decode[0] else slow) if role == "decode" else prefill_view
            ),
        }
    )
    (tpot,) = _attainment(data, monkeypatch, json.dumps([{"tpot_p90_s": 0.045}]))
    assert tpot["p90_s"] == pytest.approx(0.049) and tpot["share"] == pytest.approx(0.5)
    pool_p90 = 0.03 + 0.01 * 945 / 950
    assert tpot["pool_p90_s"] == pytest.approx(pool_p90) and tpot["pool_met_share"] == pytest.approx(1.0)
    windows = _roles()[0].count(decode[0])  # each decode worker's windows over the six hours
    assert tpot["observations"] == pytest.approx(1050.0 * windows, rel=0.05)
    assert tpot["pool_reason"] is None
    (tight,) = _attainment(data, monkeypatch, json.dumps([{"tpot_p90_s": 0.035}]))
    assert tight["pool_p90_s"] == pytest.approx(pool_p90) and tight["pool_met_share"] == 0.0


def test_without_histograms_the_pool_p90_is_unknown_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _input({"tpot_p90_s": lambda w, role: 0.04 if role == "decode" else None})
    (tpot,) = _attainment(data, monkeypatch, json.dumps([{"tpot_p90_s": 0.05}]))
    assert tpot["share"] == 1.0
    assert tpot["pool_p90_s"] is None and tpot["pool_met_share"] is None and tpot["observations"] is None
    assert "histogram" in tpot["pool_reason"]
