"""analyzer/model/goodput.py: what one instance serves within its TTFT and TPOT targets."""

from __future__ import annotations

import math

import pytest

from analyzer.model.deployment import make_deployment
from analyzer.model.efficiency import CALIBRATED
from analyzer.model.goodput import Targets, goodput, rate_meeting_ttft, ttft_p90_s
from analyzer.model.moe import step_time
from analyzer.model.perf_model import ThroughputPrediction, Workload, predict
from fleet.catalog import load_catalog

CATALOG = load_catalog()


def _prediction(gpu: str = "H100-SXM") -> ThroughputPrediction:
    d = make_deployment(CATALOG, model="llama-3.1-70b", gpu=gpu, precision="fp8", tp=2)
    return predict(d, Workload(2000, 500))


def test_targets_nothing_misses_leave_goodput_equal_to_throughput() -> None:
    p = _prediction()
    g = goodput(p, Targets(ttft_s=None, tpot_s=10.0))
    assert g.decode_output_tokens_per_s.value == pytest.approx(p.decode_tokens_per_s)
    assert g.decode_batch == p.batch and not g.decode_binding
    assert g.prefill_requests_per_s.value == pytest.approx(p.prefill_tokens_per_s / 2000)
    assert not g.prefill_binding and math.isnan(g.prefill_ttft_p90_s)  # no TTFT target: not asked


def test_a_tpot_target_caps_the_batch_where_the_step_meets_it() -> None:
    p = _prediction()
    target = 0.8 * p.tpot_s
    g = goodput(p, Targets(tpot_s=target))
    assert g.decode_binding and 1.0 < g.decode_batch < p.batch
    step = step_time(p.deployment, CALIBRATED, decode_seqs=g.decode_batch, context_len=2250).total_s
    assert step == pytest.approx(target, rel=1e-6) and g.decode_tpot_s == pytest.approx(target, rel=1e-6)
    assert g.decode_output_tokens_per_s.value == pytest.approx(g.decode_batch / step)
    assert g.decode_requests_per_s.value == pytest.approx(g.decode_output_tokens_per_s.value / 500)
    tighter = goodput(p, Targets(tpot_s=0.6 * p.tpot_s))
    served, tight = g.decode_output_tokens_per_s.value, tighter.decode_output_tokens_per_s.value
    assert tight < served < p.decode_tokens_per_s
    figure = g.decode_output_tokens_per_s
    assert figure.low < figure.value < figure.high


def test_a_target_below_one_sequences_step_serves_nothing_and_says_why() -> None:
    g = goodput(_prediction(), Targets(tpot_s=1e-4, ttft_s=1e-3))
    assert g.decode_output_tokens_per_s.value == 0.0 and g.prefill_requests_per_s.value == 0.0
    assert any("no batch meets TPOT 0.1 ms" in n for n in g.notes)
    assert any("no load meets TTFT 1.0 ms" in n for n in g.notes)


def test_ttft_p90_queues_as_mm1_above_the_idle_floor() -> None:
    assert ttft_p90_s(0.2, 5.0, 0.0) == 0.2
    assert ttft_p90_s(0.2, 5.0, 0.4) == 0.2  # rho 0.08: nine in ten arrivals find no wait
    # rho 0.5: P(wait > t) = 0.5 exp(-2.5 t) = 0.1 at t = ln 5 / 2.5
    assert ttft_p90_s(0.2, 5.0, 2.5) == pytest.approx(0.2 + math.log(5.0) / 2.5)
    assert ttft_p90_s(0.2, 5.0, 5.0) == math.inf
    loads = [ttft_p90_s(0.2, 5.0, lam) for lam in (1.0, 2.0, 3.0, 4.0, 4.9)]
    assert loads == sorted(loads)


def test_a_ttft_target_holds_the_load_where_its_p90_meets_it() -> None:
    p = _prediction()
    target = p.ttft_s * 2.5
    g = goodput(p, Targets(ttft_s=target))
    service = p.prefill_tokens_per_s / 2000
    assert g.prefill_binding and 0.0 < g.prefill_requests_per_s.value < service
    assert g.prefill_ttft_p90_s == pytest.approx(target, rel=1e-6)
    looser = goodput(p, Targets(ttft_s=target * 2))
    assert looser.prefill_requests_per_s.value > g.prefill_requests_per_s.value


def test_the_h200_serves_more_decode_goodput_under_the_same_tpot() -> None:
    h100, h200 = _prediction("H100-SXM"), _prediction("H200-SXM")
    target = Targets(tpot_s=0.025)
    assert (
        goodput(h200, target).decode_output_tokens_per_s.value
        > goodput(h100, target).decode_output_tokens_per_s.value
    )


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_targets_must_be_positive_seconds(bad: float) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        Targets(tpot_s=bad)


def test_ranges_rerun_the_search_on_a_slower_and_a_faster_instance() -> None:
    """Under a TTFT target a slower instance loses more goodput than throughput (the queue's tail)."""
    p = _prediction()
    g = goodput(p, Targets(ttft_s=p.ttft_s * 2.5))
    low, central = g.prefill_requests_per_s.low, g.prefill_requests_per_s.value
    throughput_low = p.ranges["prefill"][0] / p.prefill_tokens_per_s
    assert low / central < throughput_low


def test_a_model_that_does_not_fit_serves_nothing_and_repeats_no_note() -> None:
    d = make_deployment(CATALOG, model="llama-3.1-405b", gpu="H100-SXM", precision="bf16", tp=1)
    p = predict(d, Workload(2000, 500))
    g = goodput(p, Targets(ttft_s=1.0, tpot_s=0.05))
    assert not p.fits and g.decode_output_tokens_per_s.value == 0.0 and g.notes == ()


def test_the_rate_meeting_ttft_is_the_largest_whose_tail_meets_it() -> None:
    rate = rate_meeting_ttft(0.2, 10.0, 1.0)
    assert 0 < rate < 10.0
    assert ttft_p90_s(0.2, 10.0, rate) == pytest.approx(1.0, rel=1e-6)
    assert ttft_p90_s(0.2, 10.0, rate * 1.01) > 1.0
    assert rate_meeting_ttft(1.5, 10.0, 1.0) == 0.0  # a prompt alone misses it
    assert rate_meeting_ttft(0.2, 10.0, 1000.0) == pytest.approx(10.0, rel=1e-3)  # up to saturation
