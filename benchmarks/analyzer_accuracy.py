"""Accuracy of the analyzer against the simulator's ground truth, every built-in scenario over several seeds.

For each scenario and seed: simulate (``fleetsim``), write the records as JSON lines, ingest them into a
throwaway SQLite store through ``fleet.ingest``, roll them up as ``phasefit db prune`` does, read the
store with ``analyzer.sources.store`` and analyse it (``--pure``: analyse the records directly), then score
the findings with ``fleetsim.examine``: by counts per (pool, SKU, from -> to role) against the
re-simulated truth's equivalent best splits, per finding kind (precision and recall per seed, mean and
spread = population standard deviation over seeds), lost capacity in output tokens/s and requests/s,
and critical findings on pools the truth finds demand-limited.

    .venv/bin/python benchmarks/analyzer_accuracy.py --pure            # every scenario, 5 seeds, 3 days
    .venv/bin/python benchmarks/analyzer_accuracy.py --days 7 demo     # some scenarios, a week
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.pipeline import AnalysisResult, analyze, input_from_samples
from analyzer.sources.store import read_input
from fleet.catalog import Catalog, load_catalog
from fleet.ingest import catalog_sku_resolver, ingest_file
from fleet.store.engine import make_engine
from fleet.store.migrate import upgrade
from fleet.store.retention import apply_retention
from fleetsim.examine import Score, SimRun, score, simulate, summarise, write_jsonl
from fleetsim.scenario import builtin_scenarios, load_scenario

DAYS = 3.0  # default span: every scenario x 5 seeds stays within about 10 minutes on 2 shared cores


def _store_result(run: SimRun, catalog: Catalog) -> AnalysisResult:
    start = load_scenario(run.scenario).start
    with tempfile.TemporaryDirectory(prefix="pf-accuracy-") as folder:
        jsonl = Path(folder) / f"{run.scenario}.jsonl"
        write_jsonl(run.scenario, catalog, jsonl, days=run.days, window_s=run.window_s, seed=run.seed)
        engine = make_engine(f"sqlite:///{Path(folder) / 'store.db'}")
        upgrade(engine)
        ingest_file(engine, jsonl, sku_resolver=catalog_sku_resolver(), jobs=0)
        end = start + timedelta(days=run.days)
        apply_retention(engine, now=end + timedelta(hours=1), retention_days=3650)
        with engine.connect() as connection:
            data = read_input(connection, start, end + timedelta(microseconds=1))
        result = analyze(data, catalog)
        engine.dispose()
    return result


def _row(s: Score) -> dict[str, Any]:
    return {
        "scenario": s.scenario,
        "seed": s.seed,
        "misplaced": {"truth": s.misplaced.truth, "flagged": s.misplaced.flagged, **asdict(s.misplaced)},
        "kinds_agree": s.kinds_agree,
        "kinds": {k: (None if t is None else asdict(t)) for k, t in s.kinds.items()},
        "flagged_by_kind": s.flagged_by_kind,
        "lost": {unit: {"estimate": est, "truth": tru} for unit, (est, tru) in s.lost.items()},
        "critical_on_demand_limited": s.critical_on_demand_limited,
        "notes": s.notes,
    }


def _pm(mean: float | None, spread: float | None) -> str:
    return "-" if mean is None else f"{mean:.3f} ± {spread or 0.0:.3f}"


def _print(rows: list[dict[str, Any]], kinds: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    path = "records -> analyzer" if args.pure else "JSONL -> fleet.ingest -> SQLite -> rollups -> store_io"
    print(
        f"Analyzer accuracy: {args.days:g} days at {args.window_s:g} s windows, "
        f"seeds 0-{args.seeds - 1} ({path})\n"
    )
    print("| kind | truth | flagged | TP | FP | FN | precision (mean ± spread) | recall (mean ± spread) |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, k in kinds.items():
        if not k["scored"]:
            print(f"| {kind} | no truth | {k['flagged']} | - | - | - | unscored | unscored |")
            continue
        print(
            f"| {kind} | {k['truth']} | {k['flagged']} | {k['tp']} | {k['fp']} | {k['fn']} "
            f"| {_pm(k['precision_mean'], k['precision_spread'])} "
            f"| {_pm(k['recall_mean'], k['recall_spread'])} |"
        )
    print(
        "\n| scenario | misplaced truth | flagged | TP | FP | FN | kind agrees "
        "| lost output tokens/s est. / truth | lost requests/s est. / truth | critical on demand-limited |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    names = sorted({r["scenario"] for r in rows})
    for name in names:
        mine = [r for r in rows if r["scenario"] == name]

        def total(key: str, mine: list[dict[str, Any]] = mine) -> int:
            return sum(int(r["misplaced"][key]) for r in mine)

        def lost(unit: str, mine: list[dict[str, Any]] = mine) -> str:
            est = [r["lost"][unit]["estimate"] for r in mine]
            tru = sum(r["lost"][unit]["truth"] for r in mine) / len(mine)
            if any(e is None for e in est):
                return f"missing / {tru:,.1f}"
            return f"{sum(est) / len(est):,.1f} / {tru:,.1f}"

        print(
            f"| {name} | {total('truth')} | {total('flagged')} | {total('tp')} | {total('fp')} "
            f"| {total('fn')} "
            f"| {sum(r['kinds_agree'] for r in mine)} | {lost('output_tokens')} | {lost('requests')} "
            f"| {sum(r['critical_on_demand_limited'] for r in mine)} |"
        )
    print(
        f"\n(counts summed over {args.seeds} seeds; lost capacity: the mean over seeds, "
        "time-weighted over the span)"
    )
    for note in sorted({n for r in rows for n in r["notes"]}):
        print(f"- {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenarios", nargs="*", help="built-in scenarios (default: all)")
    parser.add_argument("--days", type=float, default=DAYS)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--pure", action="store_true", help="analyse the records directly, without the store")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    names = args.scenarios or sorted(builtin_scenarios())
    began = time.perf_counter()
    scores: list[Score] = []
    for name in names:
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            run = simulate(name, catalog, days=args.days, window_s=args.window_s, seed=seed)
            if args.pure:
                result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog)
            else:
                result = _store_result(run, catalog)
            scores.append(score(result, run))
            print(f"{name} seed {seed}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = [_row(s) for s in scores]
    kinds = summarise(scores)
    _print(rows, kinds, args)
    wall = time.perf_counter() - began
    print(f"\nwall time {wall:.0f} s")
    if args.json:
        payload = {"days": args.days, "window_s": args.window_s, "seeds": args.seeds, "pure": args.pure}
        args.json.write_text(json.dumps({**payload, "kinds": kinds, "rows": rows, "wall_s": wall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
