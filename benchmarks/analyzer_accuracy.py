"""Accuracy of the analyzer against the simulator's ground truth, every built-in scenario over several seeds.

For each scenario and seed: simulate (``fleetsim``), write the records as JSON lines, ingest them into a
throwaway SQLite store through ``fleet.ingest``, roll them up as ``phasefit db prune`` does, read the
store with ``analyzer.sources.store`` and analyse it (``--pure``: analyse the records directly), then score
the findings with ``fleetsim.examine``: by counts per (pool, SKU, from -> to role) against the
re-simulated truth's equivalent best splits, per finding kind (precision and recall per seed, mean and
spread = population standard deviation over seeds), lost capacity in output tokens/s and requests/s,
and critical findings on pools the truth finds demand-limited.

The analyzer gets what each scenario's operator states (``operator_params``): its KV-link figure per
prefill worker where the scenario gives one (``kv-fabric``'s 1 GB/s, as ``PHASEFIT_ANALYZER_KV_LINK_GB_S``),
and with ``--targets`` each pool's TPOT target (the one its simulated engines batch to).

Under ``--physics`` (``model``, ``measured`` or ``perturbed``: ``fleetsim.physics_choice``) the fleet and
its truth run on that physics; the analyzer never knows which. Per physics it also reports, over
pool-runs (``fleetsim.examine_pools``): pool state (supply- or demand-limited) accuracy, lost output
tokens/s as a ratio to the truth (share inside [0.75, 1.33], share whose truth lies inside the reported
range), phantom loss on pools whose best split is the current one, whether decisions agree across
seeds, and the role changes seen and judged.

    .venv/bin/python benchmarks/analyzer_accuracy.py --pure            # every scenario, 5 seeds, 3 days
    .venv/bin/python benchmarks/analyzer_accuracy.py --days 7 demo     # some scenarios, a week
    .venv/bin/python benchmarks/analyzer_accuracy.py --pure --physics measured --seeds 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.pipeline import AnalysisResult, AnalyzerParams, analyze, input_from_samples
from analyzer.sources.store import read_input
from fleet.catalog import Catalog, load_catalog
from fleet.ingest import catalog_sku_resolver, ingest_file
from fleet.store.engine import make_engine
from fleet.store.migrate import upgrade
from fleet.store.retention import apply_retention
from fleet.targets import parse_rules
from fleetsim.examine import Score, SimRun, score, simulate, summarise, write_jsonl
from fleetsim.examine_pools import BASES, RATIO_BAND, PoolTotals, decisions_agree
from fleetsim.physics_choice import PHYSICS, draw_seed, resolve_physics
from fleetsim.scenario import Scenario, builtin_scenarios, load_scenario

DAYS = 3.0  # default span: every scenario x 5 seeds stays within about 10 minutes on 2 shared cores


def operator_params(name: str, targets: bool = False) -> AnalyzerParams:
    """The analyzer's parameters with what the scenario's operator states: its KV-link figure per prefill
    worker where the scenario gives one (``Scenario.kv_link_gb_s``, as ``PHASEFIT_ANALYZER_KV_LINK_GB_S``)
    and, with ``targets``, each pool's TPOT target (the one its simulated engines size their decode
    batches to, ``PoolSpec.tpot_target_s``) and TTFT target where it states one (``ttft_target_s``, which
    the truth counts goodput by), one rule per pool matched by its deployment and served model (and
    cluster where the records carry one). Facts an operator knows about their own network and SLOs, never
    the simulator's physics."""
    scenario = load_scenario(name)
    params = AnalyzerParams()
    if scenario.kv_link_gb_s is not None:
        kv_fabric = replace(params.findings.kv_fabric, link_bytes_per_s=scenario.kv_link_gb_s * 1e9)
        params = replace(params, findings=replace(params.findings, kv_fabric=kv_fabric))
    if not targets:
        return params
    rules = []
    for spec in scenario.pools:
        stated = {"tpot_p90_s": spec.tpot_target_s, "ttft_p90_s": spec.ttft_target_s}
        if all(value is None for value in stated.values()):
            continue
        rule: dict[str, Any] = {"deployment": spec.deployment or spec.name, "model": spec.model}
        if spec.cluster is not None:
            rule["cluster"] = spec.cluster
        rules.append(rule | {key: value for key, value in stated.items() if value is not None})
    return replace(params, targets=parse_rules(rules, "settings", f"scenario {name}"))


def scored_scenario(name: str, targets: bool = False) -> Scenario:
    """The scenario as simulated and scored. A pool's TTFT target changes only its truth (the engines
    admit every request; the records are the same), which then counts the prefill load that meets it.
    Without ``targets`` the analyzer is told no target and counts raw throughput, so the truth does too:
    the TTFT target is dropped. With ``targets`` both count goodput under it."""
    scenario = load_scenario(name)
    if targets or all(spec.ttft_target_s is None for spec in scenario.pools):
        return scenario
    pools = [spec.model_copy(update={"ttft_target_s": None}) for spec in scenario.pools]
    return scenario.model_copy(update={"pools": pools})


def _store_result(run: SimRun, catalog: Catalog, params: AnalyzerParams | None = None) -> AnalysisResult:
    start = load_scenario(run.scenario).start
    with tempfile.TemporaryDirectory(prefix="pf-accuracy-") as folder:
        jsonl = Path(folder) / f"{run.scenario}.jsonl"
        physics = resolve_physics(run.physics, draw_seed(run.scenario))
        write_jsonl(
            run.scenario, catalog, jsonl, days=run.days, window_s=run.window_s, seed=run.seed, physics=physics
        )
        engine = make_engine(f"sqlite:///{Path(folder) / 'store.db'}")
        upgrade(engine)
        ingest_file(engine, jsonl, sku_resolver=catalog_sku_resolver(), jobs=0)
        end = start + timedelta(days=run.days)
        apply_retention(engine, now=end + timedelta(hours=1), retention_days=3650)
        with engine.connect() as connection:
            data = read_input(connection, start, end + timedelta(microseconds=1))
        result = analyze(data, catalog, params)
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
        "critical_on_demand_limited_segments": s.critical_on_demand_limited_segments,
        "notes": s.notes,
        "physics": s.physics,
        "pools": [{**asdict(p), "ratio": p.ratio, "phantom": p.phantom} for p in s.pools],
        "changes": [asdict(c) for c in s.changes],
    }


def _pm(mean: float | None, spread: float | None) -> str:
    return "-" if mean is None else f"{mean:.3f} ± {spread or 0.0:.3f}"


def _print(rows: list[dict[str, Any]], kinds: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    path = "records -> analyzer" if args.pure else "JSONL -> fleet.ingest -> SQLite -> rollups -> store_io"
    print(
        f"Analyzer accuracy under the {args.physics} physics: {args.days:g} days at "
        f"{args.window_s:g} s windows, seeds 0-{args.seeds - 1} ({path})\n"
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
        "| lost output tokens/s est. / truth | lost requests/s est. / truth "
        "| critical on demand-limited (its hours; truth segment) |"
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
            f"| {sum(r['critical_on_demand_limited'] for r in mine)}; "
            f"{sum(r['critical_on_demand_limited_segments'] for r in mine)} |"
        )
    print(
        f"\n(counts summed over {args.seeds} seeds; lost capacity: the mean over seeds, "
        "time-weighted over the span)"
    )
    for note in sorted({n for r in rows for n in r["notes"]}):
        print(f"- {note}")


def _share(part: int, whole: int) -> str:
    return "-" if whole == 0 else f"{part}/{whole} = {part / whole:.2f}"


def _pool_measures(scores: list[Score]) -> dict[str, Any]:
    totals = PoolTotals()
    analyzer: dict[str, dict[int, Any]] = {}
    truth: dict[str, dict[int, Any]] = {}
    for s in scores:
        totals.add_pools(s.pools)
        totals.add_changes(s.changes)
        analyzer.setdefault(s.scenario, {})[s.seed] = [p.decision for p in s.pools]
        truth.setdefault(s.scenario, {})[s.seed] = s.truth_decision
    agree, runs = decisions_agree(analyzer)
    truth_agree, _ = decisions_agree(truth)
    disagree = sorted(
        name
        for name, by_seed in analyzer.items()
        if len(by_seed) > 1 and len({repr(d) for d in by_seed.values()}) > 1
    )
    return {
        **asdict(totals),
        "decisions_agree": agree,
        "decision_runs": runs,
        "truth_decisions_agree": truth_agree,
        "disagree": disagree,
    }


def _print_pools(m: dict[str, Any], physics: str) -> None:
    ratios = sorted(m["ratios"])
    spread = (
        f"median {ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}" if ratios else "none"
    )
    print(f"\nPool-runs under the {physics} physics ({m['pool_runs']} pool-runs)\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| pool state (supply/demand-limited) right | {_share(m['state_right'], m['state_scored'])} |")
    band = f"[{RATIO_BAND[0]}, {RATIO_BAND[1]}]"
    print(f"| lost output tokens/s within {band} of the truth | {_share(m['in_band'], m['loss_scored'])} |")
    print(f"| ratio reported / truth (pool-runs with a true loss) | {spread} |")
    print(f"| truth inside the reported range | {_share(m['truth_in_range'], m['range_scored'])} |")
    print(
        f"| supply-limited pool-runs with a true loss: loss within {band}; truth inside the range | "
        f"{_share(m['supply_in_band'], m['supply_loss_scored'])}; "
        f"{_share(m['supply_in_range'], m['supply_range_scored'])} |"
    )
    by_basis = m.get("by_basis") or {}
    for basis in sorted(by_basis, key=lambda b: BASES.index(b) if b in BASES else len(BASES)):
        scored, in_band, in_range = by_basis[basis]
        print(
            f"| pool-runs with a true loss whose loss rests on {basis} capacities: in band; truth in range "
            f"| {_share(in_band, scored)}; {_share(in_range, scored)} |"
        )
    print(
        f"| phantom loss: pools with nothing to gain reported losing | "
        f"{_share(m['phantom_reported'], m['phantom_pools'])} "
        f"({m['phantom_tokens']:,.0f} output tok/s summed) |"
    )
    print(
        f"| decisions agree across seeds (analyzer; truth) | "
        f"{_share(m['decisions_agree'], m['decision_runs'])}; "
        f"{_share(m['truth_decisions_agree'], m['decision_runs'])} |"
    )
    print(
        f"| role changes seen / judged | {_share(m['changes_seen'], m['changes'])} / "
        f"{_share(m['changes_judged'], m['changes'])} |"
    )
    if m["disagree"]:
        print(f"\nscenarios whose analyzer decisions differ between seeds: {', '.join(m['disagree'])}")


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
    parser.add_argument(
        "--physics", choices=PHYSICS, default="model", help="the fleet's physics (default model)"
    )
    parser.add_argument(
        "--targets",
        action="store_true",
        help="give the analyzer each pool's TPOT target (the one its simulated engines batch to): capacity "
        "and loss then count goodput",
    )
    args = parser.parse_args(argv)
    catalog = load_catalog()
    names = args.scenarios or sorted(builtin_scenarios())
    began = time.perf_counter()
    scores: list[Score] = []
    for name in names:
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            run = simulate(
                scored_scenario(name, args.targets),
                catalog,
                days=args.days,
                window_s=args.window_s,
                seed=seed,
                physics=args.physics,
            )
            params = operator_params(name, args.targets)
            if args.pure:
                result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog, params)
            else:
                result = _store_result(run, catalog, params)
            scores.append(score(result, run))
            print(f"{name} seed {seed}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = [_row(s) for s in scores]
    kinds = summarise(scores)
    _print(rows, kinds, args)
    measures = _pool_measures(scores)
    _print_pools(measures, args.physics)
    wall = time.perf_counter() - began
    print(f"\nwall time {wall:.0f} s")
    if args.json:
        payload = {
            "days": args.days,
            "window_s": args.window_s,
            "seeds": args.seeds,
            "pure": args.pure,
            "physics": args.physics,
            "targets": args.targets,
            "pool_measures": measures,
        }
        args.json.write_text(json.dumps({**payload, "kinds": kinds, "rows": rows, "wall_s": wall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
