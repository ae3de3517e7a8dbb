"""How the analyzer's cost grows with the fleet: a week of 256, 1,024 and 4,096 GPUs, time and peak memory.

The fleet is the demo's mix scaled up (per 64 GPUs: 4 H100 nodes and 4 H200 nodes, Llama 3.1 70B FP8 at TP
2), split into pools of 1,024 GPUs (clusters told apart by an explicit node -> cluster mapping, as an
operator configures). Records are simulated, ingested into a throwaway SQLite store through
``fleet.ingest`` and rolled up as ``phasefit db prune`` does; then the analysis (``store_io.read_input``
+ ``pipeline.analyze`` + ``store_io.write_result``) runs in a fresh process so its peak memory
(``ru_maxrss``, interpreter and imports included) is its own.

The analyzer reads hourly rollups, so what it reads for a week of 60-second windows is exactly what it
reads for a week of one-hour windows: 168 rows per GPU. By default the fleet is therefore simulated at
one-hour windows (minutes instead of an hour of ingest for 4,096 GPUs); ``--raw-60s`` also simulates the
smaller sizes at 60-second windows (1,024 GPUs: ten million GPU samples), ingests them, and times the
analysis both before the rollups exist (one SQL GROUP BY over the raw samples) and after.

    .venv/bin/python benchmarks/analyzer_scale.py                     # 256, 1,024, 4,096 GPUs
    .venv/bin/python benchmarks/analyzer_scale.py --gpus 1024 --raw-60s
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POOL_GPUS = 1024
GROUP = [  # per 8 nodes of 8 GPUs (the demo's mix)
    ("H100-SXM", 3, {"prefill": 4}),
    ("H100-SXM", 1, {"prefill": 2, "decode": 2}),
    ("H200-SXM", 2, {"prefill": 3, "decode": 1}),
    ("H200-SXM", 2, {"prefill": 2, "decode": 2}),
]


def scenario_yaml(gpus: int) -> tuple[str, dict[str, str]]:
    """A scenario of ``gpus`` GPUs and the node -> cluster mapping of its pools."""
    pools = max(1, gpus // POOL_GPUS)
    per_pool = gpus // pools
    blocks = per_pool // 64
    lines = [
        f"name: scale-{gpus}",
        f"description: demo mix scaled to {gpus} GPUs in {pools} pool(s)",
        "window_s: 60",
        "days: 7",
        "pools:",
    ]
    for p in range(pools):
        lines += [
            f"  - name: llama-70b-{p}",
            f"    cluster: c{p}",
            "    model: meta-llama/Llama-3.1-70B-Instruct",
            "    precision: fp8",
            "    tp: 2",
            "    serving: disaggregated",
            "    tpot_target_s: 0.08",
            "    max_batch: 1024",
            f"    traffic: {{rate_rps: {170 * blocks}, code_share: 0.2}}",
        ]
    lines.append("nodes:")
    nodes: list[int] = []
    for p in range(pools):
        for sku, count, roles in GROUP:
            workers = ", ".join(f"{role}: {n}" for role, n in roles.items())
            lines.append(
                f"  - {{count: {count * blocks}, sku: {sku}, pool: llama-70b-{p}, workers: {{{workers}}}}}"
            )
            nodes += [p] * (count * blocks)
    width = max(2, len(str(len(nodes) - 1)))
    clusters = {f"node{i:0{width}d}": f"c{p}" for i, p in enumerate(nodes)}
    return "\n".join(lines) + "\n", clusters


def prepare(gpus: int, folder: Path, window_s: float, *, rollups: bool) -> dict[str, Any]:
    """Simulate a week, ingest it and (optionally) roll it up; returns the store URL and timings."""
    from fleet.catalog import load_catalog
    from fleet.ingest import catalog_sku_resolver, ingest_file
    from fleet.store.engine import make_engine
    from fleet.store.migrate import upgrade
    from fleet.store.retention import apply_retention
    from fleetsim.scenario import parse_scenario
    from fleetsim.source import jsonl_batches

    text, clusters = scenario_yaml(gpus)
    sc = parse_scenario(text, f"scale-{gpus}")
    catalog = load_catalog()
    jsonl = folder / "records.jsonl"
    began = time.perf_counter()
    records = 0
    with jsonl.open("wb") as fh:
        for data in jsonl_batches(sc, catalog, days=7.0, window_s=window_s):
            fh.write(data)
            records += data.count(b"\n")
    simulate_s = time.perf_counter() - began
    url = f"sqlite:///{folder / 'store.db'}"
    engine = make_engine(url)
    upgrade(engine)
    began = time.perf_counter()
    ingest_file(engine, jsonl, sku_resolver=catalog_sku_resolver())
    ingest_s = time.perf_counter() - began
    jsonl.unlink()
    rollup_s = None
    if rollups:
        began = time.perf_counter()
        apply_retention(engine, now=sc.start + timedelta(days=7, hours=1), retention_days=3650)
        rollup_s = time.perf_counter() - began
    engine.dispose()
    return {
        "url": url,
        "clusters": clusters,
        "records": records,
        "simulate_s": simulate_s,
        "ingest_s": ingest_s,
        "rollup_s": rollup_s,
        "start": sc.start.isoformat(),
        "end": (sc.start + timedelta(days=7)).isoformat(),
    }


_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    from datetime import UTC, datetime
    began = time.perf_counter()
    from analyzer.pipeline import AnalyzerParams, analyze
    from analyzer.sources.store import read_input, write_result
    from fleet.catalog import load_catalog
    from fleet.store.engine import make_engine, writing
    args = json.loads(sys.argv[1])
    imported = time.perf_counter()
    engine = make_engine(args["url"])
    start, end = datetime.fromisoformat(args["start"]), datetime.fromisoformat(args["end"])
    with engine.connect() as connection:
        data = read_input(connection, start, end)
    read = time.perf_counter()
    result = analyze(
        data, load_catalog(), AnalyzerParams(clusters=args["clusters"]), processes=args.get("processes", 1)
    )
    analysed = time.perf_counter()
    with writing(engine) as connection:
        write_result(connection, result, now=datetime.now(UTC))
    written = time.perf_counter()
    print(json.dumps({
        "import_s": imported - began, "read_s": read - imported, "analyze_s": analysed - read,
        "write_s": written - analysed, "total_s": written - imported,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gpu_bucket_rows": len(data.gpu_buckets["ts"]), "engine_bucket_rows": len(data.engine_buckets["ts"]),
        "findings": len(result.findings), "pools": len(result.pools),
        "lost_tokens_per_s": result.summary["fleet"]["lost"]["tokens_per_s"]["value"],
    }))
    """
)


def analyse(prepared: dict[str, Any]) -> dict[str, Any]:
    """Run the analysis in a fresh interpreter; its timings and peak RSS."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(prepared)],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, nargs="*", default=[256, 1024, 4096])
    parser.add_argument(
        "--raw-60s", action="store_true", help="also simulate at 60 s windows and read raw samples"
    )
    parser.add_argument(
        "--processes", type=int, nargs="*", default=[1], help="analyse with each of these process counts"
    )
    args = parser.parse_args(argv)
    rows = []
    for gpus in args.gpus:
        with tempfile.TemporaryDirectory(prefix="pf-scale-") as folder:
            prepared = prepare(gpus, Path(folder), 3600.0, rollups=True)
            for processes in args.processes:
                figures = analyse({**prepared, "processes": processes})
                rows.append(
                    {
                        "gpus": gpus,
                        "windows": "3600 s (= the hourly rollups of a 60 s week)",
                        "read": f"rollups, {processes} process(es)",
                        **{k: prepared[k] for k in ("records", "simulate_s", "ingest_s", "rollup_s")},
                        **figures,
                    }
                )
                print(
                    f"{gpus} GPUs (rollups, {processes} process(es)): {figures['total_s']:.1f} s, "
                    f"{figures['peak_rss_mb']:.0f} MB",
                    file=sys.stderr,
                )
        if args.raw_60s and gpus <= 1024:
            with tempfile.TemporaryDirectory(prefix="pf-scale-raw-") as folder:
                prepared = prepare(gpus, Path(folder), 60.0, rollups=False)
                raw = analyse(prepared)
                rows.append(
                    {
                        "gpus": gpus,
                        "windows": "60 s",
                        "read": "raw (SQL GROUP BY, no rollups yet)",
                        **{k: prepared[k] for k in ("records", "simulate_s", "ingest_s", "rollup_s")},
                        **raw,
                    }
                )
                from datetime import datetime

                from fleet.store.engine import make_engine
                from fleet.store.retention import apply_retention

                engine = make_engine(prepared["url"])
                began = time.perf_counter()
                apply_retention(
                    engine,
                    now=datetime.fromisoformat(prepared["end"]) + timedelta(hours=1),
                    retention_days=3650,
                )
                prepared["rollup_s"] = time.perf_counter() - began
                engine.dispose()
                rolled = analyse(prepared)
                rows.append(
                    {
                        "gpus": gpus,
                        "windows": "60 s",
                        "read": "rollups",
                        **{k: prepared[k] for k in ("records", "simulate_s", "ingest_s", "rollup_s")},
                        **rolled,
                    }
                )
                print(
                    f"{gpus} GPUs at 60 s: raw {raw['total_s']:.1f} s, rollups {rolled['total_s']:.1f} s",
                    file=sys.stderr,
                )
    print(
        "| GPUs | windows | read from | GPU-hours read | analysis (read + analyse + write) | per 1,000 "
        "GPU-hours | peak RSS | findings |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        per_k = 1000.0 * r["total_s"] / r["gpu_bucket_rows"] if r["gpu_bucket_rows"] else float("nan")
        print(
            f"| {r['gpus']:,} | {r['windows']} | {r['read']} | {r['gpu_bucket_rows']:,} "
            f"| {r['total_s']:.1f} s "
            f"({r['read_s']:.1f} + {r['analyze_s']:.1f} + {r['write_s']:.1f}) | {per_k * 1000:.0f} ms "
            f"| {r['peak_rss_mb']:,.0f} MB | {r['findings']} |"
        )
    print("\nPreparation (not part of the analysis):")
    for r in rows:
        rollup = "-" if r["rollup_s"] is None else f"{r['rollup_s']:.0f} s"
        print(
            f"- {r['gpus']:,} GPUs, {r['windows']}: {r['records']:,} records, "
            f"simulate {r['simulate_s']:.0f} s, "
            f"ingest {r['ingest_s']:.0f} s, rollups {rollup}"
        )
    goal = [r for r in rows if r["gpus"] == 1024 and r["read"] == "rollups"]
    if goal:
        r = goal[-1]
        ok = r["total_s"] < 60 and r["peak_rss_mb"] < 4096
        print(
            f"\nGoal (1,024 GPUs, a week, < 60 s and < 4 GB): {r['total_s']:.1f} s, "
            f"{r['peak_rss_mb']:,.0f} MB {'PASS' if ok else 'FAIL'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
