"""analyzer.model.validation: the measured-kernel figures as the benchmark computes them, when they widen a
prediction's band and what the widening says; predictions carry it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer.model import uncertainty, validation
from analyzer.model.deployment import Deployment, make_deployment
from analyzer.model.perf_model import Workload, predict
from analyzer.model.uncertainty import RegimeError
from analyzer.model.validation import Validation, structural_regime, widen, widest
from fleet.catalog import Catalog, load_catalog

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def instance(catalog: Catalog, tp: int, model: str = "llama-3.1-70b") -> Deployment:
    return make_deployment(catalog, model=model, gpu="H200-SXM", precision="fp8", tp=tp)


def _entry(p90: float, *, count: int = 100, ratio_p90: float = 0.05, bias: float = 1.5) -> Validation:
    return Validation(
        absolute=RegimeError(count=count, median=p90 / 4, p90=p90),
        ratio=RegimeError(count=count, median=ratio_p90 / 2, p90=ratio_p90),
        bias=bias,
    )


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], Validation]:
    """A hand-made validation table in place of the generated one."""
    figures = {
        ("TP 1-2 dense", "decode"): _entry(0.20),
        ("TP 1-2 dense", "prefill"): _entry(0.30, ratio_p90=0.12),
        ("TP 4-8 dense", "decode"): _entry(2.5, bias=1.9),
        ("MoE", "decode"): _entry(0.9, count=uncertainty.MIN_COUNT - 1),
    }
    monkeypatch.setattr(validation, "MEASURED", figures)
    return figures


def test_the_generated_block_is_what_the_benchmark_computes_from_the_measured_tables() -> None:
    from benchmarks.perf_model_vs_measured import (
        BLOCK_BEGIN,
        BLOCK_END,
        VALIDATION_FILE,
        _source_line,
        evaluate,
        load_tables,
        ratio_pairs,
        summarise,
        validation_block,
    )

    tables = load_tables()
    results = evaluate([row for t in tables for row in t.rows], load_catalog()).results
    ratios = ratio_pairs(results)
    block = validation_block(summarise(results, ratios), _source_line(tables, results, ratios))
    text = VALIDATION_FILE.read_text(encoding="utf-8")
    stored = re.search(re.escape(BLOCK_BEGIN) + r".*?" + re.escape(BLOCK_END), text, re.DOTALL)
    assert VALIDATION_FILE == REPO / "analyzer" / "model" / "validation.py"
    assert stored is not None
    assert stored.group(0) == block, "rerun benchmarks/perf_model_vs_measured.py --write"
    # Every regime x phase is there, with the figures the module holds.
    every = {(r, p) for r in validation.STRUCTURAL_REGIMES for p in validation.PHASES}
    assert set(validation.MEASURED) == every
    tp8 = validation.MEASURED[("TP 4-8 dense", "decode")]
    assert tp8.absolute.count > 1000 and tp8.absolute.p90 > 2.0 and tp8.bias > 1.5


def test_the_writer_replaces_only_its_block(tmp_path: Path) -> None:
    from benchmarks.perf_model_accuracy import replace_generated_block
    from benchmarks.perf_model_vs_measured import BLOCK_BEGIN, BLOCK_END

    target = tmp_path / "validation.py"
    target.write_text(f"head\n{BLOCK_BEGIN} old ---\nMEASURED = {{}}\n{BLOCK_END}\ntail\n", encoding="utf-8")
    replace_generated_block(target, BLOCK_BEGIN, BLOCK_END, f"{BLOCK_BEGIN} new ---\nX = 1\n{BLOCK_END}")
    assert target.read_text(encoding="utf-8") == f"head\n{BLOCK_BEGIN} new ---\nX = 1\n{BLOCK_END}\ntail\n"
    target.write_text("no block here\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="cannot find"):
        replace_generated_block(target, BLOCK_BEGIN, BLOCK_END, "x")


def test_structural_regimes() -> None:
    dense = [structural_regime(tp, moe=False) for tp in (1, 2, 4, 8)]
    assert dense == ["TP 1-2 dense", "TP 1-2 dense", "TP 4-8 dense", "TP 4-8 dense"]
    assert structural_regime(1, moe=True) == structural_regime(8, moe=True) == "MoE"


@pytest.mark.usefixtures("table")
def test_the_band_widens_exactly_where_the_validation_p90_exceeds_it() -> None:
    beyond = widen(1, False, "decode", 0.19)
    assert beyond.band == pytest.approx(0.20) and beyond.reason is not None
    assert widen(2, False, "decode", 0.20) == validation.Widening(0.20, None)  # equal: not beyond
    assert widen(1, False, "decode", 0.21) == validation.Widening(0.21, None)
    assert widen(8, False, "prefill", 0.1) == validation.Widening(0.1, None)  # no figures for it
    assert widen(8, True, "decode", 0.1) == validation.Widening(0.1, None)  # too few rows
    # The ratio kind compares the H200/H100 ratio error.
    assert widen(1, False, "prefill", 0.10, "ratio").band == pytest.approx(0.12)
    assert widen(1, False, "prefill", 0.13, "ratio").reason is None
    # A figure whose steps carry both phases takes the wider.
    assert widest(1, False, 0.1).band == pytest.approx(0.30)
    assert "prefill" in (widest(1, False, 0.1).reason or "")
    with pytest.raises(ValueError, match="phase"):
        widen(1, False, "colocated", 0.1)


@pytest.mark.usefixtures("table")
def test_the_reason_names_the_regime_the_validation_and_the_band_it_exceeded() -> None:
    assert widen(8, False, "decode", 0.177).reason == (
        "widened to 250%: against AI Configurator's measured kernels, TP 4-8 dense decode steps are off by "
        "250% at p90 (median 62.5%; the model's steps 1.90x the measured), beyond the 17.7% held out on "
        "published rows"
    )
    assert widen(1, False, "prefill", 0.07, "ratio").reason == (
        "widened to 12.0%: against AI Configurator's measured kernels, TP 1-2 dense prefill H200/H100 "
        "step-time ratios are off by 12.0% at p90 (median 6.0%), beyond the 7.0% held out on published rows"
    )


def test_a_tp8_dense_decode_prediction_is_widened(catalog: Catalog) -> None:
    p = predict(instance(catalog, 8), Workload(1000, 1000))
    measured = validation.MEASURED[("TP 4-8 dense", "decode")].absolute
    held_out = uncertainty.band(p.regime)
    assert measured.p90 > held_out
    assert p.uncertainty_parts["model"] == pytest.approx(held_out)
    assert p.uncertainty_parts["validation"] == pytest.approx(measured.p90)
    assert p.uncertainty >= measured.p90
    assert p.widened is not None and p.widened == p.widenings["decode"]
    assert p.widened.startswith(f"widened to {measured.p90:.0%}: ")
    assert "TP 4-8 dense decode steps" in p.widened and f"beyond the {held_out:.1%}" in p.widened
    high = p.ranges["decode"][1]
    assert high / p.decode_tokens_per_s >= 1.0 + measured.p90 - 1e-9
    assert "TP 4-8 dense prefill" in p.widenings["prefill"]
    # Without ranges, nothing is widened; the central figures do not move.
    bare = predict(instance(catalog, 8), Workload(1000, 1000), with_range=False)
    assert bare.widened is None and not bare.widenings
    assert bare.output_tokens_per_s == p.output_tokens_per_s


def test_a_tp1_dense_prediction_within_the_band_is_not_widened(
    catalog: Catalog, table: dict[tuple[str, str], Validation]
) -> None:
    # Validation p90s under every held-out band: nothing widens, the band is the held-out one.
    for phase in validation.PHASES:
        table[("TP 1-2 dense", phase)] = _entry(0.05)
    p = predict(instance(catalog, 1), Workload(1000, 1000))
    assert p.widened is None and not p.widenings
    assert p.uncertainty_parts["validation"] == 0.0
    held_out = uncertainty.band(p.regime)
    assert p.uncertainty_parts["model"] == pytest.approx(held_out)
    # With the generated figures TP 1-2 dense decode is off by more than any dense held-out band.
    table[("TP 1-2 dense", "decode")] = _entry(held_out + 0.05)
    assert predict(instance(catalog, 1), Workload(1000, 1000)).widened is not None


def test_the_generated_tp12_dense_figures_sit_just_beyond_the_held_out_bands() -> None:
    """What the generated figures say today (README, "Performance model against measured kernels")."""
    dense = validation.MEASURED[("TP 1-2 dense", "decode")].absolute.p90
    assert uncertainty.band("compute-bound") < dense < 2 * uncertainty.band("compute-bound")
