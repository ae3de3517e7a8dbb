"""Accuracy of the performance model against published measurements (data/benchmarks/published.csv).

Prints, for the stored calibrated parameters (analyzer/model/efficiency.py):
  - every row's measured and predicted value, the relative error and the regime the model puts it in,
  - every same-release GPU ratio (H200/H100 ...) measured and predicted,
  - the summaries (median / 90th percentile / max of |error|), against two naive baselines,
  - validation that generalises: leave one MODEL out, leave one software RELEASE out, leave one ISL/OSL
    LENGTH point out (fit on the rest, predict what was held out), per regime (compute-bound,
    bandwidth-bound, KV-starved, MoE) next to the in-sample error, for the H200/H100 ratio and for
    absolute throughput: the honest estimate for measurements the fit never saw;
  - with --refit, the fit compared across loss functions (plain least squares, soft-L1, Huber).

Fitting uses the published rows only; nothing is fitted per row or per model.

    .venv/bin/python benchmarks/perf_model_accuracy.py            # report the stored parameters + CV
    .venv/bin/python benchmarks/perf_model_accuracy.py --refit    # also refit and compare losses
    .venv/bin/python benchmarks/perf_model_accuracy.py --write    # refit and store the constants and the
                                                                  # held-out bands
                                                                  # (analyzer/model/uncertainty.py)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from analyzer.model.efficiency import CALIBRATED, CalibrationAccuracy, EfficiencyParams
from analyzer.model.fit import (
    HOLDOUTS,
    PRIOR_WEIGHT,
    CalibrationReport,
    ErrorSummary,
    HeldOutReport,
    UsableRow,
    cross_validate,
    evaluate,
    fit,
    in_sample_errors,
    prepare_rows,
    row_regime,
)
from analyzer.model.published import load_published
from analyzer.model.uncertainty import MIN_COUNT, REGIMES
from fleet.catalog import load_catalog

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CSV = REPO / "data" / "benchmarks" / "published.csv"
EFFICIENCY_FILE = REPO / "analyzer" / "model" / "efficiency.py"
UNCERTAINTY_FILE = REPO / "analyzer" / "model" / "uncertainty.py"
BEGIN = "# --- fitted constants"
END = "# --- end of fitted constants ---"
BANDS_BEGIN = "# --- held-out errors per regime"
BANDS_END = "# --- end of held-out errors per regime ---"
H200_H100 = ("H200-SXM", "H100-SXM")
SCHEME_NAMES = {
    "model": "leave one model out",
    "release": "leave one release out",
    "isl/osl": "leave one length out",
}
GOAL_MEDIAN, GOAL_P90 = 0.05, 0.15  # issue 17: held-out H200/H100 ratio error
PRIOR_SWEEP = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.6)


def fmt_summary(s: ErrorSummary) -> str:
    return f"n={s.count:3d}  median {s.median:6.1%}  p90 {s.p90:6.1%}  max {s.max:6.1%}"


def print_report(report: CalibrationReport, regimes: dict[int, str]) -> None:
    print(f"{'row':72s} {'measured':>10s} {'predicted':>10s} {'error':>8s}  regime")
    for e in report.rows:
        regime = regimes.get(e.row.line, "")
        print(f"{e.row.label:72s} {e.row.value:10.1f} {e.predicted:10.1f} {e.error:+8.1%}  {regime}")
    for s in report.skipped:
        print(f"{s.row.label:72s} {s.row.value:10.1f} {'skipped':>10s}  ({s.reason})")
    print(f"\n{'ratio':82s} {'measured':>8s} {'predicted':>9s} {'error':>8s}")
    for r in report.ratios:
        print(f"{r.label:82s} {r.measured:8.3f} {r.predicted:9.3f} {r.error:+8.1%}")


def print_summary(report: CalibrationReport, rows: Sequence[UsableRow]) -> None:
    h200 = report.ratio_for("H200-SXM", "H100-SXM")
    print("\nsummary (|predicted / measured - 1|):")
    print(f"  absolute, all rows          {fmt_summary(report.absolute_all)}")
    print(f"  absolute, throughput rows   {fmt_summary(report.absolute_throughput)}")
    print(f"  ratio, H200-SXM / H100-SXM  {fmt_summary(h200)}")
    print(f"  ratio, every GPU pair       {fmt_summary(report.ratio)}")
    bandwidth = [
        abs(4.8 / 3.35 / r.measured - 1) for r in report.ratios if r.gpus == ("H200-SXM", "H100-SXM")
    ]
    parity = [abs(1.0 / r.measured - 1) for r in report.ratios if r.gpus == ("H200-SXM", "H100-SXM")]
    print(f"  baseline 'ratio = bandwidth ratio 1.433'  median {statistics.median(bandwidth):6.1%}")
    print(f"  baseline 'ratio = 1 (same compute)'       median {statistics.median(parity):6.1%}")
    print(f"  goals: ratio median < 5%, p90 < 10%; absolute median < 20%  ({len(rows)} usable rows)")


def _pair(s: ErrorSummary) -> str:
    return f"{s.median:5.1%}/{s.p90:5.1%}"


def _cell(s: ErrorSummary) -> str:
    if s.count == 0:
        return f"{'-':>20s}"
    return f"{s.count:3d} {s.median:6.1%} {s.p90:7.1%}"


def print_heldout(cv: HeldOutReport, inside: HeldOutReport) -> None:
    """The validation table: per regime, in-sample next to each held-out scheme and all of them."""
    schemes = list(HOLDOUTS)
    header = f"{'regime':16s} {'in-sample':>20s} " + " ".join(f"{SCHEME_NAMES[k]:>22s}" for k in schemes)
    kinds: tuple[tuple[Literal["absolute", "ratio"], str], ...] = (
        ("ratio", "H200/H100 ratio error"),
        ("absolute", "absolute throughput error"),
    )
    for kind, title in kinds:
        print(f"\n{title} (|predicted / measured - 1|; each cell: n  median  p90):")
        print(header + f" {'all held out':>22s}")
        for regime in (*REGIMES, None):
            name = regime or "all"
            cells = [_cell(inside.summary(kind, regime=regime))]
            cells += [f"{_cell(cv.summary(kind, scheme=k, regime=regime)):>22s}" for k in schemes]
            cells.append(f"{_cell(cv.summary(kind, regime=regime)):>22s}")
            print(f"{name:16s} {cells[0]:>20s} " + " ".join(cells[1:]))
    every_ratio = cv.summary("ratio", inflight_only=False)
    every_row = cv.summary("absolute", inflight_only=False)
    print(
        "  in-flight-batching throughput only; with the static-batching and latency rows (TensorRT-LLM "
        f"v0.9, NIM) too, held out: H200/H100 ratio median {every_ratio.median:.1%} "
        f"p90 {every_ratio.p90:.1%} "
        f"(n={every_ratio.count}), absolute median {every_row.median:.1%} p90 {every_row.p90:.1%} "
        f"(n={every_row.count})"
    )
    for note in cv.skipped:
        print(f"  not held out: {note} (too few to fit)")
    ratio = cv.summary("ratio")
    met = ratio.count > 0 and ratio.median < GOAL_MEDIAN and ratio.p90 < GOAL_P90
    print(
        f"  goal (held-out H200/H100 ratio median < {GOAL_MEDIAN:.0%}, p90 < {GOAL_P90:.0%}): "
        f"{'met' if met else 'NOT met'} (median {ratio.median:.1%}, p90 {ratio.p90:.1%}, n={ratio.count})"
    )


def string_literal(text: str, indent: str) -> str:
    """A double-quoted literal, split into implicitly concatenated pieces that fit the line length."""
    pieces = textwrap.wrap(text, 80, drop_whitespace=False, break_on_hyphens=False) or [""]
    quoted = [json.dumps(p) for p in pieces]
    if len(quoted) == 1:
        return quoted[0]
    inner = "\n".join(f"{indent}    {q}" for q in quoted)
    return f"(\n{inner}\n{indent})"


def constants_block(
    params: EfficiencyParams, provenance: dict[str, str], accuracy: CalibrationAccuracy
) -> str:
    lines = [f"{BEGIN} (generated by `benchmarks/perf_model_accuracy.py --write`; do not edit by hand) ---"]
    lines.append("CALIBRATED = EfficiencyParams(")
    lines += [
        f"    {name}={float(f'{getattr(params, name):.6g}')!r}," for name in EfficiencyParams.field_names()
    ]
    lines.append(")")
    lines.append("CALIBRATION_PROVENANCE: dict[str, str] = {")
    lines += [f"    {json.dumps(k)}: {string_literal(v, '    ')}," for k, v in provenance.items()]
    lines.append("}")
    lines.append("CALIBRATION_ACCURACY = CalibrationAccuracy(")
    for f in fields(accuracy):
        value = getattr(accuracy, f.name)
        lines.append(
            f"    {f.name}={round(value, 4)!r}," if math.isfinite(value) else f'    {f.name}=float("inf"),'
        )
    lines.append(")")
    lines.append(END)
    return "\n".join(lines)


def replace_generated_block(path: Path, begin: str, end: str, block: str) -> None:
    """Replace the generated block of ``path`` (from the line starting ``begin`` through ``end``) with
    ``block``; exit naming the file where it has none."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        sys.exit(f"cannot find the generated block {begin!r} in {path}")
    path.write_text(pattern.sub(lambda _: block, text), encoding="utf-8")


def write_constants(
    params: EfficiencyParams, provenance: dict[str, str], accuracy: CalibrationAccuracy
) -> None:
    replace_generated_block(EFFICIENCY_FILE, BEGIN, END, constants_block(params, provenance, accuracy))
    print(f"\nwrote the fitted constants to {EFFICIENCY_FILE}")


def regime_error_literal(s: ErrorSummary) -> str:
    """``RegimeError(count=..., median=..., p90=...)`` as analyzer/model/uncertainty.py spells it."""

    def number(x: float) -> str:
        return repr(round(x, 4)) if math.isfinite(x) else 'float("inf")'

    return f"RegimeError(count={s.count}, median={number(s.median)}, p90={number(s.p90)})"


def _band_entry(name: str, s: ErrorSummary) -> str:
    return f"    {json.dumps(name)}: {regime_error_literal(s)},"


def bands_block(cv: HeldOutReport) -> str:
    """The held-out error per regime as analyzer/model/uncertainty.py stores it (all schemes pooled)."""
    lines = [f"{BANDS_BEGIN} (generated by `perf_model_accuracy.py --write`; do not edit by hand) ---"]
    tables: tuple[tuple[str, Literal["absolute", "ratio"]], ...] = (
        ("HELDOUT_ABSOLUTE", "absolute"),
        ("HELDOUT_RATIO", "ratio"),
    )
    for title, kind in tables:
        lines.append(f"{title}: dict[str, RegimeError] = {{")
        lines.append(_band_entry("all", cv.summary(kind)))
        lines += [_band_entry(r, cv.summary(kind, regime=r)) for r in REGIMES]
        lines.append("}")
    lines.append(BANDS_END)
    return "\n".join(lines)


def write_bands(cv: HeldOutReport) -> None:
    replace_generated_block(UNCERTAINTY_FILE, BANDS_BEGIN, BANDS_END, bands_block(cv))
    print(
        f"wrote the held-out errors per regime to {UNCERTAINTY_FILE} (bands: regimes with n >= {MIN_COUNT})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--published", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--refit", action="store_true", help="refit and compare loss functions")
    parser.add_argument("--write", action="store_true", help="refit (soft-L1) and store the constants")
    args = parser.parse_args()

    raw = args.published.read_bytes()
    rows, skipped = prepare_rows(load_published(args.published), load_catalog())
    print(f"published measurements: {args.published} (sha256 {hashlib.sha256(raw).hexdigest()[:16]})")
    print(f"stored parameters: {CALIBRATED}\n")
    report = evaluate(rows, CALIBRATED, skipped=skipped)
    print_report(report, {u.row.line: row_regime(u) for u in rows})
    print_summary(report, rows)

    started = time.perf_counter()
    cv = cross_validate(rows)
    print(
        f"\nvalidation that generalises ({time.perf_counter() - started:.1f} s; soft-L1 fits on the rest, "
        "regimes as the stored parameters classify each row; a ratio is KV-starved or bandwidth-bound where "
        "either side is):"
    )
    print_heldout(cv, in_sample_errors(rows))

    if not (args.refit or args.write):
        return
    print("\nfit comparison (scipy least_squares on log errors; scikit-learn's HuberRegressor is linear and")
    print(
        "cannot fit this nonlinear model, so the robust alternatives are scipy's soft-L1 and Huber losses):"
    )
    best: EfficiencyParams | None = None
    for loss in ("linear", "soft_l1", "huber"):
        started = time.perf_counter()
        result = fit(rows, loss=loss)
        seconds = time.perf_counter() - started
        r = evaluate(rows, result.params)
        held = cv if loss == "soft_l1" else cross_validate(rows, loss=loss)
        print(f"\n  loss={loss:8s} fit {seconds:5.2f} s, {result.evaluations} evaluations")
        print(f"    in-sample  absolute  {fmt_summary(r.absolute_all)}")
        print(f"    in-sample  H200/H100 {fmt_summary(r.ratio_for(*H200_H100))}")
        print(f"    held-out   absolute  {fmt_summary(held.summary('absolute', inflight_only=False))}")
        print(f"    held-out   H200/H100 {fmt_summary(held.summary('ratio'))}")
        print(f"    params {result.params}")
        if loss == "soft_l1":
            best = result.params
    print("\nprior weight (analyzer.model.fit.PRIOR_WEIGHT; soft-L1): in-sample against held out")
    for weight in PRIOR_SWEEP:
        trial = fit(rows, prior_weight=weight).params
        inside = evaluate(rows, trial)
        held = cross_validate(rows, prior_weight=weight)
        mark = "  <- used" if weight == PRIOR_WEIGHT else ""
        print(
            f"  {weight:4.2f}  in-sample H200/H100 {_pair(inside.ratio_for(*H200_H100))}  absolute "
            f"{_pair(inside.absolute_throughput)} | held out H200/H100 {_pair(held.summary('ratio'))}  "
            f"absolute {_pair(held.summary('absolute'))}{mark}"
        )
    if args.write and best is not None:
        params = best
        final = evaluate(rows, params)
        h200 = final.ratio_for(*H200_H100)
        provenance = {
            "method": "scipy.optimize.least_squares, soft_l1 loss (f_scale 0.05) on weighted log errors "
            "of rows and of same-release GPU ratios (analyzer.model.fit.fit)",
            "data": f"data/benchmarks/published.csv sha256 {hashlib.sha256(raw).hexdigest()}",
            "rows_used": str(len(rows)),
            "rows_skipped": "; ".join(f"line {s.row.line}: {s.reason}" for s in skipped) or "none",
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "absolute_error": f"median {final.absolute_all.median:.4f} p90 {final.absolute_all.p90:.4f}",
            "h200_h100_ratio_error": f"median {h200.median:.4f} p90 {h200.p90:.4f} max {h200.max:.4f}",
        }
        if any(math.isnan(getattr(params, n)) for n in EfficiencyParams.field_names()):
            sys.exit("the fit produced NaN parameters; not writing")
        # Regimes and bands under the parameters being stored (the table above classified with the old).
        cv = cross_validate(rows, reference=params)
        cv_abs = cv.summary("absolute")
        cv_ratio = cv.summary("ratio")
        accuracy = CalibrationAccuracy(
            absolute_median=final.absolute_all.median,
            absolute_p90=final.absolute_all.p90,
            ratio_median=h200.median,
            ratio_p90=h200.p90,
            heldout_absolute_median=cv_abs.median,
            heldout_absolute_p90=cv_abs.p90,
            heldout_ratio_median=cv_ratio.median,
            heldout_ratio_p90=cv_ratio.p90,
        )
        write_constants(params, provenance, accuracy)
        write_bands(cv)


if __name__ == "__main__":
    main()
