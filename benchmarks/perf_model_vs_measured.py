"""The performance model against NVIDIA AI Configurator's measured-kernel step times (data/measured).

For every row of ``data/measured/<backend>/<model>.csv`` (AI Configurator 0.12.0: one decode step of
``batch`` sequences at ``tokens`` of context, or one static prefill pass over ``batch`` prompts of
``tokens`` tokens, per SKU, TP and EP; see data/measured/README.md) that maps to a phasefit deployment,
predicts the same step with the calibrated parameters the analyzer uses at run time
(``analyzer.model.efficiency.CALIBRATED``), then prints, per regime (TP 1-2 dense, TP 4-8 dense, MoE) and
phase, the median and p90 of

  - the absolute error |predicted / measured - 1| of every row, and
  - the H200/H100 ratio error |(pred H200 / pred H100) / (meas H200 / meas H100) - 1| of every
    (backend, model, TP, EP, phase, batch, tokens) tabulated on both SKUs.

Nothing is fitted here: the tables test the model's structure, its constants stay fitted on published
end-to-end measurements (benchmarks/perf_model_accuracy.py).

How a row is predicted (the model's own functions, as ``phasefit predict`` builds a deployment):

  - the deployment: the catalog model, the SKU, TP, EP (1: experts split over the TP GPUs, as AIC's
    ``moe_tp = tp``; EP = TP: whole experts per GPU, attention tensor-parallel), FP8 weights (AIC's
    per-tensor and block-wise FP8 alike) and the table's KV precision (FP8; bf16 on SGLang);
  - decode: ``analyzer.model.moe.step_time`` (what ``perf_model.predict`` reports as ``tpot_s``) for
    ``batch`` sequences at the mean context of ``Workload(isl=tokens, osl=2)``, as AIC's ``static_gen``
    with ``osl=2`` is its one decode step after the prompt;
  - prefill: one unchunked iteration of ``batch x tokens`` prompt tokens costing ``batch x
    prefill_flops(tokens)``, as AIC's ``static_ctx`` is one pass (for one prompt of up to
    ``EngineLimits.prefill_chunk_tokens`` it equals the model's ``time_to_first_token_s``);
  - the engine (trtllm, vllm, sglang) only sets the KV budget, from the catalog's ``engines:`` rule: a row
    whose model leaves no room for one sequence is skipped; a batch over the budget is still predicted
    (AIC tabulates every point its own memory check passes) and counted.

    .venv/bin/python benchmarks/perf_model_vs_measured.py                   # every table
    .venv/bin/python benchmarks/perf_model_vs_measured.py --by-backend      # also one table per backend
    .venv/bin/python benchmarks/perf_model_vs_measured.py --backend trtllm --model llama-3.1-8b
    .venv/bin/python benchmarks/perf_model_vs_measured.py --json /tmp/vs_measured.json  # + per-row detail
    .venv/bin/python benchmarks/perf_model_vs_measured.py --write   # store the summary per regime x phase
                                                                    # (analyzer/model/validation.py)

With ``--write`` (every table, no filter) the regime x phase figures go into analyzer/model/validation.py,
where they widen a prediction's band beyond the held-out one wherever the validation p90 exceeds it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling perf_model_accuracy (its writer)

from perf_model_accuracy import regime_error_literal, replace_generated_block, string_literal

from analyzer.model.deployment import Deployment, DeploymentError, make_deployment
from analyzer.model.efficiency import CALIBRATED, EfficiencyParams
from analyzer.model.fit import ErrorSummary
from analyzer.model.kv_budget import modelled_budget
from analyzer.model.moe import step_time
from analyzer.model.perf_model import Workload, kv_capacity_sequences
from analyzer.model.validation import PHASES, STRUCTURAL_REGIMES, structural_regime
from fleet.catalog import Catalog, load_catalog
from fleet.models import prefill_flops

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FOLDER = REPO / "data" / "measured"
VALIDATION_FILE = REPO / "analyzer" / "model" / "validation.py"
BLOCK_BEGIN = "# --- measured-kernel validation"
BLOCK_END = "# --- end of measured-kernel validation ---"
COLUMNS = ("sku", "tp", "ep", "phase", "batch", "tokens", "step_s", "mem_gib")
REGIMES = STRUCTURAL_REGIMES
ALL = "all"
H200, H100 = "H200-SXM", "H100-SXM"
WEIGHT_PRECISION = "fp8"  # every table: FP8 GEMMs (per-tensor for Llama, block-wise for the MoE models)
DECODE_OSL = 2  # AIC static_gen with osl=2: the one decode step after the prompt
PREFILL_OSL = 1  # AIC static_ctx with osl=1


@dataclass(frozen=True)
class MeasuredRow:
    """One row of a measured table, with the table's backend, catalog model and KV precision."""

    backend: str
    model: str
    kv_precision: str
    sku: str
    tp: int
    ep: int
    phase: str
    batch: int
    tokens: int
    step_s: float
    source: str  # file:line

    @property
    def pair_key(self) -> tuple[str, str, int, int, str, int, int]:
        """What a row shares with its other-SKU twin."""
        return (self.backend, self.model, self.tp, self.ep, self.phase, self.batch, self.tokens)


@dataclass(frozen=True)
class Table:
    """One ``<backend>/<model>.csv``: provenance lines and rows."""

    path: str
    meta: dict[str, str]
    rows: tuple[MeasuredRow, ...]


@dataclass(frozen=True)
class RowResult:
    """One row predicted."""

    row: MeasuredRow
    predicted_s: float
    regime: str
    over_kv_budget: bool  # the batch's KV exceeds the engine rule's modelled budget

    @property
    def error(self) -> float:
        return relative_error(self.predicted_s, self.row.step_s)


@dataclass(frozen=True)
class RatioResult:
    """One H200/H100 pair: measured and predicted step-time ratios."""

    key: tuple[str, str, int, int, str, int, int]
    regime: str
    measured: float
    predicted: float

    @property
    def backend(self) -> str:
        return self.key[0]

    @property
    def phase(self) -> str:
        return self.key[4]

    @property
    def error(self) -> float:
        return relative_error(self.predicted, self.measured)


@dataclass
class Evaluation:
    """Every predicted row, and the rows that could not be mapped, counted by reason."""

    results: list[RowResult] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class SummaryRow:
    """The errors of one slice (backend, regime, phase; ``all`` for any)."""

    backend: str
    regime: str
    phase: str
    absolute: ErrorSummary
    bias: float  # median predicted / measured
    ratio: ErrorSummary

    def as_dict(self) -> dict[str, Any]:
        def part(s: ErrorSummary) -> dict[str, float | int | None]:
            finite = s.count > 0
            return {
                "count": s.count,
                "median": s.median if finite else None,
                "p90": s.p90 if finite else None,
                "max": s.max if finite else None,
            }

        return {
            "backend": self.backend,
            "regime": self.regime,
            "phase": self.phase,
            "absolute": part(self.absolute),
            "median_predicted_over_measured": self.bias if math.isfinite(self.bias) else None,
            "h200_h100_ratio": part(self.ratio),
        }


def relative_error(predicted: float, measured: float) -> float:
    """|predicted / measured - 1|."""
    if measured <= 0:
        raise ValueError(f"a measured value must be > 0, got {measured}")
    return abs(predicted / measured - 1.0)


def kv_precision_of(meta: dict[str, str]) -> str:
    """The KV-cache precision a table's ``quantization`` line states (``kv fp8`` or ``kv bfloat16``)."""
    found = re.search(r"\bkv\s+([a-z0-9_]+)", meta.get("quantization", ""))
    if found is None:
        raise ValueError(f"no KV precision in the quantization line {meta.get('quantization')!r}")
    return {"bfloat16": "bf16", "float16": "fp16"}.get(found.group(1), found.group(1))


def parse_table(text: str, path: str) -> Table:
    """A table file: ``# key: value`` provenance lines, then CSV with ``COLUMNS``; ValueError names the
    file and line of a bad row."""
    meta: dict[str, str] = {}
    lines = text.splitlines()
    body = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    for line in lines[:body]:
        key, _, value = line[1:].strip().partition(":")
        meta.setdefault(key.strip(), value.strip())  # the first of repeated keys (command, skipped)
    backend, model = meta.get("backend", ""), meta.get("catalog_model", "") or Path(path).stem
    kv = kv_precision_of(meta)
    reader = csv.DictReader(io.StringIO("\n".join(lines[body:])))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"{path}: header {reader.fieldnames} is not {list(COLUMNS)}")
    rows = []
    for n, raw in enumerate(reader, start=body + 2):
        try:
            row = MeasuredRow(
                backend=backend,
                model=model,
                kv_precision=kv,
                sku=raw["sku"],
                tp=int(raw["tp"]),
                ep=int(raw["ep"] or 1),
                phase=raw["phase"],
                batch=int(raw["batch"]),
                tokens=int(raw["tokens"]),
                step_s=float(raw["step_s"]),
                source=f"{path}:{n}",
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} line {n}: {exc}") from exc
        if row.phase not in PHASES or not row.step_s > 0:
            raise ValueError(f"{path} line {n}: phase {row.phase!r}, step_s {row.step_s}")
        rows.append(row)
    return Table(path, meta, tuple(rows))


def load_tables(
    folder: Path = DEFAULT_FOLDER, backends: Sequence[str] = (), models: Sequence[str] = ()
) -> list[Table]:
    """The tables under ``folder`` (``<backend>/<model>.csv``), filtered by backend and model when given."""
    tables = []
    for path in sorted(folder.glob("*/*.csv")):
        if (backends and path.parent.name not in backends) or (models and path.stem not in models):
            continue
        tables.append(parse_table(path.read_text(encoding="utf-8"), str(path.relative_to(folder))))
    return tables


def regime_of(d: Deployment) -> str:
    return structural_regime(d.tp, d.is_moe)


def predict_step(d: Deployment, row: MeasuredRow, params: EfficiencyParams = CALIBRATED) -> float:
    """Seconds the model gives the row's step (see the module docstring)."""
    if row.phase == "decode":
        context = Workload(isl=row.tokens, osl=DECODE_OSL, concurrency=row.batch).mean_context
        return step_time(d, params, decode_seqs=row.batch, context_len=context).total_s
    tokens = row.batch * row.tokens
    flops = row.batch * prefill_flops(d.model, row.tokens)
    return step_time(
        d, params, decode_seqs=0, context_len=0, prefill_tokens=tokens, prefill_flops=flops
    ).total_s


class _Mapper:
    """Rows to deployments and KV budgets, each built once."""

    def __init__(self, catalog: Catalog, params: EfficiencyParams) -> None:
        self.catalog = catalog
        self.params = params
        self._deployments: dict[tuple[str, str, int, int, str], Deployment | str] = {}
        self._budgets: dict[tuple[str, str, int, int, str, str], float] = {}

    def deployment(self, row: MeasuredRow) -> Deployment | str:
        """The row's deployment, or why there is none."""
        key = (row.model, row.sku, row.tp, row.ep, row.kv_precision)
        if key not in self._deployments:
            try:
                self._deployments[key] = make_deployment(
                    self.catalog,
                    model=row.model,
                    gpu=row.sku,
                    precision=WEIGHT_PRECISION,
                    tp=row.tp,
                    kv_precision=row.kv_precision,
                    ep=row.ep,
                )
            except DeploymentError as exc:
                self._deployments[key] = f"{row.model} TP{row.tp} EP{row.ep} on {row.sku}: {exc}"
        return self._deployments[key]

    def budget_bytes(self, d: Deployment, row: MeasuredRow) -> float:
        """The KV bytes the backend's memory rule (the catalog's ``engines:``) gives the instance."""
        key = (row.model, row.sku, row.tp, row.ep, row.kv_precision, row.backend)
        if key not in self._budgets:
            settings = self.catalog.engines.resolve(row.backend)
            if settings is None:
                raise ValueError(f"the catalog knows no engine {row.backend!r}")
            self._budgets[key] = modelled_budget(d, settings, self.params).bytes
        return self._budgets[key]


def evaluate(
    rows: Iterable[MeasuredRow], catalog: Catalog, params: EfficiencyParams = CALIBRATED
) -> Evaluation:
    """Predict every row that maps to a deployment; count the others by reason."""
    mapper = _Mapper(catalog, params)
    out = Evaluation()
    for row in rows:
        d = mapper.deployment(row)
        if isinstance(d, str):
            out.skipped[d] += 1
            continue
        osl = DECODE_OSL if row.phase == "decode" else PREFILL_OSL
        capacity = kv_capacity_sequences(d, mapper.budget_bytes(d, row), row.tokens + osl)
        if capacity < 1.0:
            out.skipped[
                f"{row.model} TP{row.tp} EP{row.ep} on {row.sku} does not fit under the {row.backend} memory "
                f"rule: no KV room for one sequence of the row's length (weights, reserve)"
            ] += 1
            continue
        out.results.append(RowResult(row, predict_step(d, row, params), regime_of(d), capacity < row.batch))
    return out


def ratio_pairs(results: Sequence[RowResult]) -> list[RatioResult]:
    """Every (backend, model, TP, EP, phase, batch, tokens) predicted on both H200 and H100."""
    by_sku: dict[str, dict[tuple[str, str, int, int, str, int, int], RowResult]] = {H200: {}, H100: {}}
    for r in results:
        if r.row.sku in by_sku:
            by_sku[r.row.sku][r.row.pair_key] = r
    pairs = []
    for key, fast in sorted(by_sku[H200].items()):
        slow = by_sku[H100].get(key)
        if slow is None:
            continue
        pairs.append(
            RatioResult(
                key=key,
                regime=fast.regime,
                measured=fast.row.step_s / slow.row.step_s,
                predicted=fast.predicted_s / slow.predicted_s,
            )
        )
    return pairs


def summarise(
    results: Sequence[RowResult], ratios: Sequence[RatioResult], backend: str = ALL
) -> list[SummaryRow]:
    """Per regime x phase (with ``all`` for each), for one backend or every one."""
    out = []
    for regime in (*REGIMES, ALL):
        for phase in (*PHASES, ALL):

            def keep(b: str, g: str, p: str, regime: str = regime, phase: str = phase) -> bool:
                return backend in (ALL, b) and regime in (ALL, g) and phase in (ALL, p)

            mine = [r for r in results if keep(r.row.backend, r.regime, r.row.phase)]
            pairs = [p for p in ratios if keep(p.backend, p.regime, p.phase)]
            bias = statistics.median(r.predicted_s / r.row.step_s for r in mine) if mine else math.nan
            out.append(
                SummaryRow(
                    backend,
                    regime,
                    phase,
                    ErrorSummary.of([r.error for r in mine]),
                    bias,
                    ErrorSummary.of([p.error for p in pairs]),
                )
            )
    return out


def _pct(x: float) -> str:
    return f"{x:.1%}" if math.isfinite(x) else "-"


def markdown_table(rows: Sequence[SummaryRow], with_backend: bool = False) -> str:
    """The summary as a Markdown table (errors as |predicted / measured - 1|)."""
    head = ["regime", "phase", "rows", "abs. median", "abs. p90", "pred./meas. median"]
    head += ["H200/H100 pairs", "ratio median", "ratio p90"]
    if with_backend:
        head.insert(0, "backend")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in rows:
        if s.absolute.count == 0 and s.ratio.count == 0:
            continue
        cells = [s.regime, s.phase, f"{s.absolute.count:,}", _pct(s.absolute.median), _pct(s.absolute.p90)]
        cells += [f"{s.bias:.2f}" if math.isfinite(s.bias) else "-", f"{s.ratio.count:,}"]
        cells += [_pct(s.ratio.median), _pct(s.ratio.p90)]
        if with_backend:
            cells.insert(0, s.backend)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _source_line(tables: Sequence[Table], results: Sequence[RowResult], ratios: Sequence[RatioResult]) -> str:
    versions = sorted({t.meta.get("aiconfigurator_version", "?") for t in tables})
    return (
        f"NVIDIA AI Configurator {', '.join(versions)} measured-kernel step times: "
        f"{len(tables)} tables, {len(results):,} rows predicted, {len(ratios):,} H200/H100 pairs"
    )


def validation_block(summary: Sequence[SummaryRow], source: str) -> str:
    """The regime x phase figures as analyzer/model/validation.py stores them (every backend pooled)."""
    lines = [f"{BLOCK_BEGIN} (generated by `perf_model_vs_measured.py --write`; do not edit by hand) ---"]
    lines.append(f"SOURCE = {string_literal(source, '')}")
    lines.append("MEASURED: dict[tuple[str, str], Validation] = {")
    wanted = {(s.regime, s.phase): s for s in summary if s.backend == ALL}
    for key in ((regime, phase) for regime in REGIMES for phase in PHASES):
        s = wanted.get(key)
        if s is None or s.absolute.count == 0:
            continue
        lines.append(f"    ({json.dumps(key[0])}, {json.dumps(key[1])}): Validation(")
        lines.append(f"        absolute={regime_error_literal(s.absolute)},")
        lines.append(f"        ratio={regime_error_literal(s.ratio)},")
        lines.append(f"        bias={round(s.bias, 4)!r},")
        lines.append("    ),")
    lines.append("}")
    lines.append(BLOCK_END)
    return "\n".join(lines)


def _row_detail(r: RowResult) -> dict[str, Any]:
    return {
        "source": r.row.source,
        "backend": r.row.backend,
        "model": r.row.model,
        "sku": r.row.sku,
        "tp": r.row.tp,
        "ep": r.row.ep,
        "kv_precision": r.row.kv_precision,
        "phase": r.row.phase,
        "batch": r.row.batch,
        "tokens": r.row.tokens,
        "regime": r.regime,
        "measured_s": r.row.step_s,
        "predicted_s": r.predicted_s,
        "error": r.error,
        "over_kv_budget": r.over_kv_budget,
    }


def _ratio_detail(p: RatioResult) -> dict[str, Any]:
    backend, model, tp, ep, phase, batch, tokens = p.key
    return {
        "backend": backend,
        "model": model,
        "tp": tp,
        "ep": ep,
        "phase": phase,
        "batch": batch,
        "tokens": tokens,
        "regime": p.regime,
        "measured_h200_over_h100": p.measured,
        "predicted_h200_over_h100": p.predicted,
        "error": p.error,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER, help="the tables (data/measured)")
    parser.add_argument("--backend", action="append", default=[], help="only this backend (repeatable)")
    parser.add_argument("--model", action="append", default=[], help="only this catalog model (repeatable)")
    parser.add_argument("--by-backend", action="store_true", help="also the table per backend")
    parser.add_argument("--json", type=Path, help="write the figures and per-row details here")
    parser.add_argument(
        "--write",
        action="store_true",
        help="store the regime x phase summary in analyzer/model/validation.py",
    )
    args = parser.parse_args(argv)
    if args.write and (args.backend or args.model or args.folder != DEFAULT_FOLDER):
        parser.error("--write summarises every table of data/measured: no --backend, --model or --folder")

    began = time.perf_counter()
    tables = load_tables(args.folder, args.backend, args.model)
    if not tables:
        wanted = f"backends {args.backend or 'any'}, models {args.model or 'any'}"
        print(f"no tables under {args.folder} for {wanted}")
        return 1
    rows = [row for t in tables for row in t.rows]
    evaluation = evaluate(rows, load_catalog())
    results = evaluation.results
    ratios = ratio_pairs(results)
    overall = summarise(results, ratios)
    backends = sorted({r.row.backend for r in results})
    per_backend = [s for b in backends for s in summarise(results, ratios, b)] if args.by_backend else []

    print(
        f"{len(tables)} tables, {len(rows):,} measured rows: {len(results):,} predicted, "
        f"{sum(evaluation.skipped.values()):,} skipped; {len(ratios):,} H200/H100 pairs. Errors are "
        "|predicted / measured - 1|; pred./meas. median > 1 means the model is slower than AIC.\n"
    )
    print(markdown_table(overall))
    if per_backend:
        print()
        print(markdown_table(per_backend, with_backend=True))
    over = sum(r.over_kv_budget for r in results)
    print(
        f"\n{over:,} predicted rows have a batch over the KV budget the backend's modelled memory rule gives"
    )
    for reason, count in sorted(evaluation.skipped.items()):
        print(f"skipped {count:,}: {reason}")
    wall = time.perf_counter() - began
    print(f"wall time {wall:.1f} s")
    if args.json:
        payload = {
            "folder": str(args.folder),
            "tables": [t.path for t in tables],
            "filters": {"backend": args.backend, "model": args.model},
            "params": CALIBRATED.as_dict(),
            "summary": [s.as_dict() for s in overall],
            "by_backend": [s.as_dict() for s in per_backend],
            "skipped": dict(sorted(evaluation.skipped.items())),
            "over_kv_budget": over,
            "rows": [_row_detail(r) for r in results],
            "ratios": [_ratio_detail(p) for p in ratios],
            "wall_s": wall,
        }
        args.json.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    if args.write:
        block = validation_block(overall, _source_line(tables, results, ratios))
        replace_generated_block(VALIDATION_FILE, BLOCK_BEGIN, BLOCK_END, block)
        print(f"wrote the regime x phase figures to {VALIDATION_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
