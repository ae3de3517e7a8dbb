"""Latency histograms on the shared grid (fleet.histograms): re-binning, merging, quantiles, storage."""

from __future__ import annotations

import numpy as np
import pytest

from collector.engines import quantile as collector_quantile
from fleet import histograms

# The engines' own bounds (the fixtures' vLLM and SGLang expositions)
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
             20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
               400.0]  # fmt: skip
SGLANG_ITL = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
              0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]  # fmt: skip


def _random_histogram(rng: np.random.Generator, le: list[float]) -> tuple[list[float], float]:
    counts = np.cumsum(rng.integers(0, 50, len(le)) * (rng.random(len(le)) < 0.4)).astype(float).tolist()
    return counts, counts[-1] + float(rng.integers(0, 5))


@pytest.mark.parametrize(
    "le", [VLLM_TTFT, SGLANG_TTFT, SGLANG_ITL], ids=["vllm-ttft", "sglang-ttft", "sglang-itl"]
)
def test_the_engines_bounds_are_on_the_grid_so_a_rebinned_quantile_is_their_own(le: list[float]) -> None:
    assert set(le) <= set(histograms.BOUNDS_S)
    rng = np.random.default_rng(7)
    for _ in range(50):
        counts, count = _random_histogram(rng, le)
        ours = histograms.rebin(le, counts, count)
        assert ours.sum() == pytest.approx(count)
        theirs = dict(zip(le, counts, strict=True)) | {float("inf"): count}
        for q in (0.5, 0.9, 0.99):
            expected = collector_quantile(q, theirs)
            got = histograms.quantile(q, ours)
            if expected is None:
                assert got is None
            elif expected == le[-1]:  # in the +Inf bucket: the grid's last bound stands for "above"
                assert got is not None and got >= le[-1]
            else:
                assert got == pytest.approx(expected, rel=1e-9)


def test_merging_is_the_bucket_wise_sum_and_its_quantile_is_the_pools() -> None:
    a = histograms.rebin([0.03, 0.04], [0.0, 900.0], 900.0)
    b = histograms.rebin([0.05, 0.06], [0.0, 100.0], 100.0)
    pool = histograms.merged([a, None, b])
    assert pool is not None and pool.sum() == 1000.0
    assert histograms.quantile(0.9, pool) == pytest.approx(0.04)
    assert histograms.merged([None, None]) is None


def test_nothing_observed_is_unknown_never_zero() -> None:
    empty = histograms.rebin([0.1], [0.0], 0.0)
    assert empty.sum() == 0.0 and histograms.quantile(0.9, empty) is None
    assert histograms.quantile(0.9, None) is None


def test_a_histogram_that_is_not_one_is_refused_with_the_reason() -> None:
    with pytest.raises(histograms.HistogramError, match="must rise"):
        histograms.rebin([0.2, 0.1], [1.0, 2.0], 2.0)
    with pytest.raises(histograms.HistogramError, match="must not fall"):
        histograms.rebin([0.1, 0.2], [3.0, 2.0], 3.0)
    with pytest.raises(histograms.HistogramError, match="below the last cumulative"):
        histograms.rebin([0.1], [3.0], 2.0)
    with pytest.raises(histograms.HistogramError, match="cumulative counts"):
        histograms.rebin([0.1, 0.2], [3.0], 3.0)


def test_the_stored_form_round_trips_and_stays_small() -> None:
    rng = np.random.default_rng(3)
    for le in (VLLM_TTFT, SGLANG_TTFT, SGLANG_ITL):
        counts, count = _random_histogram(rng, le)
        buckets = histograms.rebin(le, counts, count)
        stored = histograms.encode(buckets)
        assert stored is not None
        back = histograms.decode(stored)
        assert back is not None
        np.testing.assert_allclose(back, buckets, rtol=1e-6, atol=1e-3)
        assert len(stored) <= 1 + 5 * (len(le) + 1) + 4  # a knot per engine bucket at most
    assert histograms.encode(None) is None and histograms.decode(None) is None
    arbitrary = rng.random(histograms.SIZE) * (rng.random(histograms.SIZE) < 0.5)
    np.testing.assert_allclose(
        histograms.decode(histograms.encode(arbitrary)), arbitrary, rtol=1e-6, atol=1e-6
    )
    with pytest.raises(histograms.HistogramError):
        histograms.decode(b"\x03\x00")


def test_the_contract_form_rebins_to_the_same_buckets() -> None:
    buckets = histograms.rebin(SGLANG_ITL, *_random_histogram(np.random.default_rng(5), SGLANG_ITL))
    form = histograms.to_contract(buckets)
    again = histograms.rebin(form["le"], form["counts"], form["count"])  # type: ignore[arg-type]
    np.testing.assert_allclose(again, buckets, atol=1e-9)


def test_the_quick_stored_form_is_the_long_ways_and_many_decode_and_sum_at_once() -> None:
    rng = np.random.default_rng(11)
    stored, expected = [], []
    for number in range(400):
        le = (VLLM_TTFT, SGLANG_TTFT, SGLANG_ITL, [0.013, 0.11, 0.7])[number % 4]  # the last: off the grid
        counts, count = _random_histogram(rng, le)
        if number % 37 == 0:
            counts, count = [0.0] * len(le), float(number % 3)  # nothing below any bound
        stored.append(histograms.stored(le, counts, count))
        expected.append(histograms.rebin(le, counts, count))
        np.testing.assert_allclose(histograms.decode(stored[-1]), expected[-1], rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(histograms.decode_many(stored), np.array(expected), rtol=1e-6, atol=1e-3)
    group = rng.integers(0, 5, len(stored))
    sums = histograms.summed(stored, group, 6)
    for g in range(6):
        np.testing.assert_allclose(sums[g], np.array(expected)[group == g].sum(axis=0), rtol=1e-6, atol=1e-2)
    assert not sums[5].any()  # a group with no histogram sums to nothing (callers keep it unknown)
    assert histograms.decode_many([]).shape == (0, histograms.SIZE)


def test_many_cumulative_curves_encode_at_once_to_what_decode_reads() -> None:
    rng = np.random.default_rng(13)
    per_bucket = rng.random((50, histograms.SIZE)) * (rng.random((50, histograms.SIZE)) < 0.3)
    per_bucket[0] = 0.0  # nothing observed
    per_bucket[1, :-1] = 0.0  # all above the grid
    cumulative = np.cumsum(per_bucket, axis=1)
    stored = histograms.encode_cumulative(cumulative[:, :-1], cumulative[:, -1])
    np.testing.assert_allclose(histograms.decode_many(stored), per_bucket, rtol=1e-5, atol=1e-5)
