"""Did the advice pay off as predicted? The analyzer's advice carried out mid-week in the simulated fleet.

For each base scenario and seed: simulate the first half of the week, analyse it, take the analyzer's
recommended role changes (the latest segment's plan), carry them out at mid-week in the simulator
(``fleetsim.role_changes.with_role_changes``), simulate the whole week and analyse it again. The truth of
the change is the simulator's re-simulation of both placements on the same traffic (``truth["changes"]``).
Printed per run: the gain the analyzer predicted when it advised (mid-week, for the split it recommended), the
the gain it measured afterwards, and the truth's realized gain with its noise; the error is
|predicted / truth - 1|. Goal: median under 15%.

    .venv/bin/python benchmarks/change_outcome_accuracy.py                        # carried-out base, 3 seeds
    .venv/bin/python benchmarks/change_outcome_accuracy.py --seeds 5 --window-s 60 inverted
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.pipeline import analyze, input_from_samples
from fleet.catalog import Catalog, load_catalog
from fleetsim.examine import simulate
from fleetsim.role_changes import keys_by_worker_id, with_role_changes
from fleetsim.scenario import Scenario, load_scenario


def _base(name: str, days: float) -> Scenario:
    """The scenario over ``days`` without changes of its own: the advice is the only change."""
    return load_scenario(name).model_copy(update={"changes": [], "days": days})


def _advice(
    scenario: Scenario, catalog: Catalog, at_hour: float, window_s: float, seed: int
) -> dict[str, Any]:
    """The analyzer's advice after ``at_hour`` hours: role changes and the gain it predicts for them."""
    run = simulate(scenario, catalog, days=at_hour / 24.0, window_s=window_s, seed=seed, truth=False)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog)
    keys = keys_by_worker_id(scenario, catalog)
    changes, predicted = [], 0.0
    for pool in result.pools:
        latest = pool.latest
        if latest is None or latest.placement is None:
            continue
        placement = latest.placement
        predicted += placement.lost_output_tokens()
        for change in placement.changes:
            worker = result.grid.workers[change.row]
            changes.append({"worker": keys[worker], "to_role": change.to_role, "at_hour": at_hour})
    # Workers that join decode first: at no point in between is a pool left without a decoder.
    changes.sort(key=lambda c: (c["to_role"] != "decode", c["worker"]))
    return {"changes": changes, "predicted_output_tokens_per_s": predicted}


def run_one(name: str, catalog: Catalog, *, days: float, window_s: float, seed: int) -> dict[str, Any]:
    base = _base(name, days)
    at_hour = days * 12.0  # mid-range
    advice = _advice(base, catalog, at_hour, window_s, seed)
    row: dict[str, Any] = {"scenario": name, "seed": seed, "changes": len(advice["changes"])}
    row["predicted_output_tokens_per_s"] = round(advice["predicted_output_tokens_per_s"], 1)
    if not advice["changes"]:
        return {**row, "note": "no change advised"}
    carried = with_role_changes(base, advice["changes"])
    run = simulate(carried, catalog, days=days, window_s=window_s, seed=seed)
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog)
    measured = [c for p in result.typed_summary.pools for c in p.changes if c.moved]
    truth = run.truth.get("changes") or []
    realized = sum(float(c["realized_gain_output_tokens_per_s"]) for c in truth)
    noise = max((float(c["noise_tokens_per_s"]) for c in truth), default=0.0)
    row |= {
        "truth_realized_output_tokens_per_s": round(realized, 1),
        "truth_noise_tokens_per_s": round(noise, 1),
        "analyzer_predicted_at_change": [c.predicted_output_tokens_per_s for c in measured],
        "analyzer_measured_output_tokens_per_s": [c.realized_output_tokens_per_s for c in measured],
        "analyzer_verdicts": [c.verdict for c in measured],
    }
    if realized > 0:
        row["error"] = round(abs(advice["predicted_output_tokens_per_s"] / realized - 1.0), 4)
        got = [c.realized_output_tokens_per_s for c in measured if c.realized_output_tokens_per_s is not None]
        if got:
            row["measured_error"] = round(abs(sum(got) / realized - 1.0), 4)
        said = [
            c.predicted_output_tokens_per_s for c in measured if c.predicted_output_tokens_per_s is not None
        ]
        if said:
            row["at_change_error"] = round(abs(sum(said) / realized - 1.0), 4)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "scenarios", nargs="*", default=["carried-out"], help="base scenarios (their own changes dropped)"
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--window-s", type=float, default=120.0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    rows = []
    for name in args.scenarios:
        for seed in range(args.seeds):
            began = time.perf_counter()
            row = run_one(name, catalog, days=args.days, window_s=args.window_s, seed=seed)
            row["seconds"] = round(time.perf_counter() - began, 1)
            rows.append(row)
            if not args.json:
                print(json.dumps(row), flush=True)
    errors = [r["error"] for r in rows if "error" in r]

    def median(key: str) -> float | None:
        values = [r[key] for r in rows if key in r]
        return round(statistics.median(values), 4) if values else None

    summary = {
        "runs": len(rows),
        "scored": len(errors),
        "median_error_advice_vs_truth": median("error"),
        "median_error_at_change_vs_truth": median("at_change_error"),
        "median_error_measured_vs_truth": median("measured_error"),
        "goal": "median error under 0.15",
    }
    print(
        json.dumps(
            {"rows": rows, "summary": summary} if args.json else summary, indent=None if not args.json else 1
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
