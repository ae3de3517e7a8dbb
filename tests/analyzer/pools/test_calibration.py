"""Calibration from the fleet's evidence: a saturated worker's speed is its capacity; an unsaturated one's
only a floor (issue 27: an idle prefill worker read as a slow one turned a pool at 30% load into 91%)."""

from __future__ import annotations

from typing import Any

import pytest

from analyzer.pipeline import analyze, input_from_samples
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()
WORKERS = workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)])
SLOW = 6_000.0  # prompt tokens per busy second the prefill workers show, about half the model's


def _pool(rate: float, waiting: float) -> dict[str, Any]:
    fleet = Fleet(WORKERS, rate_rps=lambda hour: rate, prefill_speed=SLOW, prefill_waiting=waiting)
    (pool,) = analyze(input_from_samples(*fleet.columns()), CATALOG).summary["pools"]
    return dict(pool)


def test_an_unsaturated_worker_never_scales_the_capacity_down() -> None:
    pool = _pool(3.0, 0.0)  # prefill about 30% busy, nothing queued
    assert pool["calibration"]["prefill_factor[H100-SXM/tp2]"] == 1.0
    assert pool["recommended"]["H100-SXM/tp2"]["prefill_tokens_per_s_per_worker"] > 1.5 * SLOW
    assert pool["recommended"]["H100-SXM/tp2"]["prefill_source"] == "calibrated"  # never "measured"


def test_a_saturated_worker_s_speed_is_its_capacity() -> None:
    pool = _pool(8.5, 3.0)  # prefill about 95% busy with prompts queued
    assert pool["calibration"]["prefill_factor[H100-SXM/tp2]"] < 0.6
    assert pool["recommended"]["H100-SXM/tp2"]["prefill_tokens_per_s_per_worker"] == pytest.approx(
        SLOW, rel=0.02
    )
