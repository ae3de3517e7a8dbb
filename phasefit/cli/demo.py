"""``phasefit demo``: the main job on the embedded default, end to end.

A simulated week of the demo fleet goes through the same path a real fleet's records take: the simulator
writes data-contract JSON lines, ``fleet.ingest`` validates and stores them, then each later stage
(analysis, report, dashboard) reads the store. The lines stream from the simulator into the ingest code
with no file in between; ``--records FILE`` writes them to a file first (``.gz`` compresses) and stores
that file, as ``phasefit ingest`` would. Everything lands in one folder (``--out``), with its own SQLite
store, so the demo never touches the user's default store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from phasefit.cli.output import add_row, emit_json, escape, human

if TYPE_CHECKING:
    from analyzer.pipeline import AnalysisResult
    from fleet.ingest import ChunkReader

DEMO_SCENARIO = "demo"
DEMO_FOLDER = Path("phasefit-demo")  # --out's default: `make demo` leaves its store in ./phasefit-demo
DEMO_WINDOW_S = 60


@contextmanager
def _step(timings: dict[str, float], name: str, text: str) -> Iterator[None]:
    console = human()
    began = time.perf_counter()
    with console.status(text):
        yield
    timings[name] = round(time.perf_counter() - began, 2)
    console.print(f"[green]✓[/] {escape(text)} ({timings[name]:.1f} s)")


def demo(
    out: Annotated[
        Path, typer.Option("--out", help="Folder for the records, truth, store and report.")
    ] = DEMO_FOLDER,
    days: Annotated[float, typer.Option("--days", min=0.01, help="Simulated days.")] = 7.0,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Simulation seed.")] = 0,
    window_s: Annotated[
        int,
        typer.Option(
            "--window-s",
            min=1,
            help="Collection window in seconds. One minute keeps the week's store near 240 MB; the "
            "scenario's own 30 s doubles it.",
        ),
    ] = DEMO_WINDOW_S,
    records: Annotated[
        Path | None,
        typer.Option(
            "--records",
            help="Also write the simulated records to this JSONL file (.gz: compressed) and store them from "
            "it, as `phasefit ingest` does; by default they stream into the store with no file.",
        ),
    ] = None,
    no_serve: Annotated[
        bool, typer.Option("--no-serve", help="Do not start the dashboard at the end.")
    ] = False,
    port: Annotated[int, typer.Option("--port", help="Dashboard port (loopback only).")] = 8501,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Simulate a week of a 64-GPU H100/H200 fleet, store it, analyse it and print what is misplaced."""
    import orjson

    from fleet.catalog import load_catalog
    from fleet.ingest import ChunkReader, catalog_sku_resolver, ingest_file, ingest_stream
    from fleet.settings import Settings
    from fleet.store import migrate
    from fleet.store.engine import make_engine, writing
    from fleet.store.queries import sample_time_range
    from fleet.store.retention import floor_hour, refresh_rollups
    from fleetsim.scenario import load_scenario
    from fleetsim.source import jsonl_batches
    from fleetsim.truth import compute_truth
    from phasefit.cli.analyze import analysis_payload, run_store_analysis
    from phasefit.cli.dashboard import dashboard
    from phasefit.cli.report import make_report
    from phasefit.cli.result_output import print_result

    settings = Settings()
    out.mkdir(parents=True, exist_ok=True)
    truth_path = out / "truth.json"
    db_path = out / "phasefit.db"
    database_url = f"sqlite:///{db_path.resolve()}"
    timings: dict[str, float] = {}
    catalog = load_catalog(settings.catalog_path)
    scenario = load_scenario(DEMO_SCENARIO)
    sku_resolver = catalog_sku_resolver(settings.catalog_path)

    def simulated() -> ChunkReader:
        return ChunkReader(
            jsonl_batches(scenario, catalog, seed=seed, days=days, window_s=window_s, start=None)
        )

    for stale in (
        db_path,
        db_path.with_name(db_path.name + "-wal"),
        db_path.with_name(db_path.name + "-shm"),
    ):
        stale.unlink(missing_ok=True)
    engine = make_engine(database_url)
    try:
        migrate.ensure_schema(engine)
        if records is None:
            text = f"simulating {days:g} days of the '{DEMO_SCENARIO}' fleet into {db_path}"
            with _step(timings, "simulate_and_store", text):
                result = ingest_stream(engine, simulated, Path(f"<simulated {DEMO_SCENARIO}>"),
                                       sku_resolver=sku_resolver)  # fmt: skip
        else:
            with _step(timings, "simulate", f"simulating {days:g} days of the '{DEMO_SCENARIO}' fleet"):
                _write_records(records, simulated())
            with _step(timings, "ingest", f"storing {records} in {db_path}"):
                result = ingest_file(engine, records, sku_resolver=sku_resolver)
        with _step(timings, "truth", "re-simulating the best placement for the ground truth"):
            truth = compute_truth(scenario, catalog, seed, days, window_s=window_s, start=None)
            truth_path.write_bytes(orjson.dumps(truth, option=orjson.OPT_INDENT_2) + b"\n")
        with _step(timings, "rollups", "computing the hourly rollups"):
            with engine.connect() as connection:
                span = sample_time_range(connection)
            assert span is not None
            with writing(engine) as connection:
                # Hourly rollups are what analysis, report and dashboard read; `phasefit db prune` makes
                # the per-minute ones, which serve the API only once raw samples are pruned.
                end = floor_hour(span[1]) + timedelta(hours=1)
                refresh_rollups(connection, floor_hour(span[0]), end, resolutions=("1h",))
        summary = _summary(engine, truth, result, timings, database_url)
    finally:
        engine.dispose()

    with _step(timings, "analyze", "analysing: bottlenecks, misplacements, best placement, drift"):
        analysis = run_store_analysis(database_url, None, None)
    summary["analysis"] = analysis_payload(analysis)
    summary["accuracy"] = _accuracy(analysis, truth)
    week = _busiest_week(span[0], span[1])
    with _step(timings, "report", f"building the weekly placement audit for {week}"):
        rendered, written = make_report(week, database_url=database_url, out=out, fmt="html")
    summary["report"] = {"week": week, "files": [str(p) for p in written], "summary": rendered.summary}

    summary["folder"] = {"path": str(out), "bytes": _folder_bytes(out)}
    summary["export"] = export_line(database_url)
    if json_output:
        emit_json(summary)
    else:
        _print_summary(summary)
        print_result(analysis, human())
        _print_accuracy(summary["accuracy"], summary["report"])
    human().print(f"the demo's folder {out} holds {summary['folder']['bytes'] / 1e6:,.0f} MB", markup=False)
    human().print("to point phasefit analyze, plan, report and dashboard at the demo's store:", markup=False)
    human().print(summary["export"], markup=False, soft_wrap=True)  # one line, whole, to copy and paste
    if not no_serve:
        human().print(
            f"[bold]now serving the dashboard[/] at http://127.0.0.1:{port} until you press Ctrl-C "
            f"(`phasefit demo --no-serve` skips it; the store stays in {escape(str(out))})"
        )
        dashboard(port=port, host="127.0.0.1", database_url=database_url, source="store", api_url=None)


def export_line(database_url: str) -> str:
    """The shell line that points later phasefit commands at ``database_url`` (quoted where it must be)."""
    import shlex

    return f"export PHASEFIT_DATABASE_URL={shlex.quote(database_url)}"


def _write_records(path: Path, stream: ChunkReader) -> None:
    """The simulated JSON lines into ``path`` (gzip when it ends in .gz), complete or not at all."""
    import gzip
    import shutil

    partial = path.with_name(path.name + ".partial")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(partial, "wb") as fh:
        shutil.copyfileobj(stream, fh, 4 * 1024 * 1024)
    partial.replace(path)


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _busiest_week(first: datetime, last: datetime) -> str:
    """The ISO week holding the middle of the data (the demo's simulated week may straddle two)."""
    year, week, _ = (first + (last - first) / 2).isocalendar()
    return f"{year:04d}-W{week:02d}"


def _accuracy(analysis: AnalysisResult, truth: dict[str, Any]) -> dict[str, Any]:
    """The analyzer's misplaced workers and lost tokens against the simulator's re-simulated truth."""
    worker_kinds = {
        "decode-on-low-bandwidth", "prefill-on-high-bandwidth", "capacity-on-small-memory",
    }  # fmt: skip
    # A worker misplaced for part of the run and then no longer (its finding resolved) was still found.
    found = {f.worker_id for f in analysis.findings if f.worker_id and f.kind.value in worker_kinds}
    expected = {w["worker_id"] for w in truth["misplaced_workers"]}
    hits = found & expected
    fleet = analysis.typed_summary.fleet
    mean = fleet.lost_mean
    return {
        "misplaced_found": sorted(found),
        "misplaced_truth": sorted(expected),
        "precision": len(hits) / len(found) if found else (1.0 if not expected else 0.0),
        "recall": len(hits) / len(expected) if expected else 1.0,
        # What an SRE acts on first: output tokens and requests; total tokens/s is the secondary figure.
        "lost_output_tokens_per_s": mean.output_tokens_per_s.value,
        "lost_output_tokens_per_s_truth": truth.get("lost_output_tokens_per_s"),
        "lost_requests_per_s": mean.requests_per_s.value,
        "lost_requests_per_s_truth": truth.get("lost_requests_per_s"),
        "lost_tokens_per_s": mean.tokens_per_s.value,
        "lost_tokens_per_s_truth": truth["lost_tokens_per_s"],
        "judged_workers": fleet.judged_workers,
        "unjudged_workers": fleet.unjudged_workers,
    }


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
            "lost_output_tokens_per_s": truth.get("lost_output_tokens_per_s"),
            "lost_requests_per_s": truth.get("lost_requests_per_s"),
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
        add_row(
            table,
            group["sku"],
            group["role"],
            str(group["gpus"]),
            str(group["workers"]),
            _ratio(group["tensor_active"]),
            _ratio(group["dram_active"]),
            str(group["lost_gpus"]),
        )
    console.print(table)
    console.print(f"{summary['records_stored']:,} records stored in {summary['database_url']}", markup=False)


def _print_accuracy(accuracy: dict[str, Any], report: dict[str, Any]) -> None:
    console = human()
    lost, truth = accuracy["lost_tokens_per_s"], accuracy["lost_tokens_per_s_truth"]
    output, output_truth = accuracy["lost_output_tokens_per_s"], accuracy["lost_output_tokens_per_s_truth"]
    requests, requests_truth = accuracy["lost_requests_per_s"], accuracy["lost_requests_per_s_truth"]
    console.print(
        "[bold]against the simulator's ground truth[/] (re-simulated best placement): "
        f"misplaced workers found {len(accuracy['misplaced_found'])}, "
        f"true {len(accuracy['misplaced_truth'])}, "
        f"precision {accuracy['precision']:.2f}, recall {accuracy['recall']:.2f}; over the run, lost output "
        f"tokens/s {_num(output)} estimated against {_num(output_truth)} re-simulated, lost requests/s "
        f"{_num(requests, 2)} against {_num(requests_truth, 2)}; secondary, total tokens/s {_num(lost)} "
        f"against {_num(truth)}"
    )
    for path in report["files"]:
        console.print(f"weekly placement audit {report['week']}: {path}", markup=False)


def _num(value: float | None, digits: int = 0) -> str:
    return "unknown" if value is None else f"{value:,.{digits}f}"
