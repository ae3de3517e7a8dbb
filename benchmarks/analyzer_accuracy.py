"""Accuracy of the analyzer against the simulator's ground truth, over every built-in scenario.

For each scenario: simulate (``fleetsim``), write the records as JSON lines, ingest them into a
throwaway SQLite store through ``fleet.ingest``, roll them up as ``phasefit db prune`` does, read the store
with ``analyzer.store_io`` and analyse it, then compare with the re-simulated truth:

- precision and recall of misplaced workers (kinds decode-on-low-bandwidth, prefill-on-high-bandwidth,
  capacity-on-small-memory; a worker counts once, whatever the kind);
- the fleet's lost tokens/s (time-weighted over the range) against the truth's, as |estimate/truth - 1|
  where the truth loses more than 1% of its capacity, and as a share of capacity everywhere;
- for scenarios with a traffic drift: how many hours after the drift began a pool-ratio-drift finding
  first appears when the analyzer runs on the data up to then (the hourly cadence of a deployed analyzer).

Goals (issue 6): precision and recall >= 0.95 over all scenarios together, lost-token error < 15% median
and < 30% worst, nothing flagged in balanced and all-h100.

    .venv/bin/python benchmarks/analyzer_accuracy.py                  # every scenario, 7 days, 60 s windows
    .venv/bin/python benchmarks/analyzer_accuracy.py --days 3 demo    # some scenarios, fewer days
    .venv/bin/python benchmarks/analyzer_accuracy.py --pure           # skip the store (faster)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.store_io import read_input
from fleetsim.scenario import builtin_scenarios, load_scenario
from fleetsim.truth import compute_truth
from fleet.catalog import Catalog, load_catalog
from fleet.contract import FindingKind
from fleet.ingest import catalog_sku_resolver, ingest_file
from fleet.store.engine import make_engine
from fleet.store.migrate import upgrade
from fleet.store.retention import apply_retention
from tests.analyzer.sim_harness import Score, score, simulate, totals, write_jsonl

NOTHING_TO_FIND = ("balanced", "all-h100")


def _store_result(
    name: str, catalog: Catalog, days: float, window_s: float, seed: int
) -> tuple[AnalysisResult, dict[str, float]]:
    timings: dict[str, float] = {}
    sc = load_scenario(name)
    start = sc.start
    with tempfile.TemporaryDirectory(prefix="pf-accuracy-") as folder:
        jsonl = Path(folder) / f"{name}.jsonl"
        began = time.perf_counter()
        write_jsonl(name, catalog, jsonl, days=days, window_s=window_s, seed=seed)
        timings["simulate_s"] = time.perf_counter() - began
        engine = make_engine(f"sqlite:///{Path(folder) / 'store.db'}")
        upgrade(engine)
        began = time.perf_counter()
        ingest_file(engine, jsonl, sku_resolver=catalog_sku_resolver(), jobs=0)
        timings["ingest_s"] = time.perf_counter() - began
        began = time.perf_counter()
        end = start + timedelta(days=days)
        apply_retention(engine, now=end + timedelta(hours=1), retention_days=3650)
        timings["rollup_s"] = time.perf_counter() - began
        began = time.perf_counter()
        with engine.connect() as connection:
            data = read_input(connection, start, end + timedelta(microseconds=1))
        result = analyze(data, catalog)
        timings["analyze_s"] = time.perf_counter() - began
        engine.dispose()
    return result, timings


def _drift_delay(
    name: str, catalog: Catalog, days: float, window_s: float, seed: int, truth: dict[str, Any]
) -> float | None:
    """Hours from a drift's start to the first analysis (run on the data so far, hourly) that raises an
    open pool-ratio-drift finding; None where the scenario has no drift or it is never found."""
    events = truth.get("drift_events", [])
    if not events:
        return None
    began = datetime.fromisoformat(events[0]["start"].replace("Z", "+00:00")).timestamp()
    run = simulate(name, catalog, days=days, window_s=window_s, seed=seed, truth=False)
    first = float(np.min(run.gpu_columns["ts"])) - window_s
    for hours in range(1, 13):
        end = began + hours * 3600.0
        if end > float(np.max(run.gpu_columns["ts"])) + 1:
            return None
        gpu = _cut(run.gpu_columns, end)
        engine = _cut(run.engine_columns, end)
        result = analyze(input_from_samples(gpu, engine, start=first, end=end), catalog)
        if any(f.kind is FindingKind.POOL_RATIO_DRIFT and f.status.value == "open" for f in result.findings):
            return float(hours)
    return None


def _cut(columns: dict[str, Any], end: float) -> dict[str, Any]:
    keep = np.asarray(columns["ts"]) < end
    return {
        k: (v[keep] if isinstance(v, np.ndarray) else [x for x, k2 in zip(v, keep, strict=True) if k2])
        for k, v in columns.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenarios", nargs="*", help="built-in scenarios (default: all)")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pure", action="store_true", help="analyse the records directly, without the store")
    parser.add_argument("--no-drift", action="store_true", help="skip the drift detection delay runs")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    names = args.scenarios or sorted(builtin_scenarios())
    scores: list[Score] = []
    rows: list[dict[str, Any]] = []
    for name in names:
        began = time.perf_counter()
        truth = compute_truth(load_scenario(name), catalog, args.seed, args.days, window_s=args.window_s)
        truth_s = time.perf_counter() - began
        if args.pure:
            began = time.perf_counter()
            run = simulate(name, catalog, days=args.days, window_s=args.window_s, seed=args.seed, truth=False)
            sim_s = time.perf_counter() - began
            began = time.perf_counter()
            result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog)
            timings = {"simulate_s": sim_s, "analyze_s": time.perf_counter() - began}
        else:
            result, timings = _store_result(name, catalog, args.days, args.window_s, args.seed)
        timings["truth_s"] = truth_s
        s = score(result, truth, name)
        scores.append(s)
        delay = (
            None if args.no_drift else _drift_delay(name, catalog, args.days, args.window_s, args.seed, truth)
        )
        other = sorted(
            {
                f.kind.value
                for f in result.findings
                if f.kind.value
                not in ("decode-on-low-bandwidth", "prefill-on-high-bandwidth", "capacity-on-small-memory")
            }
        )
        rows.append(
            {
                **asdict(s),
                "lost_error": s.lost_error,
                "lost_share_error": s.lost_share_error,
                "drift_delay_h": delay,
                "drift_events": len(truth.get("drift_events", [])),
                "other_findings": other,
                "timings": timings,
            }
        )
        print(f"{name}: done ({', '.join(f'{k} {v:.1f}' for k, v in timings.items())})", file=sys.stderr)
    _print(rows, totals(scores), args)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "totals": totals(scores)}, indent=2, default=str))
    return 0


def _print(rows: list[dict[str, Any]], total: dict[str, float], args: argparse.Namespace) -> None:
    path = "records -> analyzer" if args.pure else "JSONL -> fleet.ingest -> SQLite -> rollups -> store_io"
    print(
        f"Analyzer accuracy: {args.days:g} days at {args.window_s:g} s windows, seed {args.seed} ({path})\n"
    )
    print(
        "| scenario | misplaced (truth) | flagged | TP | FP | FN | kind agrees | lost tokens/s est. (range) "
        "| truth | error "
        "| error / capacity | drift found after | other findings |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        error = "-" if r["lost_error"] is None else f"{r['lost_error']:.1%}"
        delay = (
            "-"
            if not r["drift_events"]
            else (f"{r['drift_delay_h']:.0f} h" if r["drift_delay_h"] else "not found")
        )
        print(
            f"| {r['scenario']} | {len(r['truth_misplaced'])} | {len(r['flagged'])} | {r['true_positives']} "
            f"| {r['false_positives']} | {r['false_negatives']} | {r['kinds_agree']} "
            f"| {r['lost_estimate']:,.0f} ({r['lost_low']:,.0f}-{r['lost_high']:,.0f}) "
            f"| {r['lost_truth']:,.0f} | {error} "
            f"| {r['lost_share_error']:.1%} | {delay} | {', '.join(r['other_findings']) or '-'} |"
        )
    clean = all(not r["flagged"] for r in rows if r["scenario"] in NOTHING_TO_FIND)
    checks = [
        ("precision >= 0.95", total["precision"] >= 0.95, f"{total['precision']:.3f}"),
        ("recall >= 0.95", total["recall"] >= 0.95, f"{total['recall']:.3f}"),
        (
            "lost-token error median < 15%",
            total["lost_error_median"] < 0.15,
            f"{total['lost_error_median']:.1%}",
        ),
        ("lost-token error worst < 30%", total["lost_error_max"] < 0.30, f"{total['lost_error_max']:.1%}"),
        ("nothing flagged in balanced and all-h100", clean, "yes" if clean else "no"),
    ]
    print()
    for name, ok, value in checks:
        print(f"- {name}: {value} {'PASS' if ok else 'FAIL'}")
    if any(math.isnan(v) for v in total.values()):
        print("- (no scenario loses more than 1% of its capacity: no relative lost-token error)")


if __name__ == "__main__":
    sys.exit(main())
