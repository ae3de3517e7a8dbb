"""The prompt load prefill workers were seen serving within a TTFT target, and the capacity it sets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import pytest

from analyzer.pools.calibration import CapacityParams
from analyzer.pools.capacity import group_capacity
from analyzer.pools.ttft_evidence import SEEN_QUANTILE, TtftPoints, ttft_points
from analyzer.telemetry.grid import WorkerGrid
from tests.analyzer.pools.test_capacity import H100, H200, ISL, OSL, _inverted_calibration


def test_the_load_seen_within_a_target_is_a_high_quantile_of_the_buckets_that_met_it() -> None:
    rates = np.arange(1.0, 11.0) * 1000.0  # 1,000 .. 10,000 prompt tokens/s
    points = TtftPoints(rates, np.linspace(0.2, 2.0, 10))  # the busier, the slower
    met = rates[np.linspace(0.2, 2.0, 10) <= 1.0]
    assert points.load_within(1.0, 3) == pytest.approx(float(np.quantile(met, SEEN_QUANTILE)))
    assert points.load_within(1.0, len(met) + 1) is None  # too few buckets to say
    assert points.load_within(0.1, 1) is None  # none met it


@dataclass
class _Grid:
    bucket_s: float
    engine_s: np.ndarray[Any, Any]
    prompt_tokens: np.ndarray[Any, Any]
    ttft_p90_s: np.ndarray[Any, Any]

    def rate(self, tokens: np.ndarray[Any, Any], where: Any) -> np.ndarray[Any, Any]:
        return np.asarray(tokens / np.maximum(self.engine_s[where], 1e-9))


def test_only_prefill_buckets_the_engine_reported_count() -> None:
    grid = _Grid(
        bucket_s=60.0,
        engine_s=np.array([[60.0, 60.0, 20.0, 60.0]]),
        prompt_tokens=np.array([[6e5, 3e5, 1e5, 6e5]]),
        ttft_p90_s=np.array([[0.5, np.nan, 0.4, 0.6]]),
    )
    prefill = np.array([[True, True, True, False]])
    points = ttft_points(cast(WorkerGrid, grid), np.array([0]), prefill)
    assert points.rates.tolist() == [10_000.0] and points.p90s.tolist() == [0.5]


def _seen(share: float, group: str = H200.key) -> Any:
    """A calibration whose ``group`` served ``share`` of its prefill speed within a 1 s TTFT p90."""
    cal = _inverted_calibration()
    speed = 10_000.0
    rates = np.full(20, share * speed)
    return replace(
        cal,
        prefill_measured={group: speed},
        prefill_ttft={group: TtftPoints(rates, np.full(20, 0.8))},
    )


def test_what_the_workers_served_within_the_target_outranks_a_lower_model_bound() -> None:
    p = CapacityParams(ttft_slo_s=1.0)
    modelled = group_capacity(H200, _inverted_calibration(), ISL, OSL, p).prefill
    raw = group_capacity(H200, _inverted_calibration(), ISL, OSL, CapacityParams()).prefill
    assert not modelled.ttft_seen and modelled.tokens_per_s < raw.tokens_per_s
    share = (modelled.tokens_per_s / raw.tokens_per_s + 1.0) / 2.0  # seen above the model's bound
    seen = group_capacity(H200, _seen(share), ISL, OSL, p).prefill
    assert seen.ttft_seen and seen.source == "measured"
    assert seen.tokens_per_s == pytest.approx(share * raw.tokens_per_s)
    assert seen.uncertainty == pytest.approx(p.measured_uncertainty)
    # Another group's evidence is borrowed as a share of this one's capacity, with this one's uncertainty.
    borrowed = group_capacity(H100, _seen(share), ISL, OSL, p).prefill
    raw_h100 = group_capacity(H100, _inverted_calibration(), ISL, OSL, CapacityParams()).prefill
    assert borrowed.ttft_seen and borrowed.tokens_per_s == pytest.approx(share * raw_h100.tokens_per_s)
    assert borrowed.uncertainty == pytest.approx(raw_h100.uncertainty)
    # Seen below the model's bound, or with no target, the evidence changes nothing.
    low = group_capacity(H200, _seen(0.01), ISL, OSL, p).prefill
    assert not low.ttft_seen and low.tokens_per_s == pytest.approx(modelled.tokens_per_s)
    untargeted = group_capacity(H200, _seen(share), ISL, OSL, CapacityParams()).prefill
    assert untargeted.tokens_per_s == pytest.approx(raw.tokens_per_s)


def _l40s() -> Any:
    from analyzer.model.deployment import make_deployment
    from analyzer.pools.pool import SkuGroup
    from tests.analyzer.pools.test_capacity import CATALOG

    d = make_deployment(CATALOG, model="llama-3.1-70b", gpu="L40S", precision="fp8", tp=2)
    return SkuGroup(d.gpu, 2, tuple(range(16, 24)), d)


def test_evidence_is_borrowed_only_from_the_same_compute_and_never_against_a_prompt_alone() -> None:
    l40s = _l40s()
    cal = _seen(0.9)
    cal = replace(cal, skus={**cal.skus, l40s.key: l40s.sku})
    loose = CapacityParams(ttft_slo_s=1.0)
    # The H200's share says nothing of an L40S: a GPU of other compute keeps the queueing model's bound.
    assert not group_capacity(l40s, cal, ISL, OSL, loose).prefill.ttft_seen
    # A target a prompt alone misses on the H100 stays unmet there, whatever the H200 was seen doing.
    alone = group_capacity(H100, _inverted_calibration(), ISL, OSL, CapacityParams(ttft_slo_s=1.0)).prefill
    target = (alone.ttft_s or 0.0) * 0.5
    tight = CapacityParams(ttft_slo_s=target)
    fast = replace(cal, prefill_ttft={H200.key: TtftPoints(np.full(20, 9_000.0), np.full(20, target / 2))})
    assert group_capacity(H200, fast, ISL, OSL, tight).prefill.ttft_seen  # its own evidence stands
    h100 = group_capacity(H100, fast, ISL, OSL, tight).prefill
    assert h100.tokens_per_s == 0 and not h100.ttft_seen
