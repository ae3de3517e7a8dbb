"""A group's decode line: when the batches seen justify fitting the decode matmuls' compute efficiency."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analyzer.model.deployment import Deployment, make_deployment
from analyzer.model.efficiency import CALIBRATED, EfficiencyParams
from analyzer.model.roofline import step_time
from analyzer.pools.decode_fit import fit_decode_line
from fleet.catalog import load_catalog

CONTEXT = 1422.0


@pytest.fixture(scope="module")
def h100_70b() -> Deployment:
    return make_deployment(load_catalog(), model="llama-3.1-70b", gpu="H100-SXM", precision="fp8", tp=2)


def _smooth_step(d: Deployment, batch: float) -> float:
    """A step whose matmuls move smoothly from weight reads to compute, as measured kernels do, instead of
    the roofline's sharp corner: the quadratic mean of the two replaces their maximum."""
    s = step_time(d, CALIBRATED, decode_seqs=batch, context_len=CONTEXT)
    return s.total_s - s.matmul_s + float(np.hypot(s.matmul_compute_s, s.weight_read_s))


def _line_step(d: Deployment, batch: float, scale: float, efficiency: float | None) -> float:
    params: EfficiencyParams = (
        CALIBRATED if efficiency is None else replace(CALIBRATED, compute_efficiency=efficiency)
    )
    return scale * step_time(d, params, decode_seqs=batch, context_len=CONTEXT).total_s


def test_a_slope_seen_over_a_narrow_range_of_batches_keeps_the_prior(h100_70b: Deployment) -> None:
    # Batches 48-156 sit below the roofline's corner; the smooth steps bend there, and a lower compute
    # efficiency fits them somewhat better, but carried to 4.5x the largest batch it overshoots by a third.
    batch = np.linspace(48.0, 156.0, 60)
    tpot = np.array([_smooth_step(h100_70b, float(b)) for b in batch])
    line = fit_decode_line(h100_70b, CALIBRATED, batch, np.full_like(batch, CONTEXT), tpot)
    assert line.compute_efficiency is None
    far = 700.0
    predicted = _line_step(h100_70b, far, line.scale, line.compute_efficiency)
    assert predicted / _smooth_step(h100_70b, far) - 1.0 == pytest.approx(0.0, abs=0.12)


def test_batches_deep_in_the_compute_bound_regime_fit_the_efficiency(h100_70b: Deployment) -> None:
    low = replace(CALIBRATED, compute_efficiency=0.3)
    batch = np.linspace(48.0, 400.0, 60)
    tpot = np.array(
        [step_time(h100_70b, low, decode_seqs=float(b), context_len=CONTEXT).total_s for b in batch]
    )
    line = fit_decode_line(h100_70b, CALIBRATED, batch, np.full_like(batch, CONTEXT), tpot)
    assert line.compute_efficiency == pytest.approx(0.3, rel=0.05)
    assert line.scale == pytest.approx(1.0, abs=0.02)
    assert line.residual < 0.01


def test_an_efficiency_the_largest_batches_contradict_is_not_kept() -> None:
    # TPOTs an H200 decode group reported (Llama 3.1 70B TP 2, 1,422 tokens of context), most buckets at
    # small batches: a low compute efficiency fits their slope, but it overshoots the largest batches seen
    # by 17% and the engines' cap (256) by a fifth.
    d = make_deployment(load_catalog(), model="llama-3.1-70b", gpu="H200-SXM", precision="fp8", tp=2)
    seen = ([46.0, 78.0, 123.0, 218.0, 300.0], [15.6e-3, 16.8e-3, 21.2e-3, 29.7e-3, 37.0e-3])
    batch = np.concatenate([np.linspace(46.0, 125.0, 150), np.linspace(130.0, 218.0, 20)])
    tpot = np.interp(batch, *seen)
    line = fit_decode_line(d, CALIBRATED, batch, np.full_like(batch, CONTEXT), tpot)
    assert line.compute_efficiency is None
    for far in (218.0, 256.0):
        predicted = _line_step(d, far, line.scale, line.compute_efficiency)
        assert predicted / float(np.interp(far, *seen)) - 1.0 == pytest.approx(0.0, abs=0.1)
