"""Accuracy of the performance model against published measurements (data/benchmarks/published.csv).

Prints, for the stored calibrated parameters (analyzer/efficiency.py):
  - every row's measured and predicted value and the relative error,
  - every same-release GPU ratio (H200/H100 ...) measured and predicted,
  - the summaries (median / 90th percentile / max of |error|), against two naive baselines,
  - the fit compared across loss functions (plain least squares, soft-L1, Huber), in-sample and under
    leave-one-group-out cross-validation (hold out a model, a TP degree or an ISL/OSL point, fit on the
    rest, predict the held-out rows): the honest estimate for measurements the fit never saw.

    .venv/bin/python benchmarks/perf_model_accuracy.py            # report the stored parameters
    .venv/bin/python benchmarks/perf_model_accuracy.py --refit    # also refit and compare losses + CV
    .venv/bin/python benchmarks/perf_model_accuracy.py --write    # refit and store the constants
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
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

from analyzer.calibration import (
    CalibrationReport,
    ErrorSummary,
    Loss,
    UsableRow,
    evaluate,
    fit,
    prepare_rows,
)
from analyzer.efficiency import CALIBRATED, CalibrationAccuracy, EfficiencyParams
from analyzer.published import load_published
from fleet.catalog import load_catalog

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CSV = REPO / "data" / "benchmarks" / "published.csv"
EFFICIENCY_FILE = REPO / "analyzer" / "efficiency.py"
BEGIN = "# --- fitted constants"
END = "# --- end of fitted constants ---"


def fmt_summary(s: ErrorSummary) -> str:
    return f"n={s.count:3d}  median {s.median:6.1%}  p90 {s.p90:6.1%}  max {s.max:6.1%}"


def print_report(report: CalibrationReport) -> None:
    print(f"{'row':72s} {'measured':>10s} {'predicted':>10s} {'error':>8s}")
    for e in report.rows:
        print(f"{e.row.label:72s} {e.row.value:10.1f} {e.predicted:10.1f} {e.error:+8.1%}")
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


def _groups(rows: Sequence[UsableRow]) -> dict[str, Callable[[UsableRow], str]]:
    return {
        "model": lambda u: u.deployment.model.key,
        "tp": lambda u: f"TP{u.row.tp}",
        "isl/osl": lambda u: f"{u.row.input_len}/{u.row.output_len}",
    }


def cross_validate(rows: Sequence[UsableRow], loss: Loss) -> tuple[ErrorSummary, ErrorSummary]:
    """Leave-one-group-out: absolute and H200/H100 ratio errors of held-out rows, over every grouping."""
    absolute: list[float] = []
    ratios: list[float] = []
    for key in _groups(rows).values():
        for group in sorted({key(u) for u in rows}):
            train = [u for u in rows if key(u) != group]
            test = [u for u in rows if key(u) == group]
            if len(train) < 10 or not test:
                continue
            params = fit(train, loss=loss).params
            report = evaluate(test, params)
            absolute += [e.error for e in report.rows]
            ratios += [r.error for r in report.ratios if r.gpus == ("H200-SXM", "H100-SXM")]
    return ErrorSummary.of(absolute), ErrorSummary.of(ratios)


def _string_literal(text: str, indent: str) -> str:
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
    lines += [f"    {json.dumps(k)}: {_string_literal(v, '    ')}," for k, v in provenance.items()]
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


def write_constants(
    params: EfficiencyParams, provenance: dict[str, str], accuracy: CalibrationAccuracy
) -> None:
    text = EFFICIENCY_FILE.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        sys.exit(f"cannot find the fitted-constants block in {EFFICIENCY_FILE}")
    EFFICIENCY_FILE.write_text(
        pattern.sub(lambda _: constants_block(params, provenance, accuracy), text), encoding="utf-8"
    )
    print(f"\nwrote the fitted constants to {EFFICIENCY_FILE}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--published", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--refit", action="store_true", help="refit, compare losses, cross-validate")
    parser.add_argument("--write", action="store_true", help="refit (soft-L1) and store the constants")
    args = parser.parse_args()

    raw = args.published.read_bytes()
    rows, skipped = prepare_rows(load_published(args.published), load_catalog())
    print(f"published measurements: {args.published} (sha256 {hashlib.sha256(raw).hexdigest()[:16]})")
    print(f"stored parameters: {CALIBRATED}\n")
    report = evaluate(rows, CALIBRATED, skipped=skipped)
    print_report(report)
    print_summary(report, rows)

    if not (args.refit or args.write):
        return
    print("\nfit comparison (scipy least_squares on log errors; scikit-learn's HuberRegressor is linear and")
    print(
        "cannot fit this nonlinear model, so the robust alternatives are scipy's soft-L1 and Huber losses):"
    )
    best: tuple[EfficiencyParams, ErrorSummary, ErrorSummary] | None = None
    for loss in ("linear", "soft_l1", "huber"):
        started = time.perf_counter()
        result = fit(rows, loss=loss)
        seconds = time.perf_counter() - started
        r = evaluate(rows, result.params)
        cv_abs, cv_ratio = cross_validate(rows, loss)
        print(f"\n  loss={loss:8s} fit {seconds:5.2f} s, {result.evaluations} evaluations")
        print(f"    in-sample  absolute {fmt_summary(r.absolute_all)}")
        print(f"    in-sample  H200/H100 {fmt_summary(r.ratio_for('H200-SXM', 'H100-SXM'))}")
        print(f"    held-out   absolute {fmt_summary(cv_abs)}")
        print(f"    held-out   H200/H100 {fmt_summary(cv_ratio)}")
        print(f"    params {result.params}")
        if loss == "soft_l1":
            best = (result.params, cv_abs, cv_ratio)
    if args.write and best is not None:
        params, cv_abs, cv_ratio = best
        final = evaluate(rows, params)
        h200 = final.ratio_for("H200-SXM", "H100-SXM")
        provenance = {
            "method": "scipy.optimize.least_squares, soft_l1 loss (f_scale 0.05) on weighted log errors "
            "of rows and of same-release GPU ratios (analyzer.calibration.fit)",
            "data": f"data/benchmarks/published.csv sha256 {hashlib.sha256(raw).hexdigest()}",
            "rows_used": str(len(rows)),
            "rows_skipped": "; ".join(f"line {s.row.line}: {s.reason}" for s in skipped) or "none",
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "absolute_error": f"median {final.absolute_all.median:.4f} p90 {final.absolute_all.p90:.4f}",
            "h200_h100_ratio_error": f"median {h200.median:.4f} p90 {h200.p90:.4f} max {h200.max:.4f}",
        }
        if any(math.isnan(getattr(params, n)) for n in EfficiencyParams.field_names()):
            sys.exit("the fit produced NaN parameters; not writing")
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


if __name__ == "__main__":
    main()
