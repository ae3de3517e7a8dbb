from __future__ import annotations

import math

import pytest

from analyzer.capacity import CapacityParams, PoolCalibration, RoleCapacity, group_capacity
from analyzer.decode_fit import DecodeLine
from analyzer.deployment import make_deployment
from analyzer.pools import SkuGroup
from fleet.catalog import load_catalog

CATALOG = load_catalog()
ISL, OSL = 1334.0, 175.0


def _group(gpu: str, rows: range) -> SkuGroup:
    d = make_deployment(CATALOG, model="llama-3.1-70b", gpu=gpu, precision="fp8", tp=2)
    return SkuGroup(d.gpu, 2, tuple(rows), d)


H100 = _group("H100 SXM", range(0, 8))
H200 = _group("H200 SXM", range(8, 16))


def _inverted_calibration() -> PoolCalibration:
    """H100s decode (a line up to batch 38), H200s prefill (a measured factor): every other figure is
    transferred, as in a fleet placed backwards."""
    return PoolCalibration(
        prefill_factor={H200.key: (1.07, 0.006)},
        decode={H100.key: DecodeLine(scale=0.97, residual=0.02, max_batch_seen=38.0, points=200)},
        pooled_prefill=1.07,
        pooled_decode=0.97,
        skus={H100.key: H100.sku, H200.key: H200.sku},
    )


def test_correlation_is_the_shared_share_of_the_uncertainty() -> None:
    assert RoleCapacity(1.0, 0.2, "transferred", shared=0.05).correlation == pytest.approx(0.25)
    assert RoleCapacity(1.0, 0.2, "measured").correlation == 0.0
    assert RoleCapacity(1.0, 0.1, "measured", shared=0.3).correlation == 1.0
    assert RoleCapacity(0.0, 0.0, "model", fits=False).correlation == 0.0


def test_capacities_from_one_source_share_its_error() -> None:
    p = CapacityParams()
    cal = _inverted_calibration()
    h100, h200 = (group_capacity(g, cal, ISL, OSL, p) for g in (H100, H200))
    # Prefill: the H100 borrows the H200's measured factor; equal compute adds no cross-SKU error.
    assert (h200.prefill.source, h100.prefill.source) == ("measured", "transferred")
    assert h100.prefill.uncertainty == pytest.approx(p.measured_uncertainty)
    assert h100.prefill.correlation == pytest.approx(1.0)
    assert h200.prefill.correlation == pytest.approx(1.0)
    # Decode: both extrapolate the H100's line beyond batch 38; the H200 also borrows its scale, and only
    # the cross-SKU part of its error (bandwidth and memory differ) is its own.
    assert (h100.decode.source, h200.decode.source) == ("measured", "transferred")
    assert h100.decode.correlation == pytest.approx(1.0)
    assert h200.decode.batch is not None and h200.decode.batch > 4 * 38.0
    extrapolation = p.extrapolation_per_doubling * math.log2(h200.decode.batch / 38.0)
    assert h200.decode.shared == pytest.approx(p.measured_uncertainty + extrapolation)
    assert 0.5 < h200.decode.correlation < 1.0


def test_an_uncalibrated_model_shares_what_cancels_in_cross_sku_ratios() -> None:
    p = CapacityParams()
    cal = PoolCalibration(skus={H100.key: H100.sku, H200.key: H200.sku})
    capacity = group_capacity(H200, cal, ISL, OSL, p)
    for role in (capacity.prefill, capacity.decode):
        assert role.source == "model"
        assert role.uncertainty == pytest.approx(p.model_uncertainty)
        assert role.shared == pytest.approx(p.model_uncertainty - p.transfer_uncertainty)
