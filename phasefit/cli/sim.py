"""``phasefit sim scenarios|run``: the simulated fleet (records a collector would send, and ground truth).

Wire it with ``app.add_typer(sim.app, name="sim")``. Heavy imports (numpy, the simulator) happen inside
the commands so ``phasefit --help`` stays fast.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from phasefit.cli.output import emit_json, escape, fail, human

app = typer.Typer(
    help="The simulated fleet: scenarios with ground truth, run far faster than real time.",
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of text on stderr.")]


@app.command("scenarios")
def scenarios(json_output: JsonFlag = False) -> None:
    """List the built-in scenarios, one line each."""
    from fleetsim.scenario import ScenarioError, builtin_scenarios, load_scenario

    rows: list[dict[str, Any]] = []
    for name in builtin_scenarios():
        try:
            sc = load_scenario(name)
        except ScenarioError as exc:
            fail(str(exc))
            return
        gpus = sum(group.count * group.gpus for group in sc.nodes)
        skus = sorted({group.sku for group in sc.nodes})
        rows.append(
            {
                "name": sc.name,
                "description": " ".join(sc.description.split()),
                "intent": " ".join(sc.intent.split()),
                "gpus": gpus,
                "skus": skus,
                "pools": [p.pool_id for p in sc.pools],
                "window_s": sc.window_s,
                "days": sc.days,
            }
        )
    if json_output:
        emit_json(rows)
        return
    console = human()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        console.print(
            f"{r['name']:<{width}}  {r['gpus']:>4} GPUs  {r['description']}", soft_wrap=True, markup=False
        )


def _atomic_target(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


@app.command("run")
def run(
    scenario: Annotated[
        str, typer.Argument(help="A built-in scenario name (see 'sim scenarios') or a YAML file.")
    ],
    *,
    out: Annotated[
        Path, typer.Option("--out", help="JSON-lines file of gpu_sample and engine_sample records.")
    ],
    days: Annotated[
        float | None, typer.Option("--days", min=0.0001, help="Simulated days (default: the scenario's).")
    ] = None,
    truth: Annotated[
        Path | None,
        typer.Option("--truth", help="Write the ground truth (re-simulated best placement) here."),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Random seed: the same seed, the same bytes.")
    ] = 0,
    window_s: Annotated[
        int | None,
        typer.Option("--window-s", min=1, max=3600, help="Window length (default: the scenario's)."),
    ] = None,
    start: Annotated[
        datetime | None,
        typer.Option(
            "--start", help="Simulated start, UTC (default: the scenario's).", formats=["%Y-%m-%dT%H:%M:%S"]
        ),
    ] = None,
    physics: Annotated[
        str,
        typer.Option(
            "--physics",
            help="Step-time physics: 'model' (the simulator's formulas), 'measured' (NVIDIA AI "
            "Configurator's kernel-measured step times, data/measured) or 'perturbed' (the formulas "
            "with a per-seed draw of efficiencies, the H200 advantage, the concurrency cap and the "
            "KV memory share). The truth names it.",
        ),
    ] = "model",
    physics_seed: Annotated[
        int,
        typer.Option(
            "--physics-seed", min=0, help="Seed of the perturbed physics' draw (with the scenario's name)."
        ),
    ] = 0,
    json_output: JsonFlag = False,
) -> None:
    """Simulate SCENARIO and write its records (ingestible by 'phasefit ingest') and its ground truth."""
    from datetime import UTC

    import orjson

    from fleet.catalog import CatalogError, load_catalog
    from fleet.settings import Settings
    from fleetsim.fleet_sim import FleetSimulation
    from fleetsim.physics_choice import draw_seed, resolve_physics
    from fleetsim.scenario import ScenarioError, load_scenario
    from fleetsim.source import jsonl_batches
    from fleetsim.truth import compute_truth

    began = time.perf_counter()
    try:
        sc = load_scenario(scenario)
        catalog = load_catalog(Settings().catalog_path)
        begin = start.replace(tzinfo=UTC) if start is not None else None
        chosen = resolve_physics(physics, draw_seed(sc.name, physics_seed))
        sim = FleetSimulation(sc, catalog, seed, window_s=window_s, start=begin, physics=chosen)
    except (ScenarioError, CatalogError, ValueError, FileNotFoundError) as exc:
        fail(str(exc), code=2)
        return
    n_days = sc.days if days is None else days
    n_windows = sim.windows_in(n_days)
    partial = _atomic_target(out)
    written = lines = 0
    try:
        with partial.open("wb") as fh:
            batches = jsonl_batches(
                sc, catalog, seed=seed, days=n_days, window_s=window_s, start=begin, physics=chosen
            )
            for data in batches:
                fh.write(data)
                written += len(data)
                lines += data.count(b"\n")
        partial.replace(out)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
        return
    simulated_s = time.perf_counter() - began
    summary: dict[str, Any] = {
        "scenario": sc.name,
        "seed": seed,
        "physics": chosen.name,
        "days": n_days,
        "window_s": sim.window_s,
        "gpus": len(sim.layout.gpus),
        "workers": len(sim.layout.workers),
        "windows": n_windows,
        "records": lines,
        "bytes": written,
        "out": str(out),
        "simulate_and_write_s": round(simulated_s, 2),
    }
    if truth is not None:
        truth_began = time.perf_counter()
        report = compute_truth(sc, catalog, seed, n_days, window_s=window_s, start=begin, physics=chosen)
        target = _atomic_target(truth)
        try:
            target.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
            target.replace(truth)
        except OSError as exc:
            fail(f"cannot write {truth}: {exc.strerror or exc}")
            return
        summary.update(
            truth=str(truth),
            truth_s=round(time.perf_counter() - truth_began, 2),
            lost_tokens_per_s=report["lost_tokens_per_s"],
            misplaced_workers=len(report["misplaced_workers"]),
        )
    if json_output:
        emit_json(summary)
        return
    console = human()
    console.print(
        f"[bold]{escape(sc.name)}[/]: "
        + escape(
            f"{summary['gpus']} GPUs, {summary['workers']} workers, {n_days:g} days of "
            f"{sim.window_s:g}-s windows, {chosen.name} physics -> {lines:,} records "
            f"({written / 1e6:,.0f} MB) in {out} ({simulated_s:.1f} s)"
        )
    )
    if truth is not None:
        console.print(
            f"ground truth -> {truth}: {summary['misplaced_workers']} misplaced workers, "
            f"{summary['lost_tokens_per_s']:,.0f} tokens/s lost (time-weighted)",
            markup=False,
        )
