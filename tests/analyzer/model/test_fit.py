"""Calibration on the published measurements: parsing, pairing, the error goals (computed here from the
stored parameters), the fit's machinery (recovers known parameters, resists outliers) and the stored
constants' provenance."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from analyzer.model import uncertainty
from analyzer.model.efficiency import (
    CALIBRATED,
    CALIBRATION_ACCURACY,
    CALIBRATION_PROVENANCE,
    PRIOR,
    EfficiencyParams,
)
from analyzer.model.fit import (
    PRIOR_WEIGHT,
    HeldOutReport,
    UsableRow,
    cross_validate,
    evaluate,
    fit,
    pair_regime,
    predict_row,
    prepare_rows,
    prior_residuals,
    ratio_pairs,
    row_engine,
    row_layout,
    row_regime,
)
from analyzer.model.published import (
    PublishedFormatError,
    PublishedRow,
    RowKind,
    load_published,
    match_gpu_label,
    parse_published,
)
from fleet.catalog import Catalog, load_catalog

PUBLISHED = Path(__file__).resolve().parents[3] / "data" / "benchmarks" / "published.csv"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def published() -> list[PublishedRow]:
    return load_published(PUBLISHED)


@pytest.fixture(scope="module")
def usable(published: list[PublishedRow], catalog: Catalog) -> list[UsableRow]:
    return prepare_rows(published, catalog)[0]


def test_parses_every_row_with_its_kind(published: list[PublishedRow]) -> None:
    text = PUBLISHED.read_text(encoding="utf-8")
    assert len(published) == len(text.strip().splitlines()) - 1
    first = published[0]
    assert (first.line, first.model, first.tp, first.input_len, first.batch) == (
        2,
        "Llama-3.1-70B",
        1,
        1000,
        None,
    )
    kinds = {r.kind for r in published}
    assert kinds == set(RowKind)
    ttft = next(r for r in published if r.metric == "ttft_ms")
    assert ttft.output_len == 1 and ttft.batch == 1
    assert {r.release for r in published if "v0.14" in r.source} == {"NVIDIA/TensorRT-LLM@0.14.0"}


def test_malformed_csv_names_the_problem() -> None:
    with pytest.raises(PublishedFormatError, match="missing column"):
        parse_published("source,model\nx,y\n")
    header = (
        "source,model,precision,gpu,num_gpus,tp,input_len,output_len,"
        "batch_or_concurrency,metric,value,notes\n"
    )
    with pytest.raises(PublishedFormatError, match="line 2: value 'fast'"):
        parse_published(header + "s,m,FP8,H100 SXM 80GB,1,1,10,10,max,output_tokens_per_s,fast,\n")
    with pytest.raises(PublishedFormatError, match="line 2: tp 'x'"):
        parse_published(header + "s,m,FP8,H100 SXM 80GB,1,x,10,10,max,output_tokens_per_s,1,\n")


def test_benchmark_gpu_labels_map_to_skus(catalog: Catalog) -> None:
    labels = {
        "H200 SXM 141GB": "H200-SXM",
        "H100 SXM 80GB": "H100-SXM",
        "H100 SXM 80GB (page says 'H100 80G')": "H100-SXM",
        "A100-SXM4-80GB": "A100-SXM-80GB",
        "L40S": "L40S",
    }
    for label, key in labels.items():
        sku = match_gpu_label(catalog, label)
        assert sku is not None and sku.key == key, label
    assert match_gpu_label(catalog, "Z9000 1TB") is None


def test_rows_the_catalog_cannot_describe_are_skipped_with_a_reason(
    published: list[PublishedRow], catalog: Catalog
) -> None:
    usable, skipped = prepare_rows(published, catalog)
    assert len(usable) + len(skipped) == len(published)
    assert all("unknown model" in s.reason or "not in the catalog" in s.reason for s in skipped)
    trtllm_hopper = [r for r in published if "v0.14" in r.source and r.gpu.startswith(("H100", "H200"))]
    assert {id(r) for r in trtllm_hopper} <= {id(u.row) for u in usable}


def test_ratio_pairs_differ_only_in_the_gpu(usable: list[UsableRow]) -> None:
    pairs = ratio_pairs(usable)
    h200_h100 = [
        p
        for p in pairs
        if (p.numerator.deployment.gpu.key, p.denominator.deployment.gpu.key) == ("H200-SXM", "H100-SXM")
    ]
    assert len(h200_h100) >= 20
    for p in pairs:
        a, b = p.numerator.row, p.denominator.row
        assert (a.release, a.precision, a.input_len, a.output_len, a.batch, a.metric) == (
            b.release, b.precision, b.input_len, b.output_len, b.batch, b.metric,
        )  # fmt: skip
        assert p.numerator.deployment.hbm_bandwidth >= p.denominator.deployment.hbm_bandwidth


def test_stored_parameters_meet_the_error_goals(usable: list[UsableRow]) -> None:
    report = evaluate(usable, CALIBRATED)
    ratio = report.ratio_for("H200-SXM", "H100-SXM")
    assert ratio.count >= 20
    assert ratio.median < 0.05
    # In-sample, over 27 pairs (the p90 is the third-worst pair). The goal is held out: median < 5% and
    # p90 < 15% (benchmarks/perf_model_accuracy.py). With the activation traffic in the model the in-sample
    # p90 is 10.2% (9.9% without it), while the measured-kernel ratio p90 fell from 11.8% to 9.7%.
    assert ratio.p90 < 0.11
    assert report.absolute_all.median < 0.20
    assert report.absolute_throughput.median < 0.20
    capacity_pair = next(
        r for r in report.ratios if "1000/1000" in r.label and "TP1" in r.label and r.gpus[1] == "H100-SXM"
    )
    assert capacity_pair.measured > 5 and capacity_pair.predicted > 4


def test_stored_constants_come_from_this_data_and_this_model(usable: list[UsableRow]) -> None:
    """If this fails, the data, the catalog or the model changed: rerun
    `.venv/bin/python benchmarks/perf_model_accuracy.py --write` and review the figures."""
    digest = hashlib.sha256(PUBLISHED.read_bytes()).hexdigest()
    assert digest in CALIBRATION_PROVENANCE["data"].replace(" ", "")
    assert CALIBRATION_PROVENANCE["rows_used"] == str(len(usable))
    refit = fit(usable).params
    for name in EfficiencyParams.field_names():
        assert getattr(refit, name) == pytest.approx(getattr(CALIBRATED, name), rel=0.02), name


def _synthetic(usable: list[UsableRow], truth: EfficiencyParams) -> list[UsableRow]:
    out = []
    for u in usable:
        value = predict_row(u, truth)
        if value == value and value > 0:  # NaN: does not fit under the truth
            out.append(UsableRow(replace(u.row, value=value), u.deployment))
    return out


def test_fit_recovers_parameters_that_generated_the_data(usable: list[UsableRow]) -> None:
    truth = EfficiencyParams(
        compute_efficiency=0.62,
        bandwidth_efficiency=0.7,
        step_overhead_s=2e-3,
        allreduce_peer_latency_s=8e-6,
        allreduce_bandwidth_efficiency=0.45,
        runtime_reserve_bytes=4e9,
    )
    # The rows alone (no prior): the machinery finds what generated them.
    result = fit(_synthetic(usable, truth), start=PRIOR, prior_weight=0.0)
    for name in (
        "compute_efficiency",
        "bandwidth_efficiency",
        "allreduce_bandwidth_efficiency",
        "runtime_reserve_bytes",
    ):
        assert getattr(result.params, name) == pytest.approx(getattr(truth, name), rel=0.05), name
    assert evaluate(_synthetic(usable, truth), result.params).absolute_all.p90 < 0.01


def test_robust_loss_resists_an_outlier_that_plain_least_squares_follows(usable: list[UsableRow]) -> None:
    clean = _synthetic(usable, CALIBRATED)
    spoiled = [
        UsableRow(replace(u.row, value=u.row.value * 3.0), u.deployment) if i % 17 == 0 else u
        for i, u in enumerate(clean)
    ]
    robust = evaluate(clean, fit(spoiled, loss="soft_l1", start=CALIBRATED).params)
    plain = evaluate(clean, fit(spoiled, loss="linear", start=CALIBRATED).params)
    assert robust.absolute_all.median < plain.absolute_all.median
    assert robust.absolute_all.median < 0.03


def test_the_prior_holds_a_parameter_the_rows_do_not_determine(usable: list[UsableRow]) -> None:
    """Only TP1 rows (no all-reduce at all): nothing pins the all-reduce constants, so without a prior the
    fit leaves them wherever the search wandered; with it they stay at the documented prior."""
    tp1 = [u for u in usable if u.row.tp == 1]
    assert all(r == 0.0 for r in prior_residuals(PRIOR))
    held = fit(tp1).params
    assert held.allreduce_peer_latency_s == pytest.approx(PRIOR.allreduce_peer_latency_s, rel=0.05)
    assert held.allreduce_bandwidth_efficiency == pytest.approx(
        PRIOR.allreduce_bandwidth_efficiency, rel=0.05
    )
    # Where the rows do determine a parameter, the prior barely moves it.
    free = fit(usable, prior_weight=0.0).params
    assert fit(usable).params.compute_efficiency == pytest.approx(free.compute_efficiency, rel=0.05)
    assert PRIOR_WEIGHT > 0


def test_rows_say_their_layout_and_engine_rule(published: list[PublishedRow], catalog: Catalog) -> None:
    row = published[0]
    assert row_layout(row) == (1, False)
    assert row_engine(row, catalog) == (None, None)  # TensorRT-LLM: the trtllm-bench rule
    moe_row = replace(row, tp_text="8 (EP 8)", notes="trtllm-bench; enable_attention_dp: true")
    assert row_layout(moe_row) == (8, True)
    vllm_row = replace(row, source="vLLM v0.9.0 benchmarks", notes="--gpu-memory-utilization 0.95")
    settings, fraction = row_engine(vllm_row, catalog)
    assert settings is catalog.engines.resolve("vllm") and fraction == 0.95
    trt_row = replace(row, notes="--kv_cache_free_gpu_mem_fraction 0.90")
    assert row_engine(trt_row, catalog) == (None, 0.9)
    # A layout the model cannot hold is skipped with the reason, never guessed.
    dense_ep = replace(row, tp_text="1 (EP 2)")
    _, skipped = prepare_rows([dense_ep], catalog)
    assert skipped and "ep must divide" in skipped[0].reason


def test_regimes_of_rows_and_pairs(usable: list[UsableRow]) -> None:
    regimes = {u.row.line: row_regime(u) for u in usable}
    assert set(regimes.values()) <= set(uncertainty.REGIMES)
    starved = next(
        u for u in usable if u.row.tp == 1 and u.row.gpu.startswith("H100") and "70B" in u.row.model
    )
    assert regimes[starved.row.line] == "kv-starved"
    mixtral = next(u for u in usable if u.deployment.model.key == "mixtral-8x7b")
    assert regimes[mixtral.row.line] == "moe"
    assert pair_regime("compute-bound", "kv-starved") == "kv-starved"
    assert pair_regime("compute-bound", "bandwidth-bound") == "bandwidth-bound"
    assert pair_regime("moe", "kv-starved") == "moe"
    assert pair_regime("compute-bound", "compute-bound") == "compute-bound"


@pytest.fixture(scope="module")
def held_out(usable: list[UsableRow]) -> HeldOutReport:
    return cross_validate(usable)


def test_every_scheme_holds_out_whole_groups(usable: list[UsableRow], held_out: HeldOutReport) -> None:
    schemes = {e.scheme for e in held_out.errors}
    assert schemes == {"model", "release", "isl/osl"}
    releases = {u.row.release for u in usable}
    assert len(releases) >= 3  # TensorRT-LLM v0.14, v0.9 and NIM: each can be held out
    assert {e.group for e in held_out.errors if e.scheme == "release"} == releases
    assert not held_out.skipped
    # Every usable row is predicted once per scheme, by a fit that never saw its group.
    for scheme in schemes:
        assert sum(1 for e in held_out.errors if e.scheme == scheme and e.kind == "absolute") == len(usable)
    inflight = (RowKind.MAX_THROUGHPUT, RowKind.FIXED_CONCURRENCY)
    pairs = [
        p
        for p in ratio_pairs(usable)
        if (p.numerator.deployment.gpu.key, p.denominator.deployment.gpu.key) == ("H200-SXM", "H100-SXM")
        and p.numerator.row.kind in inflight
    ]
    assert held_out.summary("ratio").count == 3 * len(pairs)


def test_stored_bands_are_this_cross_validation(held_out: HeldOutReport) -> None:
    """If this fails, rerun `.venv/bin/python benchmarks/perf_model_accuracy.py --write`."""
    tables: tuple[tuple[dict[str, uncertainty.RegimeError], Literal["absolute", "ratio"]], ...] = (
        (uncertainty.HELDOUT_ABSOLUTE, "absolute"),
        (uncertainty.HELDOUT_RATIO, "ratio"),
    )
    for table, kind in tables:
        for regime in (*uncertainty.REGIMES, None):
            fresh = held_out.summary(kind, regime=regime)
            stored = table["all" if regime is None else regime]
            assert stored.count == fresh.count, (kind, regime)
            assert stored.median == pytest.approx(fresh.median, abs=2e-4), (kind, regime)
            assert stored.p90 == pytest.approx(fresh.p90, abs=2e-4), (kind, regime)
    assert CALIBRATION_ACCURACY.heldout_ratio_p90 == pytest.approx(held_out.summary("ratio").p90, abs=2e-4)


def test_bands_are_never_narrower_than_the_evidence_allows() -> None:
    assert uncertainty.band("moe") >= uncertainty.band("compute-bound") or (
        uncertainty.HELDOUT_ABSOLUTE["moe"].count >= uncertainty.MIN_COUNT
    )
    thin = [r for r in uncertainty.REGIMES if uncertainty.HELDOUT_ABSOLUTE[r].count < uncertainty.MIN_COUNT]
    widest = max(
        [uncertainty.HELDOUT_ABSOLUTE["all"].p90]
        + [
            e.p90
            for r, e in uncertainty.HELDOUT_ABSOLUTE.items()
            if r != "all" and e.count >= uncertainty.MIN_COUNT
        ]
    )
    for regime in thin:
        assert uncertainty.band(regime) == pytest.approx(widest)
    with pytest.raises(ValueError, match="kind"):
        uncertainty.band("moe", "relative")
