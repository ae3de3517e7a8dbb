"""Measured-kernel physics: the table format, interpolation, and a step model that follows the tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleet.catalog import Catalog
from fleet.precision import Precision
from fleetsim.measured import Grid, MeasuredStepModel, load_tables, parse_table
from fleetsim.physics import Efficiency, EngineConfig, StepModel, WorkerHardware

HEADER = "sku,tp,ep,phase,batch,tokens,step_s,mem_gib"
META = (
    "# source: NVIDIA AI Configurator\n# aiconfigurator_version: 0.12.0\n# backend: trtllm\n"
    "# backend_version: 1.0\n# model: LLAMA3.1_70B\n# catalog_model: llama-3.1-70b\n"
)


def _decode_s(sku: str, batch: float, ctx: float) -> float:
    """A made-up measured curve: affine in batch and context, the H200 a third faster per byte."""
    per_byte = 1.0 if sku == "H100-SXM" else 0.7
    return 0.010 + per_byte * (2e-5 * batch + 1e-8 * batch * ctx) + 1e-4 * batch


def _table_text(skus: tuple[str, ...] = ("H100-SXM", "H200-SXM"), tp: int = 2) -> str:
    rows = []
    for sku in skus:
        for batch in (1, 8, 64, 256):
            for ctx in (1024, 4096):
                rows.append(f"{sku},{tp},1,decode,{batch},{ctx},{_decode_s(sku, batch, ctx):.6g},")
        for batch in (1, 4):
            for prompt in (512, 4096):
                rows.append(f"{sku},{tp},1,prefill,{batch},{prompt},{0.005 + 2e-5 * batch * prompt:.6g},")
    return META + HEADER + "\n" + "\n".join(rows) + "\n"


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    (tmp_path / "trtllm").mkdir()
    (tmp_path / "trtllm" / "llama-3.1-70b.csv").write_text(_table_text())
    return tmp_path


def _hw(catalog: Catalog, sku: str, tp: int = 2) -> WorkerHardware:
    return WorkerHardware(
        catalog.gpus.get(sku), catalog.models.get("llama-3.1-70b"), Precision.FP8, Precision.FP8, tp
    )


def test_the_grid_interpolates_linearly_and_fills_holes() -> None:
    grid = Grid.from_points({(1, 100): 1.0, (3, 100): 3.0, (1, 200): 2.0})  # (3, 200) missing
    assert grid.at(2.0, 100.0) == pytest.approx(2.0)
    assert grid.at(3.0, 200.0) == pytest.approx(6.0)  # a hole with one known batch: in proportion
    assert grid.at(5.0, 100.0) == pytest.approx(5.0)  # past the edge: linear


def test_a_bad_row_names_its_line() -> None:
    with pytest.raises(ValueError, match="line 8"):
        parse_table(META + HEADER + "\nH100-SXM,2,1,sideways,1,1,0.1,\n", "t.csv")
    with pytest.raises(ValueError, match="header"):
        parse_table(META + "sku,tp\nH100-SXM,2\n", "t.csv")


def test_no_tables_says_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"measured_physics\.py"):
        load_tables(tmp_path)


def test_step_times_follow_the_table_at_its_points(catalog: Catalog, tables: Path) -> None:
    workers = [_hw(catalog, "H100-SXM"), _hw(catalog, "H200-SXM")]
    model = MeasuredStepModel(workers, EngineConfig(), Efficiency(), load_tables(tables), "vllm")
    assert all(s.startswith("measured: trtllm/llama-3.1-70b.csv") for s in model.sources)
    seconds = model.breakdown(64.0, 0.0, 4096.0, 0.0).seconds
    assert seconds[0] == pytest.approx(_decode_s("H100-SXM", 64, 4096), rel=1e-4)
    assert seconds[1] == pytest.approx(_decode_s("H200-SXM", 64, 4096), rel=1e-4)
    # The formula's model gives other times: the tables, not the formulas, set the step.
    formula = StepModel(workers, EngineConfig(), Efficiency()).breakdown(64.0, 0.0, 4096.0, 0.0).seconds
    assert not np.allclose(seconds, formula, rtol=0.05)
    prefill = model.breakdown(0.0, 4 * 512.0, 0.0, 256.0).seconds  # 4 prompts of 512 tokens
    assert prefill[0] == pytest.approx(0.005 + 2e-5 * 4 * 512, rel=1e-4)


def test_batch_for_rate_inverts_the_measured_decode_rate(catalog: Catalog, tables: Path) -> None:
    workers = [_hw(catalog, "H100-SXM"), _hw(catalog, "H200-SXM")]
    model = MeasuredStepModel(workers, EngineConfig(), Efficiency(), load_tables(tables), "trtllm")
    batch = np.array([[5.0, 5.0], [100.0, 100.0], [300.0, 300.0]])
    rate = model.decode_rate(batch, 2048.0, 0.0)
    assert model.batch_for_rate(rate, 2048.0, 0.0) == pytest.approx(batch, rel=0.03)
    assert np.isinf(model.batch_for_rate(np.array([[1e9, 1e9]]), 2048.0, 0.0)).all()


def test_the_tpot_target_caps_the_batch_on_the_measured_curve(catalog: Catalog, tables: Path) -> None:
    workers = [_hw(catalog, "H100-SXM"), _hw(catalog, "H200-SXM")]
    model = MeasuredStepModel(
        workers, EngineConfig(max_batch=4096), Efficiency(), load_tables(tables), "trtllm"
    )
    limits = model.batch_limits(np.array([[1024.0]]), 0.0, 0.0, tpot_target_s=0.03)
    step = model.breakdown(limits.batch, 0.0, 1024.0, 0.0).seconds
    assert step == pytest.approx(np.full((1, 2), 0.03), rel=0.02)
    assert limits.batch[0, 1] > limits.batch[0, 0]  # the faster H200 fits a larger batch in the target


def test_a_sku_without_rows_keeps_the_formulas_and_says_so(catalog: Catalog, tmp_path: Path) -> None:
    (tmp_path / "trtllm").mkdir()
    (tmp_path / "trtllm" / "llama-3.1-70b.csv").write_text(_table_text(("H100-SXM",)))
    a100 = WorkerHardware(
        catalog.gpus.get("A100-SXM-80GB"),
        catalog.models.get("llama-3.1-70b"),
        Precision.BF16,
        Precision.BF16,
        2,
    )
    h100 = WorkerHardware(
        catalog.gpus.get("H100-SXM"), catalog.models.get("llama-3.1-70b"), Precision.BF16, Precision.BF16, 2
    )
    workers = [h100, a100]
    model = MeasuredStepModel(workers, EngineConfig(), Efficiency(), load_tables(tmp_path), "trtllm")
    assert model.sources[1].startswith("model formulas")
    formula = StepModel(workers, EngineConfig(), Efficiency()).breakdown(8.0, 0.0, 2048.0, 0.0).seconds
    assert model.breakdown(8.0, 0.0, 2048.0, 0.0).seconds[1] == pytest.approx(formula[1])


def test_a_pool_of_another_precision_keeps_the_formulas(catalog: Catalog, tmp_path: Path) -> None:
    (tmp_path / "trtllm").mkdir()
    text = _table_text().replace(
        "# backend: trtllm\n", "# backend: trtllm\n# quantization: gemm fp8, kv fp8\n"
    )
    (tmp_path / "trtllm" / "llama-3.1-70b.csv").write_text(text)
    bf16 = WorkerHardware(
        catalog.gpus.get("H100-SXM"), catalog.models.get("llama-3.1-70b"), Precision.BF16, Precision.BF16, 2
    )
    model = MeasuredStepModel([bf16], EngineConfig(), Efficiency(), load_tables(tmp_path), "trtllm")
    assert model.sources == ["model formulas (the measured table is FP8, the pool serves bf16)"]
    fp8 = MeasuredStepModel(
        [_hw(catalog, "H100-SXM")], EngineConfig(), Efficiency(), load_tables(tmp_path), "trtllm"
    )
    assert fp8.sources[0].startswith("measured: ")


def test_the_decode_curve_shortcut_matches_the_step_times(catalog: Catalog, tables: Path) -> None:
    workers = [_hw(catalog, "H100-SXM"), _hw(catalog, "H200-SXM"), _hw(catalog, "H100-SXM")]
    model = MeasuredStepModel(workers, EngineConfig(), Efficiency(), load_tables(tables), "trtllm")
    ctx = np.array([[300.0, 2000.0, 9000.0], [5000.0, 700.0, 1024.0]])
    batches, fast = model._curve(0.0, ctx, 0.0)
    slow = np.stack([model.breakdown(b, 0.0, ctx, 0.0).seconds for b in batches], axis=-1)
    assert fast == pytest.approx(slow, rel=1e-9)
