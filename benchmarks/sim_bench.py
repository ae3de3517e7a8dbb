"""Simulator speed and fidelity figures.

    .venv/bin/python benchmarks/sim_bench.py            # everything (writes ~8 GB of JSONL to a temp dir)
    .venv/bin/python benchmarks/sim_bench.py --quick    # the demo week and the published tables only

Prints:
  1. the demo fleet (64 GPUs, 30-s windows) for a simulated week, simulated and written as JSON lines
     (goal: under 30 s on the 2-core machine), then its ground truth (re-simulation);
  2. the same records written the naive way (a dict and an orjson.dumps per record), on one day: the
     baseline the fast writer is measured against;
  3. 1,024 GPUs (the demo fleet scaled 16x) at 60-s windows for a week, about 10 M GPU samples, written
     too (goal: under 3 minutes, peak memory under 2 GB), in a child process so its peak RSS is its own;
  4. the simulator at the TensorRT-LLM table settings against data/benchmarks/published.csv, per row.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from fleet.catalog import load_catalog
from fleetsim.calibration import format_tables, max_throughput_rows, ratio_rows
from fleetsim.fleet_sim import FleetSimulation
from fleetsim.records import RecordBuilder
from fleetsim.scaling import scaled
from fleetsim.scenario import Scenario, load_scenario
from fleetsim.truth import compute_truth

DATA = Path(__file__).resolve().parents[1] / "data"
SLICE_RECORDS = 60_000


def simulate_to_file(
    scenario: Scenario, days: float, window_s: int, out: Path, seed: int = 0
) -> dict[str, float]:
    """Simulate and write JSON lines; the figures of the run."""
    began = time.perf_counter()
    sim = FleetSimulation(scenario, load_catalog(), seed, window_s=window_s)
    builder = RecordBuilder(sim)
    step = max(1, SLICE_RECORDS // (len(sim.layout.gpus) + len(sim.layout.workers)))
    gpu_samples = engine_samples = written = 0
    simulate_s = 0.0
    with out.open("wb") as fh:
        chunks = sim.chunks(sim.windows_in(days))
        while True:
            t = time.perf_counter()
            chunk = next(chunks, None)
            simulate_s += time.perf_counter() - t
            if chunk is None:
                break
            gpu_samples += int(chunk.gpu.present.sum())
            engine_samples += int(chunk.engine.present.sum())
            for first in range(0, len(chunk.window_end_epoch), step):
                data = builder.chunk_jsonl(chunk, slice(first, first + step))
                fh.write(data)
                written += len(data)
    total = time.perf_counter() - began
    return {
        "gpus": len(sim.layout.gpus),
        "gpu_samples": gpu_samples,
        "engine_samples": engine_samples,
        "bytes": written,
        "simulate_s": simulate_s,
        "total_s": total,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def naive_baseline(scenario: Scenario, days: float, window_s: int, out: Path) -> dict[str, float]:
    """The same records as dicts, one orjson.dumps each (the obvious way)."""
    began = time.perf_counter()
    sim = FleetSimulation(scenario, load_catalog(), 0, window_s=window_s)
    builder = RecordBuilder(sim)
    records = 0
    with out.open("wb") as fh:
        for chunk in sim.chunks(sim.windows_in(days)):
            for first in range(0, len(chunk.window_end_epoch), 200):
                for record in builder.chunk_dicts(chunk, slice(first, first + 200)):
                    fh.write(orjson.dumps(record) + b"\n")
                    records += 1
    return {"records": records, "total_s": time.perf_counter() - began}


def child(args: argparse.Namespace) -> None:
    """Run one case in this process and print its figures as JSON (for the parent)."""
    scenario = scaled("demo", args.factor) if args.factor > 1 else load_scenario("demo")
    out = Path(args.out)
    figures = simulate_to_file(scenario, args.days, args.window_s, out)
    out.unlink()
    print(json.dumps(figures))


def run_child(factor: int, days: float, window_s: int, folder: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", "--factor", str(factor), "--days", str(days)]
    cmd += ["--window-s", str(window_s), "--out", str(folder / f"x{factor}.jsonl")]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def report(title: str, figures: dict[str, float], goal_s: float) -> None:
    rate = figures["gpu_samples"] / figures["total_s"]
    verdict = "met" if figures["total_s"] < goal_s else "MISSED"
    print(
        f"{title}: {figures['gpus']:.0f} GPUs, {figures['gpu_samples']:,.0f} GPU"
        f" + {figures['engine_samples']:,.0f} engine samples, {figures['bytes'] / 1e9:.2f} GB JSONL"
        f" in {figures['total_s']:.1f} s (simulation {figures['simulate_s']:.1f} s;"
        f" {rate:,.0f} GPU samples/s; peak RSS {figures['peak_rss_mb']:,.0f} MB;"
        f" goal < {goal_s:.0f} s: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="skip the 1,024-GPU week")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--factor", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--days", type=float, default=7.0, help=argparse.SUPPRESS)
    parser.add_argument("--window-s", type=int, default=30, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="sim-bench-") as tmp:
        folder = Path(tmp)
        demo = run_child(1, 7.0, 30, folder)
        report("demo week (30-s windows)", demo, 30.0)
        began = time.perf_counter()
        truth = compute_truth(load_scenario("demo"), load_catalog(), 0, 7.0)
        print(
            "demo ground truth (3 passes of re-simulation + placement search):"
            f" {time.perf_counter() - began:.1f} s; {len(truth['misplaced_workers'])} misplaced workers,"
            f" {truth['lost_tokens_per_s']:,.0f} tokens/s lost"
        )
        base = naive_baseline(load_scenario("demo"), 1.0, 30, folder / "naive.jsonl")
        fast = simulate_to_file(load_scenario("demo"), 1.0, 30, folder / "fast.jsonl")
        print(
            f"baseline, one demo day: dict + orjson.dumps per record {base['total_s']:.1f} s"
            f" ({base['records'] / base['total_s']:,.0f} records/s); columnar writer {fast['total_s']:.1f} s"
            f" ({(fast['gpu_samples'] + fast['engine_samples']) / fast['total_s']:,.0f} records/s):"
            f" {base['total_s'] / fast['total_s']:.1f}x faster"
        )
        if not args.quick:
            big = run_child(16, 7.0, 60, folder)
            report("1,024 GPUs, week (60-s windows)", big, 180.0)
            print(f"  memory goal < 2,048 MB: {'met' if big['peak_rss_mb'] < 2048 else 'MISSED'}")
    print()
    published = DATA / "benchmarks" / "published.csv"
    with published.open(newline="") as fh:
        rows = max_throughput_rows(csv.DictReader(fh), load_catalog())
    print(f"simulator vs {published.name} (TensorRT-LLM v0.14 tables, max throughput):")
    print(format_tables(rows, ratio_rows(rows)))


if __name__ == "__main__":
    main()
