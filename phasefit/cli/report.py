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
    from sqlalchemy import Connection

    from analyzer.report.publish import Rendered


def last_complete_week(now: datetime) -> str:
    """The ISO week before the one ``now`` falls in (the default: a CronJob on Monday audits last week)."""
    year, week, _ = (now - timedelta(days=7)).isocalendar()
    return f"{year:04d}-W{week:02d}"


def _week_of(moment: datetime) -> str:
    year, week, _ = moment.isocalendar()
    return f"{year:04d}-W{week:02d}"


def weeks_with_telemetry(connection: Connection) -> list[str]:
    """The ISO weeks (UTC) holding stored telemetry, raw samples or hourly rollups, oldest first."""
    from sqlalchemy import select

    from fleet.store.queries import telemetry_span
    from fleet.store.schema import EngineSample1hRow, EngineSampleRow, GpuSample1hRow, GpuSampleRow, table_of

    first, end = telemetry_span(connection)
    if first is None or end is None:
        return []
    columns = [
        table_of(GpuSample1hRow).c.bucket,
        table_of(EngineSample1hRow).c.bucket,
        table_of(GpuSampleRow).c.ts,
        table_of(EngineSampleRow).c.ts,
    ]
    monday = datetime.fromisocalendar(*first.isocalendar()[:2], 1).replace(tzinfo=UTC)
    weeks: list[str] = []
    while monday < end:
        until = monday + timedelta(days=7)
        for column in columns:
            found = connection.execute(
                select(column).where(column >= monday, column < until).limit(1)
            ).first()
            if found is not None:
                weeks.append(_week_of(monday))
                break
        monday = until
    return weeks


def weeks_phrase(weeks: list[str]) -> str:
    """The weeks a store holds, said briefly: all of them, or how many, the first and the latest."""
    if not weeks:
        return "no telemetry"
    if len(weeks) <= 8:
        return ", ".join(weeks)
    return f"{len(weeks)} weeks from {weeks[0]} to {weeks[-1]} (latest: {', '.join(weeks[-3:])})"


def choose_week(weeks: list[str], now: datetime) -> str | None:
    """The last complete ISO week (ended before ``now``) of ``weeks``; None when none is complete."""
    from analyzer.report.build import week_bounds

    complete = [w for w in weeks if week_bounds(w)[1] <= now]
    return complete[-1] if complete else None


def default_week(database_url: str | None, now: datetime) -> str:
    """No --week: the last complete week that holds telemetry (said when it is not last week), or exit 1
    naming the weeks the store holds."""
    from sqlalchemy.exc import SQLAlchemyError

    from fleet.store.migrate import SchemaNotCurrentError
    from phasefit.cli.db import check_store_schema, die, open_store, say

    _, engine = open_store(database_url)
    try:
        check_store_schema(engine, database_url=database_url)
        with engine.connect() as connection:
            weeks = weeks_with_telemetry(connection)
    except SchemaNotCurrentError as exc:
        die(str(exc))
    except SQLAlchemyError as exc:
        die(f"the store failed: {exc}")
    finally:
        engine.dispose()
    chosen = choose_week(weeks, now)
    if chosen is None:
        current = _week_of(now)
        die(
            f"no --week and no complete week with telemetry to audit (this week, {current}, is not over): "
            f"the store holds {weeks_phrase(weeks)}; give --week"
            + (f" (e.g. --week {weeks[-1]})" if weeks else "")
        )
    if chosen != last_complete_week(now):
        say(
            f"no --week: auditing {chosen}, the last complete week with telemetry (last week, "
            f"{last_complete_week(now)}, has none; the store holds {weeks_phrase(weeks)})"
        )
    return chosen


def report(
    week: Annotated[
        str | None,
        typer.Option(
            "--week",
            help="ISO week to audit, e.g. 2026-W48 (default: the last complete week, UTC, that holds "
            "telemetry).",
        ),
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
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help="Analyse one shard of the week's pools, INDEX/COUNT from 0 (an indexed Job's "
            "JOB_COMPLETION_INDEX/completions), and store its findings and run; no report is built.",
        ),
    ] = None,
    shards: Annotated[
        int | None,
        typer.Option(
            "--shards",
            min=1,
            help="Build the report from the stored runs of the week's COUNT shards (phasefit report "
            "--shard), merged, instead of analysing the week here.",
        ),
    ] = None,
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
    chosen = week or default_week(database_url, datetime.now(UTC))
    if shard is not None:
        if shards is not None:
            raise typer.BadParameter(
                "--shard analyses one shard; --shards merges them: give one", param_hint="--shard"
            )
        analyse_shard(chosen, shard, database_url=database_url, json_output=json_output)
        return
    rendered, written = make_report(chosen, database_url=database_url, out=out, fmt=fmt, shards=shards)
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
    week: str, *, database_url: str | None, out: Path | None, fmt: str = "html", shards: int | None = None
) -> tuple[Rendered, list[Path]]:
    """Build the audit of ``week`` from the store, store it in the reports table, write it under ``out``."""
    from sqlalchemy.exc import SQLAlchemyError

    from analyzer.report.build import ReportError, build_audit
    from analyzer.report.publish import render, store_report, write_files
    from analyzer.settings import AnalyzerSettings
    from fleet.catalog import CatalogError, load_catalog
    from fleet.store.engine import writing
    from fleet.store.migrate import SchemaNotCurrentError
    from fleet.store.reports import check_week
    from phasefit import __version__
    from phasefit.cli.db import check_store_schema, die, open_store

    now = datetime.now(UTC)
    try:
        check_week(week)
    except ValueError as exc:
        die(str(exc))
    settings, engine = open_store(database_url)  # a missing SQLite file is refused, never created
    try:
        check_store_schema(engine, database_url=database_url)
        catalog = load_catalog(settings.catalog_path)
        with engine.connect() as connection:
            analyzer_settings = AnalyzerSettings()
            audit = build_audit(
                connection,
                week,
                catalog,
                params=analyzer_settings.params(),
                version=__version__,
                shards=shards,
                what_ifs=analyzer_settings.report_what_if,
            )
        rendered = render(audit)
        with writing(engine) as connection:
            store_report(connection, week, rendered, created_at=now)
    except ReportError as exc:
        with engine.connect() as connection:
            weeks = weeks_with_telemetry(connection)
        held = "" if week in weeks else f"; the store holds {weeks_phrase(weeks)}"
        die(f"{exc}{held}")
    except (SchemaNotCurrentError, CatalogError) as exc:
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


def analyse_shard(week: str, shard: str, *, database_url: str | None, json_output: bool) -> None:
    """Analyse one shard of the week's pools over the hours the report reads, and store the run."""
    from sqlalchemy.exc import SQLAlchemyError

    from analyzer.pools.selection import PoolSelection, SelectionError
    from analyzer.report.build import analyse_week
    from analyzer.settings import AnalyzerSettings
    from analyzer.sources.store import write_result
    from fleet.catalog import CatalogError, load_catalog
    from fleet.store.engine import writing
    from fleet.store.migrate import SchemaNotCurrentError
    from fleet.store.reports import check_week
    from phasefit.cli.db import check_store_schema, die, open_store, say

    try:
        check_week(week)
        selection = PoolSelection.parse(shard=shard)
    except (ValueError, SelectionError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--shard") from None
    settings, engine = open_store(database_url)  # a missing SQLite file is refused, never created
    try:
        check_store_schema(engine, database_url=database_url)
        catalog = load_catalog(settings.catalog_path)
        with engine.connect() as connection:
            found = analyse_week(connection, week, catalog, AnalyzerSettings().params(), selection)
        if found is None:
            with engine.connect() as connection:
                weeks = weeks_with_telemetry(connection)
            die(f"no telemetry in {week}: nothing to analyse; the store holds {weeks_phrase(weeks)}")
        _, result = found
        with writing(engine) as connection:
            write_result(connection, result, now=datetime.now(UTC), whole_fleet=False)
    except (SchemaNotCurrentError, CatalogError, SelectionError) as exc:
        die(str(exc))
    except SQLAlchemyError as exc:
        die(f"the store failed: {exc}")
    finally:
        engine.dispose()
    pools = [p.pool for p in result.typed_summary.pools]
    if json_output:
        emit_json({"week": week, "shard": shard, "pools": pools, "findings": len(result.findings)})
    else:
        say(f"{week} shard {shard}: {len(pools)} pool(s), {len(result.findings)} finding(s); run stored")
