"""``phasefit report --week 2026-W48 [--format html|md] [--out DIR]``: the weekly placement audit.

A plain command function; the CLI registers it with ``app.command()(report)``. The report is built from the
store alone (the analyzer re-run over the week and the week before), stored in the reports table (served by
``GET /v1/reports/{week}`` and the dashboard), and written to ``--out`` when given.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phasefit.cli.output import emit_json, human

if TYPE_CHECKING:
    from analyzer.report.publish import Rendered


def last_complete_week(now: datetime) -> str:
    """The ISO week before the one ``now`` falls in (the default: a CronJob on Monday audits last week)."""
    year, week, _ = (now - timedelta(days=7)).isocalendar()
    return f"{year:04d}-W{week:02d}"


def report(
    week: Annotated[
        str | None,
        typer.Option("--week", help="ISO week to audit, e.g. 2026-W48 (default: last complete week, UTC)."),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="File format written to --out: html (self-contained) or md.")
    ] = "html",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder to write the report into (md: with its chart PNGs next to it).",
            file_okay=False,
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="SQLAlchemy URL of the store (overrides PHASEFIT_DATABASE_URL).",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report's summary figures as JSON on stdout.")
    ] = False,
) -> None:
    """Build the weekly placement audit from the store, store it, and write it to --out.

    The audit re-runs the analyzer over the week's telemetry (and the week before, for the change) and
    gives: lost tokens and their cost at the catalog's prices, the top misplacements with the recommended
    actions and expected gains, the recommended prefill:decode ratio per model pool, drift events, and
    data quality. The same store gives the same report.
    """
    if fmt not in ("html", "md"):
        from phasefit.cli.db import die

        die(f"--format must be html or md, not {fmt!r}")
    chosen = week or last_complete_week(datetime.now(UTC))
    rendered, written = make_report(chosen, database_url=database_url, out=out, fmt=fmt)
    if json_output:
        emit_json({**rendered.summary, "files": [str(p) for p in written]})
        return
    from phasefit.cli.db import say

    s = rendered.summary
    say(
        f"placement audit {chosen}: {s['misplaced_workers']} misplaced worker(s), {s['actions']} action(s), "
        f"placement efficiency {_percent(s['placement_efficiency'])}; stored in the reports table"
    )
    for path in written:
        say(f"wrote {path}")
    if not written:
        human().print(
            "[dim]no --out: the report is in the store (dashboard 'Audit reports', GET /v1/reports)[/]"
        )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def make_report(
    week: str, *, database_url: str | None, out: Path | None, fmt: str = "html"
) -> tuple[Rendered, list[Path]]:
    """Build the audit of ``week`` from the store, store it in the reports table, write it under ``out``."""
    from sqlalchemy.exc import SQLAlchemyError

    from analyzer.report.build import ReportError, build_audit
    from analyzer.report.publish import render, store_report, write_files
    from analyzer.settings import AnalyzerSettings
    from fleet.catalog import CatalogError, load_catalog
    from fleet.store.engine import writing
    from fleet.store.migrate import SchemaNotCurrentError, ensure_schema
    from fleet.store.reports import check_week
    from phasefit import __version__
    from phasefit.cli.db import die, load_settings, open_engine

    now = datetime.now(UTC)
    try:
        check_week(week)
    except ValueError as exc:
        die(str(exc))
    settings = load_settings(database_url)
    engine = open_engine(settings)
    try:
        ensure_schema(engine, create_if_empty=False)
        catalog = load_catalog(settings.catalog_path)
        with engine.connect() as connection:
            audit = build_audit(
                connection, week, catalog, params=AnalyzerSettings().params(), version=__version__
            )
        rendered = render(audit)
        with writing(engine) as connection:
            store_report(connection, week, rendered, created_at=now)
    except (ReportError, SchemaNotCurrentError, CatalogError) as exc:
        die(str(exc))
    except SQLAlchemyError as exc:
        die(f"the store failed: {exc}")
    finally:
        engine.dispose()
    written: list[Path] = []
    if out is not None:
        try:
            written = write_files(rendered, week, out, "md" if fmt == "md" else "html")
        except OSError as exc:
            die(f"cannot write the report into {out}: {exc.strerror or exc}")
    return rendered, written
