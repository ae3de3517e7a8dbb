"""benchmarks/perf_model_vs_measured.py: the error arithmetic on hand-made rows, and its core on a few real
rows of one table (Llama 3.1 8B on TensorRT-LLM). The full run over every table is the script itself."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analyzer.model.deployment import make_deployment
from analyzer.model.efficiency import CALIBRATED, DEFAULT_LIMITS
from analyzer.model.perf_model import Workload, predict, time_to_first_token_s
from benchmarks.perf_model_vs_measured import (
    H100,
    H200,
    MeasuredRow,
    RowResult,
    evaluate,
    load_tables,
    main,
    markdown_table,
    parse_table,
    ratio_pairs,
    relative_error,
    summarise,
)
from fleet.catalog import load_catalog

CATALOG = load_catalog()

TABLE = """# backend: trtllm
# catalog_model: llama-3.1-8b
# quantization: gemm fp8, kv bfloat16, fmha bfloat16 (AIC default)
# skipped: first
# skipped: second
sku,tp,ep,phase,batch,tokens,step_s,mem_gib
H100-SXM,1,1,decode,4,2048,0.005,12.5
H200-SXM,1,1,prefill,2,1024,0.03,12.0
"""


def row(sku: str, step_s: float, *, model: str = "llama-3.1-8b", tp: int = 1, ep: int = 1) -> MeasuredRow:
    return MeasuredRow("trtllm", model, "fp8", sku, tp, ep, "decode", 8, 2048, step_s, "hand-made")


def test_the_absolute_error_is_predicted_over_measured_minus_one() -> None:
    assert relative_error(2.0, 1.0) == pytest.approx(1.0)
    assert relative_error(0.5, 1.0) == pytest.approx(0.5)
    assert relative_error(1.0, 1.0) == 0.0
    with pytest.raises(ValueError):
        relative_error(1.0, 0.0)


def test_the_ratio_error_compares_the_predicted_and_measured_h200_h100_ratios() -> None:
    # H100: predicted 2x measured (error 1.0); H200: predicted 3x measured (error 2.0).
    slow = RowResult(row(H100, 1.0), 2.0, "TP 1-2 dense", False)
    fast = RowResult(row(H200, 0.5), 1.5, "TP 1-2 dense", False)
    lone = RowResult(row(H100, 1.0, tp=2), 1.0, "TP 1-2 dense", False)  # no H200 twin: no pair
    assert (slow.error, fast.error) == (pytest.approx(1.0), pytest.approx(2.0))
    pairs = ratio_pairs([slow, fast, lone])
    assert len(pairs) == 1
    pair = pairs[0]
    assert pair.measured == pytest.approx(0.5)  # 0.5 / 1.0
    assert pair.predicted == pytest.approx(0.75)  # 1.5 / 2.0
    assert pair.error == pytest.approx(0.5)  # 0.75 / 0.5 - 1
    summary = {(s.regime, s.phase): s for s in summarise([slow, fast, lone], pairs)}
    dense = summary[("TP 1-2 dense", "decode")]
    assert dense.absolute.count == 3
    assert dense.absolute.median == pytest.approx(1.0)  # errors 1.0, 2.0, 0.0
    assert dense.bias == pytest.approx(2.0)  # predicted / measured 2, 3, 1
    assert (dense.ratio.count, dense.ratio.median) == (1, pytest.approx(0.5))
    assert summary[("MoE", "all")].absolute.count == 0
    assert summary[("all", "all")].absolute.count == 3
    table = markdown_table(list(summary.values()))
    assert "| TP 1-2 dense | decode | 3 | 100.0% |" in table
    assert "| MoE |" not in table  # empty slices are left out


def test_a_table_file_is_parsed_with_its_kv_precision_and_lines() -> None:
    table = parse_table(TABLE, "trtllm/llama-3.1-8b.csv")
    assert table.meta["skipped"] == "first"
    assert [(r.sku, r.phase, r.batch, r.tokens, r.step_s) for r in table.rows] == [
        ("H100-SXM", "decode", 4, 2048, 0.005),
        ("H200-SXM", "prefill", 2, 1024, 0.03),
    ]
    assert {r.kv_precision for r in table.rows} == {"bf16"}
    assert table.rows[1].source == "trtllm/llama-3.1-8b.csv:8"
    with pytest.raises(ValueError, match="line 7"):
        parse_table(TABLE.replace("0.005", "fast"), "t.csv")
    with pytest.raises(ValueError, match="header"):
        parse_table(TABLE.replace("step_s", "seconds"), "t.csv")


def test_rows_the_model_cannot_express_are_skipped_with_the_reason() -> None:
    rows = [row(H100, 0.01, tp=2, ep=2), row(H100, 0.01, model="no-such-model"), row(H100, 0.01)]
    out = evaluate(rows, CATALOG)
    assert len(out.results) == 1
    reasons = " ".join(out.skipped)
    assert "dense model" in reasons and "unknown model 'no-such-model'" in reasons
    assert sum(out.skipped.values()) == 2


@pytest.fixture(scope="module")
def few_rows() -> list[MeasuredRow]:
    (table,) = load_tables(backends=["trtllm"], models=["llama-3.1-8b"])
    assert table.meta["quantization"].startswith("gemm fp8, kv fp8")
    return [
        r
        for r in table.rows
        if r.tp == 1 and r.batch in (1, 8) and r.tokens in (1024, 2048) and r.sku in (H100, H200)
    ]


def test_real_rows_are_predicted_as_the_model_predicts_them(few_rows: list[MeasuredRow]) -> None:
    assert len(few_rows) == 16  # 2 SKUs x 2 phases x 2 batches x 2 lengths
    out = evaluate(few_rows, CATALOG)
    assert not out.skipped
    assert len(out.results) == 16
    deployments = {
        sku: make_deployment(CATALOG, model="llama-3.1-8b", gpu=sku, precision="fp8", tp=1)
        for sku in (H100, H200)
    }
    for r in out.results:
        assert r.regime == "TP 1-2 dense" and not r.over_kv_budget
        d = deployments[r.row.sku]
        if r.row.phase == "decode":
            # The decode step is what predict() reports as the time per output token at that batch.
            p = predict(d, Workload(r.row.tokens, 2, concurrency=r.row.batch), with_range=False)
            assert p.batch == r.row.batch
            assert r.predicted_s == pytest.approx(p.tpot_s, rel=1e-12)
        elif r.row.batch == 1:
            # One prompt shorter than a prefill chunk: the model's time to first token.
            ttft = time_to_first_token_s(d, r.row.tokens, CALIBRATED, DEFAULT_LIMITS)
            assert r.predicted_s == pytest.approx(ttft, rel=1e-12)
        # TP 1 on one GPU is where the model is built to be close: within 2x of every measured row.
        assert 0.0 <= r.error < 1.0
    pairs = ratio_pairs(out.results)
    assert len(pairs) == 8
    for pair in pairs:
        assert math.isfinite(pair.error) and pair.measured < 1.0  # H200 never slower here, measured
        assert pair.error < 0.5


def test_the_script_writes_its_figures_as_json(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    assert (
        main(["--backend", "trtllm", "--model", "llama-3.1-8b", "--by-backend", "--json", str(target)]) == 0
    )
    payload = json.loads(target.read_text())
    assert payload["tables"] == ["trtllm/llama-3.1-8b.csv"]
    every = next(s for s in payload["summary"] if s["regime"] == "all" and s["phase"] == "all")
    assert every["absolute"]["count"] == len(payload["rows"]) > 600
    assert every["h200_h100_ratio"]["count"] == len(payload["ratios"]) > 300
    assert {s["backend"] for s in payload["by_backend"]} == {"trtllm"}
    assert main(["--model", "no-such-model"]) == 1
