"""The performance model reproduces the physics: the H200/H100 pattern by regime, the KV-capacity limit,
the roofline lower bounds, and clear errors. Expected values are computed from the catalog in the test,
never copied from the model's output."""

from __future__ import annotations

import math

import pytest

from analyzer.model import uncertainty
from analyzer.model.deployment import Deployment, DeploymentError, default_kv_precision, make_deployment
from analyzer.model.efficiency import CALIBRATED, DEFAULT_LIMITS, EfficiencyParams
from analyzer.model.kv_budget import BudgetSource, measured_budget
from analyzer.model.perf_model import Mode, Workload, predict, regime_of
from analyzer.model.roofline import kv_capacity_sequences, kv_replication, step_time
from fleet.catalog import Catalog, load_catalog
from fleet.contract import Bottleneck
from fleet.models import decode_weight_bytes_read, kv_bytes_for_context, weight_bytes
from fleet.precision import Precision


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def instance(
    catalog: Catalog, gpu: str, tp: int, model: str = "llama-3.1-70b", precision: str = "fp8"
) -> Deployment:
    return make_deployment(catalog, model=model, gpu=gpu, precision=precision, tp=tp)


def ratio(catalog: Catalog, tp: int, isl: int, osl: int, model: str = "llama-3.1-70b") -> float:
    w = Workload(isl, osl)
    h200 = predict(instance(catalog, "H200-SXM", tp, model), w)
    h100 = predict(instance(catalog, "H100-SXM", tp, model), w)
    return h200.output_tokens_per_s / h100.output_tokens_per_s


@pytest.mark.parametrize(
    ("tp", "isl", "osl"), [(2, 2048, 128), (8, 2048, 128), (8, 128, 128), (1, 2048, 128)]
)
def test_prefill_heavy_lengths_run_at_parity(catalog: Catalog, tp: int, isl: int, osl: int) -> None:
    model = "llama-3.1-8b" if tp == 1 else "llama-3.1-70b"
    assert 0.95 <= ratio(catalog, tp, isl, osl, model) <= 1.10


@pytest.mark.parametrize(
    ("tp", "isl", "osl"), [(2, 128, 2048), (8, 128, 2048), (2, 2048, 2048), (8, 20000, 2000)]
)
def test_decode_heavy_and_long_context_gain_what_bandwidth_and_capacity_give(
    catalog: Catalog, tp: int, isl: int, osl: int
) -> None:
    assert 1.15 <= ratio(catalog, tp, isl, osl) <= 1.60


def test_capacity_starved_h100_is_many_times_slower(catalog: Catalog) -> None:
    w = Workload(1000, 1000)
    h100 = predict(instance(catalog, "H100-SXM", 1), w)
    h200 = predict(instance(catalog, "H200-SXM", 1), w)
    assert h200.output_tokens_per_s / h100.output_tokens_per_s > 3.0
    assert h100.bottleneck is Bottleneck.CAPACITY
    assert h100.max_batch < 32 < h200.max_batch


def test_prefill_throughput_follows_compute_not_memory(catalog: Catalog) -> None:
    w = Workload(4096, 256)
    h100 = predict(instance(catalog, "H100-SXM", 2), w)
    h200 = predict(instance(catalog, "H200-SXM", 2), w)
    assert h200.prefill_tokens_per_s == pytest.approx(h100.prefill_tokens_per_s, rel=0.03)
    assert h100.prefill_bottleneck is Bottleneck.COMPUTE
    assert h200.decode_tokens_per_s > 1.2 * h100.decode_tokens_per_s


def test_same_batch_hides_most_of_the_bandwidth_advantage(catalog: Catalog) -> None:
    """Equal fixed concurrency: the H200 gains less than its 1.43x bandwidth (TRT-LLM issue #1570)."""
    w = Workload(128, 2048, concurrency=120)
    h100 = predict(instance(catalog, "H100-SXM", 1, "llama-3.1-8b"), w)
    h200 = predict(instance(catalog, "H200-SXM", 1, "llama-3.1-8b"), w)
    gain = h200.output_tokens_per_s / h100.output_tokens_per_s
    bandwidth_ratio = 4.8 / 3.35
    assert 1.0 < gain < bandwidth_ratio
    assert h100.batch == h200.batch == 120
    assert h100.workload.mode is Mode.FIXED_CONCURRENCY


def test_max_batch_is_the_kv_capacity_formula(catalog: Catalog) -> None:
    d = instance(catalog, "H100-SXM", 2)
    seq = 2048 + 2048
    hbm = d.gpu.hbm_bytes
    assert hbm is not None
    free = hbm * 2 - weight_bytes(d.model, Precision.FP8) - CALIBRATED.runtime_reserve_bytes * 2
    expected = free * DEFAULT_LIMITS.kv_memory_fraction / kv_bytes_for_context(d.model, seq, Precision.FP8)
    assert predict(d, Workload(2048, 2048)).max_batch == pytest.approx(expected, rel=1e-9)
    assert kv_capacity_sequences(d, CALIBRATED, DEFAULT_LIMITS, seq) == pytest.approx(expected, rel=1e-9)


def test_batch_one_decode_respects_the_weight_read_bound(catalog: Catalog) -> None:
    d = instance(catalog, "H100-SXM", 2)
    p = predict(d, Workload(500, 2000, concurrency=1))
    bound = decode_weight_bytes_read(d.model, Precision.FP8, 1) / (2 * d.hbm_bandwidth)
    assert p.batch == 1
    assert bound < p.tpot_s < 3 * bound
    assert p.decode_bottleneck is Bottleneck.MEMORY_BANDWIDTH


def test_more_gpus_more_tokens_and_longer_context_fewer(catalog: Catalog) -> None:
    w = Workload(2048, 2048)
    rates = [predict(instance(catalog, "H200-SXM", tp), w).output_tokens_per_s for tp in (1, 2, 4, 8)]
    assert rates == sorted(rates)
    short = predict(instance(catalog, "H200-SXM", 2), Workload(1000, 1000)).decode_tokens_per_s
    long = predict(instance(catalog, "H200-SXM", 2), Workload(20000, 2000)).decode_tokens_per_s
    assert long < short


def test_model_that_does_not_fit_reports_it(catalog: Catalog) -> None:
    p = predict(instance(catalog, "H100-SXM", 1, "llama-3.1-405b", "bf16"), Workload(1000, 1000))
    assert not p.fits
    assert p.output_tokens_per_s == p.decode_tokens_per_s == p.prefill_tokens_per_s == 0.0
    assert p.bottleneck is Bottleneck.CAPACITY
    assert "no room" in p.notes[0]


def test_mla_latent_is_replicated_on_every_tp_rank(catalog: Catalog) -> None:
    deepseek = instance(catalog, "H200-SXM", 8, "deepseek-v3")
    llama = instance(catalog, "H200-SXM", 8)
    assert kv_replication(deepseek) == 8
    assert kv_replication(llama) == 1  # 8 KV heads over 8 GPUs: no copy
    assert kv_replication(instance(catalog, "H200-SXM", 16)) == 2


def test_pcie_only_gpus_get_a_note_and_slower_all_reduces(catalog: Catalog) -> None:
    l40s = instance(catalog, "L40S", 2, "llama-3.1-8b")
    p = predict(l40s, Workload(1000, 1000))
    assert any("PCIe" in note for note in p.notes)
    step = step_time(l40s, CALIBRATED, decode_seqs=64, context_len=1500)
    nvlink = step_time(
        instance(catalog, "H100-SXM", 2, "llama-3.1-8b"), CALIBRATED, decode_seqs=64, context_len=1500
    )
    assert step.comm_s > nvlink.comm_s


def test_step_time_labels_its_bottleneck(catalog: Catalog) -> None:
    big = instance(catalog, "H200-SXM", 1)
    assert (
        step_time(big, CALIBRATED, decode_seqs=1, context_len=1000).bottleneck()
        is Bottleneck.MEMORY_BANDWIDTH
    )
    d = instance(catalog, "H100-SXM", 1, "llama-3.1-8b")
    prefill = step_time(
        d, CALIBRATED, decode_seqs=0, context_len=0, prefill_tokens=8192, prefill_flops=8192 * 16e9
    )
    assert prefill.bottleneck() is Bottleneck.COMPUTE
    launch_bound = EfficiencyParams(**{**CALIBRATED.as_dict(), "step_overhead_s": 0.05})
    assert step_time(d, launch_bound, decode_seqs=1, context_len=10).bottleneck() is Bottleneck.UNDERUTILISED


def test_names_resolve_through_the_catalog(catalog: Catalog) -> None:
    d = make_deployment(
        catalog, model="meta-llama/Llama-3.3-70B-Instruct", gpu="NVIDIA H200", precision="FP8", tp=2
    )
    assert (d.model.key, d.gpu.key, d.precision, d.kv_precision) == (
        "llama-3.1-70b",
        "H200-SXM",
        "fp8",
        "fp8",
    )
    assert default_kv_precision(Precision.INT4) is Precision.BF16
    assert (
        make_deployment(catalog, model="llama-3.1-8b", gpu="H100 SXM", precision="bf16", tp=1).gpu.key
        == "H100-SXM"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "no-such-model"}, "unknown model 'no-such-model'; known models: deepseek-v3"),
        ({"gpu": "NVIDIA Z9000"}, "unknown GPU 'NVIDIA Z9000'; known SKUs: A100-SXM-40GB, A100-SXM-80GB"),
        ({"gpu": "H100-NVL"}, "lacks catalog figure(s) dense fp8 FLOP/s"),
        ({"precision": "fp4"}, "lacks catalog figure(s) dense fp4 FLOP/s"),
        ({"precision": "fp7"}, "unknown precision 'fp7'"),
        ({"kv_precision": "int4"}, "KV cache is not supported"),
        ({"tp": 0}, "tp must be >= 1"),
    ],
)
def test_clear_errors(catalog: Catalog, kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "model": "llama-3.1-70b",
        "gpu": "H100-SXM",
        "precision": "fp8",
        "tp": 1,
        **kwargs,
    }
    with pytest.raises(DeploymentError) as error:
        make_deployment(catalog, **args)  # type: ignore[arg-type]
    assert message in str(error.value)


def test_workload_validation() -> None:
    for bad in ((0, 10, None), (10, 0, None), (10, 10, 0)):
        with pytest.raises(ValueError, match=">= 1"):
            Workload(*bad)


def test_prediction_is_finite_for_every_catalogued_model_on_h200(catalog: Catalog) -> None:
    for key in catalog.models.models:
        d = instance(catalog, "H200-SXM", 8, key)
        p = predict(d, Workload(1000, 500))
        assert p.fits, key
        assert all(
            math.isfinite(v) and v > 0 for v in (p.output_tokens_per_s, p.decode_tokens_per_s, p.ttft_s)
        )
        assert p.prefill_tokens_per_s > p.decode_tokens_per_s * 0.5, key


def test_a_stated_budget_replaces_the_modelled_one(catalog: Catalog) -> None:
    d = instance(catalog, "H100-SXM", 1)
    given = measured_budget(d, 30_000, BudgetSource.GIVEN, "as stated")
    p = predict(d, Workload(1000, 1000), budget=given)
    assert p.max_batch == pytest.approx(30_000 / 2000)
    assert p.kv_budget is given
    modelled = predict(d, Workload(1000, 1000))
    assert modelled.kv_budget is not None and modelled.kv_budget.source is BudgetSource.MODELLED
    assert "trtllm-bench" in modelled.kv_budget.detail
    # Under vLLM's rule 0.9 of the device must hold weights and reserve: 70B FP8 does not fit one H100.
    vllm = catalog.engines.resolve("vllm")
    assert vllm is not None
    assert not predict(d, Workload(1000, 1000), settings=vllm).fits


def test_the_band_widens_where_the_model_is_weakest(catalog: Catalog) -> None:
    w = Workload(1000, 1000)
    starved = predict(instance(catalog, "H100-SXM", 1), w)  # weights nearly fill the GPU
    # TP 2: at TP 4-8 the measured-kernel validation widens the band far more (test_validation.py).
    roomy = predict(instance(catalog, "H200-SXM", 2), w)
    assert starved.regime == "kv-starved"
    assert roomy.regime in ("compute-bound", "bandwidth-bound")
    for p in (starved, roomy):
        low, high = p.ranges["output"]
        assert low < p.output_tokens_per_s < high
        assert p.uncertainty_parts["model"] == pytest.approx(uncertainty.band(p.regime))
    assert starved.uncertainty > 2 * roomy.uncertainty
    assert starved.uncertainty_parts["kv_budget"] > 0.5
    assert roomy.uncertainty_parts["kv_budget"] < 0.2
    # A measured budget leaves only the model's own band.
    measured = predict(
        instance(catalog, "H100-SXM", 1), w, budget=measured_budget(instance(catalog, "H100-SXM", 1), 25_000)
    )
    assert measured.uncertainty < starved.uncertainty
    assert measured.uncertainty_parts["kv_budget"] < 0.05
    # Without ranges, the central figures are the same.
    bare = predict(instance(catalog, "H100-SXM", 1), w, with_range=False)
    assert bare.output_tokens_per_s == starved.output_tokens_per_s and not bare.ranges


def test_regimes(catalog: Catalog) -> None:
    assert regime_of(instance(catalog, "H100-SXM", 1, model="mixtral-8x7b"), Bottleneck.COMPUTE) == "moe"
    d = instance(catalog, "H100-SXM", 1)
    assert regime_of(d, Bottleneck.CAPACITY) == "kv-starved"
    assert regime_of(d, Bottleneck.COMPUTE) == "compute-bound"
    assert regime_of(d, Bottleneck.MEMORY_BANDWIDTH) == "bandwidth-bound"
    assert regime_of(d, Bottleneck.UNDERUTILISED) == "bandwidth-bound"
    assert predict(instance(catalog, "H200-SXM", 1, model="llama-3.1-8b"), Workload(2048, 128)).regime == (
        "compute-bound"
    )


def test_a_small_decode_all_reduce_waits_once_per_peer(catalog: Catalog) -> None:
    """At batch 1 the all-reduces are latency: n - 1 peers each, two per layer, not 2(n-1) ring hops."""
    two = step_time(instance(catalog, "H200-SXM", 2), CALIBRATED, decode_seqs=1, context_len=1024)
    eight = step_time(instance(catalog, "H200-SXM", 8), CALIBRATED, decode_seqs=1, context_len=1024)
    latency = CALIBRATED.allreduce_peer_latency_s
    assert two.comm_s == pytest.approx(160 * latency, rel=0.05)
    assert eight.comm_s == pytest.approx(160 * 7 * latency, rel=0.05)


def test_a_prediction_above_tp2_says_what_its_all_reduce_rests_on(catalog: Catalog) -> None:
    w = Workload(isl=1000, osl=1000)
    wide = predict(instance(catalog, "H200-SXM", 8), w)
    narrow = predict(instance(catalog, "H200-SXM", 2), w)
    assert any("per-peer latency" in n and "measured-kernel" in n for n in wide.notes)
    assert not any("per-peer latency" in n for n in narrow.notes)
