"""``phasefit demo``: the main job on the embedded default, end to end.

A simulated week of the demo fleet goes through the same path a real fleet's records take: the source
writes data-contract records, ``fleet.ingest`` stores them, then each later stage (analysis, report,
dashboard) reads the store. Everything lands in one folder (``--out``), with its own SQLite store, so the
demo never touches the user's default store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from phasefit.cli.output import emit_json, fail, human

DEMO_SCENARIO = "demo"


@contextmanager
def _step(timings: dict[str, float], name: str, text: str) -> Iterator[None]:
    console = human()
    began = time.perf_counter()
    with console.status(text):
        yield
    timings[name] = round(time.perf_counter() - began, 2)
    console.print(f"[green]✓[/] {text} ({timings[name]:.1f} s)")


def demo(
    out: Annotated[
        Path, typer.Option("--out", help="Folder for the records, truth, store and report.")
    ] = Path("phasefit-demo"),
    days: Annotated[float, typer.Option("--days", min=0.01, help="Simulated days.")] = 7.0,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Simulation seed.")] = 0,
    window_s: Annotated[
        int | None, typer.Option("--window-s", min=1, help="Window length (default: the scenario's, 30 s).")
    ] = None,
    no_serve: Annotated[
        bool, typer.Option("--no-serve", help="Do not start the dashboard at the end.")
    ] = False,
    port: Annotated[int, typer.Option("--port", help="Dashboard port (loopback only).")] = 8501,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Simulate a week of a 64-GPU H100/H200 fleet, store it, analyse it and print what is misplaced."""
    import orjson

    from collector.sim.scenario import load_scenario
    from collector.sim.source import jsonl_batches
    from collector.sim.truth import compute_truth
    from fleet.catalog import load_catalog
    from fleet.ingest import catalog_sku_resolver, ingest_file
    from fleet.settings import Settings
    from fleet.store import migrate
    from fleet.store.engine import make_engine

    settings = Settings()
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    truth_path = out / "truth.json"
    db_path = out / "phasefit.db"
    database_url = f"sqlite:///{db_path.resolve()}"
    timings: dict[str, float] = {}
    catalog = load_catalog(settings.catalog_path)
    scenario = load_scenario(DEMO_SCENARIO)

    with _step(timings, "simulate", f"simulating {days:g} days of the '{DEMO_SCENARIO}' fleet"):
        partial = records_path.with_name(records_path.name + ".partial")
        with partial.open("wb") as fh:
            for data in jsonl_batches(scenario, catalog, seed=seed, days=days, window_s=window_s, start=None):
                fh.write(data)
        partial.replace(records_path)
        truth = compute_truth(scenario, catalog, seed, days, window_s=window_s, start=None)
        truth_path.write_bytes(orjson.dumps(truth, option=orjson.OPT_INDENT_2) + b"\n")

    for stale in (
        db_path,
        db_path.with_name(db_path.name + "-wal"),
        db_path.with_name(db_path.name + "-shm"),
    ):
        stale.unlink(missing_ok=True)
    engine = make_engine(database_url)
    try:
        with _step(timings, "ingest", f"storing the records in {db_path}"):
            migrate.ensure_schema(engine)
            result = ingest_file(
                engine, records_path, sku_resolver=catalog_sku_resolver(settings.catalog_path)
            )
        summary = _summary(engine, truth, result, timings, database_url)
    finally:
        engine.dispose()

    if json_output:
        emit_json(summary)
    else:
        _print_summary(summary)
    if not no_serve:
        fail("the dashboard is not part of this build yet: run with --no-serve", code=2)


def _summary(
    engine: Any, truth: dict[str, Any], ingest_result: Any, timings: dict[str, float], database_url: str
) -> dict[str, Any]:
    from phasefit.fleet_summary import fleet_summary

    with engine.connect() as connection:
        groups = fleet_summary(connection)
    return {
        "database_url": database_url,
        "records_stored": ingest_result.stored,
        "timings_s": timings,
        "fleet": [group.__dict__ for group in groups],
        "truth": {
            "misplaced_workers": [w["worker_id"] for w in truth["misplaced_workers"]],
            "lost_tokens_per_s": truth["lost_tokens_per_s"],
            "drift_events": truth["drift_events"],
        },
    }


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _print_summary(summary: dict[str, Any]) -> None:
    console = human()
    table = Table(title="Fleet by SKU and role (mean activity over the run)")
    for column in ("SKU", "role", "GPUs", "workers", "tensor active", "DRAM active", "lost GPUs"):
        table.add_column(column, justify="left" if column in ("SKU", "role") else "right")
    for group in summary["fleet"]:
        table.add_row(
            group["sku"],
            group["role"],
            str(group["gpus"]),
            str(group["workers"]),
            _ratio(group["tensor_active"]),
            _ratio(group["dram_active"]),
            str(group["lost_gpus"]),
        )
    console.print(table)
    console.print(f"{summary['records_stored']:,} records stored in {summary['database_url']}")
