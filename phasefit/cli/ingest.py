"""``phasefit ingest FILE.jsonl [FILE...]``: store data-contract records from JSONL files.

A plain command function; the CLI registers it with ``app.command()(ingest)``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.db import DatabaseUrl, JsonFlag, die, load_settings, open_engine, store_label
from phasefit.cli.output import emit_json, human

if TYPE_CHECKING:
    from fleet.ingest import IngestError, IngestResult
    from fleet.ingest_blocks import ParsedBlocks
    from fleet.settings import Settings


def ingest(  # the help text is ingest.__doc__, set below
    files: Annotated[
        list[Path],
        typer.Argument(
            exists=True, dir_okay=False, readable=True, show_default=False,
            help="JSONL files, one record per line (.jsonl, or gzip-compressed .jsonl.gz).",
        ),
    ],
    database_url: DatabaseUrl = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=0, show_default=False,
                     help="Parsing processes (0: in this process; default: one per CPU, up to 4)."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:  # fmt: skip
    settings = load_settings(database_url)
    with _parsing_early(files[0], settings.database_url, jobs) as first_parsed:
        _ingest_files(files, settings, jobs, json_output, first_parsed)


def _ingest_files(
    files: list[Path],
    settings: Settings,
    jobs: int | None,
    json_output: bool,
    first_parsed: ParsedBlocks | None,
) -> None:
    from concurrent.futures.process import BrokenProcessPool
    from gzip import BadGzipFile
    from zlib import error as zlib_error  # a corrupt .gz body (BadGzipFile is for its header)

    from sqlalchemy.exc import SQLAlchemyError

    from fleet.catalog import CatalogError
    from fleet.ingest import IngestError, catalog_sku_resolver, ingest_file
    from fleet.store import migrate

    engine = open_engine(settings)
    console = human()
    reports: list[dict[str, Any]] = []
    try:
        try:
            before = migrate.schema_status(engine)
            migrate.ensure_schema(engine)
            resolver = catalog_sku_resolver(settings.catalog_path)
        except migrate.SchemaNotCurrentError as exc:
            die(str(exc))
        except (SQLAlchemyError, CatalogError) as exc:
            die(f"cannot use the store at {store_label(engine)}: {exc}")
        if before.state is migrate.SchemaState.EMPTY:
            console.print(
                f"created the phasefit schema (revision {before.head}) in {store_label(engine)}", markup=False
            )
        db_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        for index, path in enumerate(files):
            try:
                with _progress(path) as on_progress:
                    result = ingest_file(
                        engine, path, sku_resolver=resolver, jobs=jobs, on_progress=on_progress,
                        parsed=first_parsed if index == 0 else None,
                    )  # fmt: skip
            except IngestError as exc:
                reports.append(_failed(path, exc))
            except (
                SQLAlchemyError,
                db_error,
                OSError,
                EOFError,
                BadGzipFile,
                zlib_error,
                BrokenProcessPool,
            ) as exc:
                console.print(f"error: {path}: {exc}", markup=False, soft_wrap=True)
                console.print(f"{path}: nothing stored", markup=False, soft_wrap=True)
                reports.append({"path": str(path), "status": "failed", "errors": [{"message": str(exc)}]})
            else:
                console.print(_summary(result), markup=False, soft_wrap=True)
                reports.append(_stored(result))
    finally:
        engine.dispose()
    if json_output:
        emit_json({
            "files": reports,
            "stored": sum(report.get("stored", 0) for report in reports),
            "duplicates": sum(report.get("duplicates", 0) for report in reports),
            "failed_files": sum(report["status"] == "failed" for report in reports),
        })  # fmt: skip
    if any(report["status"] == "failed" for report in reports):
        raise typer.Exit(1)


# The help text is kept out of the docstring so that each paragraph is one line: Typer's rich help keeps a
# docstring's line breaks, and --help should wrap to the terminal instead.
ingest.__doc__ = "\n\n".join([
    'Store gpu_sample and engine_sample records from JSONL files (one JSON object per line, with '
    '"kind").',
    "Every line is checked strictly against the data contract: malformed JSON, a missing required "
    "field, an unknown field, a ratio outside 0..1, a negative count or a timestamp without a time zone "
    "is an error.",
    "Each file is all or nothing: if any line is bad, NOTHING from that file is stored, the error names "
    "the file, line and field, and the command exits with status 1 (the other files are still ingested).",
    "Ingesting a file again stores nothing twice. An empty store is created on first use; a store at an "
    "older schema revision is refused until `phasefit db upgrade` is run.",
])  # fmt: skip


@contextmanager
def _parsing_early(path: Path, database_url: str, jobs: int | None) -> Iterator[ParsedBlocks | None]:
    """The first file's parsing processes, started before the store's modules are imported and its schema
    checked, so the first blocks are parsed meanwhile (that start-up was ~0.5 s of a 200,000-record load
    on 2 cores). Imports no SQLAlchemy. The store's kind is read from the URL's scheme; were it misread,
    ingest parses the file again for the store it opens."""
    from fleet.ingest_blocks import ParsedBlocks, default_jobs, file_source
    from fleet.store.rows import time_encoding_of

    dialect = database_url.split(":", 1)[0].split("+", 1)[0]
    parsed = ParsedBlocks(
        file_source(path), time_encoding_of(dialect), default_jobs() if jobs is None else jobs
    )
    try:
        parsed.start()
    except Exception:  # the load proper opens the file again, meets the error and reports it
        parsed.close()
        yield None
        return
    with parsed:
        yield parsed


@contextmanager
def _progress(path: Path) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise (a summary line follows)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    total = None if path.suffix == ".gz" else path.stat().st_size  # gzip: uncompressed size unknown
    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=human(), transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task(path.name, total=total)
        yield lambda done: progress.update(task, completed=done)


def _summary(result: IngestResult) -> str:
    rate = result.records / result.seconds if result.seconds > 0 else 0.0
    return (
        f"{result.path}: {result.records:,} records ({result.gpu_samples:,} gpu, {result.engine_samples:,} "
        f"engine): {result.stored:,} stored, {result.duplicates:,} already stored, in {result.seconds:.1f} s "
        f"({rate:,.0f} records/s)"
    )


def _stored(result: IngestResult) -> dict[str, Any]:
    return {
        "path": str(result.path), "status": "stored", "records": result.records,
        "gpu_samples": result.gpu_samples, "engine_samples": result.engine_samples, "stored": result.stored,
        "duplicates": result.duplicates, "seconds": round(result.seconds, 3),
    }  # fmt: skip


def _failed(path: Path, exc: IngestError) -> dict[str, Any]:
    console = human()
    for error in exc.errors:
        console.print(f"error: {path}:{error}", markup=False, soft_wrap=True)
    tail = "; later lines were not checked" if exc.more else ""
    console.print(f"{path}: nothing stored (all or nothing per file){tail}", markup=False, soft_wrap=True)
    return {
        "path": str(path), "status": "failed",
        "errors": [{"line": e.line, "field": e.field, "message": e.message} for e in exc.errors],
    }  # fmt: skip
