"""Physics sanity: H200 against H100 in each regime, the batch limits, and counters against load."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.catalog import Catalog
from fleet.precision import Precision
from fleetsim.physics import Efficiency, EngineConfig, StepModel, WorkerHardware
from fleetsim.pool import lindley

BANDWIDTH_RATIO = 4.8 / 3.35


def _model(
    catalog: Catalog, sku: str, tp: int = 2, eff: Efficiency | None = None, model: str = "llama-3.1-70b"
) -> StepModel:
    hw = WorkerHardware(catalog.gpus.get(sku), catalog.models.get(model), Precision.FP8, Precision.FP8, tp)
    return StepModel([hw], EngineConfig(), eff or Efficiency())


@pytest.mark.parametrize("batch", [1, 16, 64])
def test_decode_at_equal_batch_is_the_bandwidth_ratio_less_overheads(catalog: Catalog, batch: int) -> None:
    ratio = float(
        _model(catalog, "H200-SXM").decode_rate(batch, 1500, 0)[0]
        / _model(catalog, "H100-SXM").decode_rate(batch, 1500, 0)[0]
    )
    assert 1.2 < ratio < BANDWIDTH_RATIO
    # Without the fixed costs (launches, all-reduce) only bandwidth differs: the ratio is 1.43.
    bare = Efficiency(
        launch_s_per_layer=0.0, allreduce_latency_s=0.0, allreduce_latency_s_per_rank=0.0, link=1e9
    )
    pure = _model(catalog, "H200-SXM", eff=bare).decode_rate(batch, 1500, 0) / _model(
        catalog, "H100-SXM", eff=bare
    ).decode_rate(batch, 1500, 0)
    assert float(pure[0]) == pytest.approx(BANDWIDTH_RATIO, rel=0.01)


@pytest.mark.parametrize("prompt", [256, 2048, 8192])
def test_prefill_is_equal_within_a_few_percent(catalog: Catalog, prompt: int) -> None:
    keys = (prompt + 1) / 2
    h100 = _model(catalog, "H100-SXM").prefill_rate(keys)
    h200 = _model(catalog, "H200-SXM").prefill_rate(keys)
    assert float(h200[0] / h100[0]) == pytest.approx(1.0, abs=0.03)


def test_h200_advantage_grows_where_h100_memory_caps_the_batch(catalog: Catalog) -> None:
    # Llama 3.1 70B FP8 on one GPU: the weights nearly fill an H100, leaving little KV cache.
    h100, h200 = _model(catalog, "H100-SXM", tp=1), _model(catalog, "H200-SXM", tp=1)
    lim100, lim200 = h100.batch_limits(1500, 0), h200.batch_limits(1500, 0)
    assert bool(lim100.kv_bound[0]) and lim100.batch[0] < 40
    ratio = h200.decode_rate(lim200.batch, 1500, 0)[0] / h100.decode_rate(lim100.batch, 1500, 0)[0]
    assert ratio > BANDWIDTH_RATIO * 1.5


def test_tpot_target_bounds_the_batch(catalog: Catalog) -> None:
    m = _model(catalog, "H200-SXM")
    tight, loose = m.batch_limits(1500, 0, 0, 0.03), m.batch_limits(1500, 0, 0, 0.08)
    assert tight.batch[0] < loose.batch[0]
    assert m.breakdown(tight.batch, 0, 1500, 0).seconds[0] == pytest.approx(0.03, rel=0.02)


def test_batch_for_rate_inverts_the_decode_rate(catalog: Catalog) -> None:
    m = _model(catalog, "H100-SXM")
    batch = np.array([1.0, 10.0, 100.0, 250.0])
    rate = m.decode_rate(batch, 1800.0, 0.0)
    assert np.allclose(m.batch_for_rate(rate, 1800.0, 0.0), batch, rtol=1e-6)
    moe = _model(catalog, "H100-SXM", model="mixtral-8x7b")
    rate = moe.decode_rate(batch, 1800.0, 0.0)
    assert np.allclose(moe.batch_for_rate(rate, 1800.0, 0.0), batch, rtol=0.02)


def test_lindley_matches_the_recursion() -> None:
    rng = np.random.default_rng(5)
    arrivals, capacity = rng.gamma(2.0, 50.0, 500), rng.gamma(2.0, 52.0, 500)
    queue, expect_q, expect_s = 30.0, [], []
    for a, c in zip(arrivals, capacity, strict=True):
        nxt = max(0.0, queue + a - c)
        expect_s.append(queue + a - nxt)
        expect_q.append(nxt)
        queue = nxt
    served, q = lindley(arrivals, capacity, np.array([30.0]))
    assert np.allclose(q, expect_q) and np.allclose(served, expect_s)
