"""``phasefit analyze``: read the store, find misplaced workers and lost tokens, store the findings.

A plain command function; the lead registers it with ``app.command()(analyze)``. Human output (rich tables)
goes to stderr, ``--json`` prints ``{"summary": {...}, "findings": [...], "warnings": [...]}`` on stdout
(``warnings``: every warning printed on stderr, the pools' notes included): an
:class:`analyzer.results.summary.AnalyzeOutput`, whose JSON schema is ``docs/summary.schema.json``.

What it prints for people: :mod:`phasefit.cli.result_output` (the fleet, pools, findings),
:mod:`phasefit.cli.findings_table`, and :mod:`phasefit.cli.gpu_view_output` for a fleet with no engine.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.gpu_view_output import gpu_view_payload, print_gpu_view
from phasefit.cli.output import emit_json, human
from phasefit.cli.result_output import print_result

if TYPE_CHECKING:
    from analyzer.pipeline import AnalysisInput, AnalysisResult
    from analyzer.pools.selection import PoolSelection
    from analyzer.telemetry.gpu_view import GpuView
    from fleet.contract import Finding

DEFAULT_SPAN = timedelta(days=7)
FUTURE_SLACK = timedelta(hours=1)  # how far past now the default range may reach (clock skew)


def parse_time(text: str, *, option: str) -> datetime:
    """An ISO 8601 date or date-time (UTC when it names no zone), or ``now``."""
    if text.strip().lower() == "now":
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 time (e.g. 2024-06-03 or 2024-06-03T12:00:00Z)", param_hint=option
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def finding_payload(finding: Finding) -> dict[str, Any]:
    """One finding as ``--json`` prints it (the contract's fields, times in RFC 3339)."""
    payload: dict[str, Any] = finding.model_dump(mode="json")
    return payload


def analysis_payload(result: AnalysisResult) -> dict[str, Any]:
    """What ``--json`` prints (:class:`analyzer.results.summary.AnalyzeOutput`, as JSON data)."""
    from analyzer.results.summary import AnalyzeOutput

    summary = result.typed_summary
    return AnalyzeOutput(summary=summary, findings=result.findings, warnings=summary.warnings).to_json_dict()


# The range and store options, shared by the commands that analyse the store (analyze, plan).
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from", help="Start of the range (ISO 8601, UTC if no zone); default: a week before --to."
    ),
]
ToOption = Annotated[
    str | None,
    typer.Option("--to", help="End of the range (ISO 8601 or 'now'); default: just after the latest sample."),
]
DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL of the store (overrides PHASEFIT_DATABASE_URL).",
        show_default=False,
    ),
]


def analyze(
    from_: FromOption = None,
    to: ToOption = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON on stdout instead of tables on stderr.")
    ] = False,
    database_url: DatabaseUrlOption = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Zero-agent mode: read dcgm-exporter and vLLM/SGLang series from this Prometheus (its root "
            "URL) instead of the store; nothing is written.",
            show_default=False,
        ),
    ] = None,
    step_s: Annotated[
        float, typer.Option("--step", min=1.0, help="With --prometheus: query step in seconds.")
    ] = 300.0,
    role_label: Annotated[
        str | None,
        typer.Option(
            "--role-label", help="With --prometheus: the label carrying the phase role (e.g. role)."
        ),
    ] = None,
    pool: Annotated[
        list[str] | None,
        typer.Option(
            "--pool",
            help="Analyse only this pool (its key, e.g. east/llama-70b; repeatable). Findings of other pools "
            "are left as they are.",
        ),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help="Analyse one shard of the pools, INDEX/COUNT from 0 (a Kubernetes indexed Job's "
            "JOB_COMPLETION_INDEX/completions): shards balance GPUs and together cover every pool once.",
        ),
    ] = None,
    processes: Annotated[
        int, typer.Option("--processes", min=1, max=64, help="Analyse the pools in this many processes.")
    ] = 1,
) -> None:
    """Analyse the store (or, with --prometheus, a Prometheus): misplaced workers, lost tokens/s, the best
    placement and recommended ratios."""
    from analyzer.pools.selection import PoolSelection, SelectionError

    since = parse_time(from_, option="--from") if from_ else None
    until = parse_time(to, option="--to") if to else None
    try:
        selection = PoolSelection.parse(pool or (), shard)
    except SelectionError as exc:
        raise typer.BadParameter(str(exc), param_hint="--shard") from None
    try:
        if prometheus is not None:
            result = run_prometheus_analysis(
                prometheus,
                since,
                until,
                step_s=step_s,
                role_label=role_label,
                selection=selection,
                processes=processes,
                gpu_view=True,
            )
        else:
            result = run_store_analysis(
                database_url, since, until, selection=selection, processes=processes, gpu_view=True
            )
    except GpuOnlyFleet as only:
        if json_output:
            emit_json(gpu_view_payload(only.view))
        else:
            print_gpu_view(only.view, human())
        return
    if json_output:
        emit_json(analysis_payload(result))
    else:
        print_result(result, human())


def run_prometheus_analysis(
    url: str,
    since: datetime | None,
    until: datetime | None,
    *,
    step_s: float,
    role_label: str | None,
    selection: PoolSelection | None = None,
    processes: int = 1,
    gpu_view: bool = False,
) -> AnalysisResult:
    """Zero-agent mode: read [since, until) through Prometheus's query_range API and analyse it.

    ``gpu_view``: where no engine reported but GPUs did, raise :class:`GpuOnlyFleet` with the GPU view
    instead of exiting 1."""
    from analyzer.pipeline import analyze as run_pipeline
    from analyzer.pools.selection import SelectionError
    from analyzer.settings import AnalyzerSettings
    from analyzer.sources.prometheus.client import PrometheusError, read_fleet
    from analyzer.sources.prometheus.inventory import analysis_input
    from fleet.catalog import CatalogError, load_catalog
    from fleet.settings import Settings
    from phasefit.cli.db import die

    until = until or datetime.now(UTC)
    since = since or until - DEFAULT_SPAN
    if since >= until:
        die(f"--from {since.isoformat()} is not before --to {until.isoformat()}")
    analyzer_settings = AnalyzerSettings()
    try:
        catalog = load_catalog(Settings().catalog_path)
        fleet = read_fleet(
            url,
            since,
            until,
            step_s,
            role_label=role_label,
            gpu_catalog=catalog.gpus,
            cluster_label=analyzer_settings.cluster_label,
            deployment_labels=analyzer_settings.deployment_labels,
            limits=analyzer_settings.query_limits(),
        )
    except (PrometheusError, CatalogError) as exc:
        die(str(exc))
    data = analysis_input(fleet)
    if not data.inventory.workers:
        from analyzer.sources.prometheus.inventory import gpu_view_buckets

        buckets = gpu_view_buckets(fleet, bucket_s=data.bucket_s)
        if gpu_view and len(buckets["ts"]):  # the GPU view carries and prints the read's notes itself
            raise GpuOnlyFleet(
                _gpu_view(data, buckets, analyzer_settings.params().bottleneck, list(fleet.notes))
            )
    console = human()
    for note in fleet.notes:
        console.print(note, markup=False)
    if not data.inventory.workers:
        die(
            f"Prometheus at {url} shows no serving worker"
            + (" (only GPUs)" if len(buckets["ts"]) else " and no GPU")
            + f" between {since.isoformat()} and {until.isoformat()}"
        )
    try:
        return run_pipeline(
            data,
            catalog,
            analyzer_settings.params(),
            extra_warnings=list(fleet.notes),
            selection=selection,
            processes=processes,
        )
    except SelectionError as exc:
        die(str(exc))


def run_store_analysis(
    database_url: str | None,
    since: datetime | None,
    until: datetime | None,
    *,
    selection: PoolSelection | None = None,
    processes: int = 1,
    gpu_view: bool = False,
) -> AnalysisResult:
    """Read [since, until) from the store, analyse it and store the findings and summary.

    Engines the collector left without GPUs are joined to them by pod where dcgm-exporter's series named it
    (:func:`analyzer.sources.store.join_by_pod`); a join that still fails is a warning naming the engine.
    ``gpu_view``: where no engine reported but GPUs did, raise :class:`GpuOnlyFleet` with the GPU view
    (nothing is written) instead of exiting 1."""
    from sqlalchemy.exc import SQLAlchemyError

    from analyzer.pipeline import analyze as run_pipeline
    from analyzer.pools.selection import SelectionError
    from analyzer.settings import AnalyzerSettings
    from analyzer.sources.store import (
        join_by_pod,
        profiling_warnings,
        read_input,
        rename_gpu_owners,
        write_result,
    )
    from fleet.catalog import CatalogError, load_catalog
    from fleet.store.engine import writing
    from fleet.store.migrate import SchemaNotCurrentError
    from fleet.store.queries import sample_time_range
    from phasefit.cli.db import POINT_AT_A_STORE, check_store_schema, die, open_store, store_label

    settings, engine = open_store(database_url)  # a missing SQLite file is refused, never created
    try:
        check_store_schema(engine, database_url=database_url)
        catalog = load_catalog(settings.catalog_path)
        params = AnalyzerSettings().params()
        with engine.connect() as connection:
            if until is None or since is None:
                # A sample stamped in the future (a skewed clock) must not move the range past the data.
                span = sample_time_range(connection, before=datetime.now(UTC) + FUTURE_SLACK)
                if span is None:
                    die(f"the store at {store_label(engine)} holds no samples yet: {POINT_AT_A_STORE}")
                assert span is not None
                until = until or span[1] + timedelta(microseconds=1)
                since = since or max(span[0], until - DEFAULT_SPAN)
            if since >= until:
                die(f"--from {since.isoformat()} is not before --to {until.isoformat()}")
            data = read_input(connection, since, until)
        unjoined = data
        joined, join_notes = join_by_pod(data.inventory)
        data = rename_gpu_owners(data, joined)
        notes = [*join_notes, *profiling_warnings(data), *_retention_notes(settings, since, data)]
        if not data.inventory.workers and gpu_view and data.gpu_bucket_count:
            from analyzer.sources.store_gpu_view import gpu_view_from

            only = gpu_view_from(unjoined, params.bottleneck).view  # what the service and dashboard show
            assert only is not None
            raise GpuOnlyFleet(only)
        console = human()
        for note in notes:  # on stderr, as zero-agent mode prints its read's notes; also in --json warnings
            console.print(note, markup=False)
        if not data.inventory.workers:
            die(
                "no serving worker"
                + (" (only GPU samples)" if len(data.gpu_buckets["ts"]) else " and no GPU sample")
                + f" reported in the range analysed, {_span_text(data)}"
            )
        result = run_pipeline(
            data, catalog, params, extra_warnings=notes, selection=selection, processes=processes
        )
        whole = selection is None or selection.everything
        with writing(engine) as connection:
            write_result(connection, result, now=datetime.now(UTC), whole_fleet=whole)
    except (SchemaNotCurrentError, CatalogError, SelectionError) as exc:
        die(str(exc))
    except SQLAlchemyError as exc:
        die(f"the store failed: {exc}")
    finally:
        engine.dispose()
    return result


class GpuOnlyFleet(Exception):  # noqa: N818 - a result, not an error: the fleet has GPUs and no engine
    """Raised by the run functions (with ``gpu_view=True``) where GPUs reported and no engine did."""

    def __init__(self, view: GpuView) -> None:
        super().__init__(view.reason)
        self.view = view


def _span_text(data: AnalysisInput) -> str:
    """The range read: from its bucket-aligned start to its end, in RFC 3339."""
    from analyzer.results.summary import iso

    return f"{iso(data.start)} to {iso(data.end)}"


def _retention_notes(
    settings: Any, since: datetime, data: AnalysisInput, now: datetime | None = None
) -> list[str]:
    """What the store no longer holds of the range: where it starts before the hourly rollups' retention
    and nothing was read from before that cutoff, the prune has expired it (a store not pruned yet says
    nothing: its rows are still there and were read)."""
    days = settings.rollup_hour_retention_days
    if not days:
        return []
    kept_from = (now or datetime.now(UTC)) - timedelta(days=days)
    stamps = [*data.gpu_buckets["ts"], *data.engine_buckets["ts"]]
    first = min((float(t) for t in stamps), default=math.inf)
    if since >= kept_from or first < kept_from.timestamp():
        return []
    return [
        f"hourly rollups are kept {days} days (PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS): the store holds nothing "
        f"of the range before about {kept_from:%Y-%m-%d %H:00} UTC, which is analysed as unobserved"
    ]


def _gpu_view(data: AnalysisInput, buckets: Any, thresholds: Any, warnings: list[str]) -> GpuView:
    from analyzer.results.summary import iso
    from analyzer.telemetry.gpu_view import build_gpu_view

    return build_gpu_view(
        buckets,
        data.inventory.gpus,
        start=iso(data.start),
        end=iso(data.end),
        thresholds=thresholds,
        warnings=warnings,
    )
