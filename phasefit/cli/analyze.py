"""``phasefit analyze``: read the store, find misplaced workers and lost tokens, store the findings.

A plain command function; the lead registers it with ``app.command()(analyze)``. Human output (rich tables)
goes to stderr, ``--json`` prints ``{"summary": {...}, "findings": [...], "warnings": [...]}`` on stdout
(``warnings``: every warning printed on stderr, the pools' notes included): an
:class:`analyzer.results.summary.AnalyzeOutput`, whose JSON schema is ``docs/summary.schema.json``.

Unknown is never shown as zero: a capacity the analyzer could not estimate reads "unknown", a cost without
a catalog price "price not set", and "No findings" is said only when every worker could be judged.
Lost capacity reads in output tokens/s and requests/s first; total (prompt + output) tokens/s is labelled
as the secondary figure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.output import add_row, emit_json, escape, human

if TYPE_CHECKING:
    from rich.console import Console

    from analyzer.pipeline import AnalysisInput, AnalysisResult
    from analyzer.pools.selection import PoolSelection
    from analyzer.results.summary import FleetTotals, Loss
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
        joined, join_notes = join_by_pod(data.inventory)
        data = rename_gpu_owners(data, joined)
        notes = [*join_notes, *profiling_warnings(data)]
        if not data.inventory.workers and gpu_view and len(data.gpu_buckets["ts"]):
            raise GpuOnlyFleet(_gpu_view(data, data.gpu_buckets, params.bottleneck, notes))
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


def gpu_view_payload(view: GpuView) -> dict[str, Any]:
    """What ``--json`` prints for a fleet with GPUs and no engine: no summary, no findings, the GPU view."""
    body = view.to_json_dict()
    return {
        "mode": "gpu-view",
        "summary": None,
        "findings": [],
        "gpu_view": body,
        "warnings": body["warnings"],
    }


GPU_TABLE_ROWS = 200  # the GPU table of the human output stops here (--json has every GPU)


def _share(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"


def _hours(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.1f}"


def print_gpu_view(view: GpuView, console: Console) -> None:
    """The GPU view as rich tables (every name literal text)."""
    from rich.table import Table
    from rich.text import Text

    t = view.totals
    console.print(
        Text.assemble(("phasefit analyze", "bold"), f" {view.from_} -> {view.to}: ", ("GPU view", "bold"))
    )
    console.print(f"{view.reason}.", markup=False)
    idle_unknown = f" (unknown for {t.idle_unknown_gpus} GPUs)" if t.idle_unknown_gpus else ""
    console.print(
        f"{t.gpus} GPUs, {_hours(t.gpu_hours)} GPU-hours; idle: {t.idle_gpus} GPUs, "
        f"{_hours(t.idle_gpu_hours)} idle GPU-hours{idle_unknown}; {t.gpus_without_profiling} GPUs "
        f"without DCGM profiling fields; {t.degraded_gpus} with degraded or lost telemetry",
        markup=False,
    )
    skus = Table(title="GPUs by SKU", title_justify="left")
    for column in ("SKU", "GPUs", "GPU-hours", "SM active", "tensor active", "DRAM active", "bottleneck",
                   "idle GPUs", "idle GPU-hours", "no profiling", "degraded"):  # fmt: skip
        skus.add_column(column, overflow="fold")
    for row in view.skus:
        add_row(
            skus,
            row.sku,
            row.gpus,
            _hours(row.gpu_hours),
            _share(row.sm_active),
            _share(row.tensor_active),
            _share(row.dram_active),
            ", ".join(f"{n} {kind}" for kind, n in row.bottlenecks.items()),
            row.idle_gpus,
            _hours(row.idle_gpu_hours),
            row.gpus_without_profiling,
            row.degraded_gpus,
        )
    console.print(skus)
    gpus = Table(title="GPUs", title_justify="left")
    for column in ("GPU", "node", "SKU", "pod", "hours", "SM", "tensor", "DRAM", "GPU util", "bottleneck",
                   "idle GPU-h", "degraded"):  # fmt: skip
        gpus.add_column(column, overflow="fold")
    for gpu in view.gpus[:GPU_TABLE_ROWS]:
        add_row(
            gpus,
            gpu.gpu_uuid,
            gpu.node or "-",
            gpu.sku or gpu.gpu_name or "unknown",
            gpu.worker_id or "-",
            _hours(gpu.hours),
            _share(gpu.sm_active),
            _share(gpu.tensor_active),
            _share(gpu.dram_active),
            _share(gpu.gpu_util),
            gpu.bottleneck,
            _hours(gpu.idle_gpu_hours),
            _share(max(gpu.degraded_share, gpu.lost_share)),
        )
    console.print(gpus)
    if len(view.gpus) > GPU_TABLE_ROWS:
        console.print(f"... {len(view.gpus) - GPU_TABLE_ROWS} more GPUs: see --json", markup=False)
    reasons = sorted({g.activity_unknown_reason for g in view.gpus if g.activity_unknown_reason})
    if reasons:
        console.print("Unknown activity", style="bold")
        for why in reasons:
            n = sum(1 for g in view.gpus if g.activity_unknown_reason == why)
            console.print(f"- {n} GPU(s): {why}", markup=False)
    if view.warnings:
        console.print("Warnings", style="bold")
        for line in view.warnings:
            console.print(f"- {line}", markup=False)
    console.print("To judge placement, expose these engine metrics", style="bold")
    for needed in view.engine_metrics_needed:
        console.print(
            f"- {needed.engine}: {', '.join(needed.metrics)} (labels: {', '.join(needed.labels)})",
            markup=False,
        )
    console.print(f"- {view.engine_join_help}", markup=False)


def _tokens(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f}"


def _per_s(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f} tokens/s"


def _rate(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _range(value: float | None, low: float | None, high: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f} ({_rate(low, digits)}-{_rate(high, digits)})"


def _lost(loss: Loss, digits: int = 0) -> str:
    """A loss of the summary (fleet, pool) and its range."""
    return _range(loss.value, loss.low, loss.high, digits)


def _money(value: float | None, price: str) -> str:
    if value is not None:
        return f"${value:,.0f} per week"
    return "price not set" if price in ("price not set", "catalog") else f"cost unknown ({price})"


def _reasons(fleet: FleetTotals) -> str:
    return "; ".join(f"{reason} ({n})" for reason, n in fleet.unjudged_reasons.items())


def judged_sentence(fleet: FleetTotals) -> str:
    """What to say when there are no findings: "No findings" only when every worker was judged."""
    unjudged = fleet.unjudged_workers
    if not unjudged:
        return "No findings: every worker sits on hardware its bottleneck needs."
    judged = fleet.judged_workers
    return f"No findings among {judged} judged workers; {unjudged} could not be judged: {_reasons(fleet)}"


def unjudged_sentence(fleet: FleetTotals) -> str:
    """Under the findings: how many workers nobody could judge, and why."""
    return f"{fleet.unjudged_workers} of {fleet.workers} workers could not be judged: {_reasons(fleet)}"


def judged_phrase(fleet: FleetTotals) -> str:
    """ "9 judged: 7 on profiling, 2 on utilisation only" (the evidence behind the verdicts)."""
    judged = fleet.judged_workers
    by_evidence = fleet.judged_by_evidence
    if not by_evidence or list(by_evidence) == ["profiling"]:
        return f"{judged} judged"
    named = {"utilisation": "utilisation only"}
    parts = (f"{n} on {named.get(how, how)}" for how, n in by_evidence.items())
    return f"{judged} judged: " + ", ".join(parts)


def devices_phrase(fleet: FleetTotals) -> str:
    """Whole GPUs and MIG instances counted apart, and the physical GPUs behind them (or why unknown)."""
    instances = fleet.mig_instances
    if not instances:
        return f"{fleet.gpus} GPUs"
    whole, parents = fleet.whole_gpus, fleet.mig_parent_gpus
    physical = fleet.physical_gpus
    physical_text = (
        f"{physical} physical GPUs"
        if physical is not None
        else f"physical GPUs unknown ({fleet.physical_gpus_reason or 'not reported'})"
    )
    return f"{physical_text}: {whole} whole GPUs and {instances} MIG instances on {parents} GPU(s)"


def _unattributed(devices: int, mig_instances: int) -> str:
    """The devices no worker was attributed to, named for what they are (MIG instances count one each)."""
    if mig_instances:
        return f"{devices} unattributed device(s): whole GPUs or MIG instances"
    return f"{devices} unattributed GPU(s)"


def print_result(result: AnalysisResult, console: Console) -> None:
    """The fleet summary, the pools (with their notes) and the findings as rich tables."""
    from rich.table import Table

    summary = result.typed_summary
    fleet = summary.fleet
    console.print(
        f"[bold]phasefit analyze[/] {escape(f'{summary.from_} -> {summary.to}')}: {fleet.pools} pool(s), "
        f"{fleet.workers} workers ({escape(judged_phrase(fleet))}), {escape(devices_phrase(fleet))} "
        f"({_unattributed(fleet.unattributed_gpus, fleet.mig_instances)})"
    )
    loss = "idle capacity (the fleet served its demand)" if fleet.demand_limited else "undelivered"
    lost, mean = fleet.lost, fleet.lost_mean
    if lost.output_tokens_per_s.value is None and lost.tokens_per_s.value is None:
        console.print("Lost capacity: unknown (no pool's placement could be analysed)")
    else:
        console.print(
            f"Lost output tokens/s now: [bold]{escape(_lost(lost.output_tokens_per_s))}[/], "
            + escape(
                f"requests/s {_lost(lost.requests_per_s, 2)}; mean over the range "
                f"{_lost(mean.output_tokens_per_s)} output tokens/s - {loss}"
            )
        )
        console.print(
            f"(secondary) lost total tokens/s, prompt + output: {_lost(lost.tokens_per_s)}; "
            f"mean {_lost(mean.tokens_per_s)}",
            markup=False,
        )
    unknown_lost = fleet.lost_unknown_pools
    if unknown_lost and (lost.tokens_per_s.value is not None):
        console.print(
            f"Lost capacity unknown for {len(unknown_lost)} pool(s): {', '.join(unknown_lost)}", markup=False
        )
    capacity_note = ""
    if fleet.capacity_tokens_per_s is None and fleet.capacity_unknown_pools:
        capacity_note = f" (unknown for {', '.join(fleet.capacity_unknown_pools)})"
    console.print(
        f"Capacity now {_per_s(fleet.capacity_tokens_per_s)}{capacity_note}, best plan "
        f"{_per_s(fleet.best_tokens_per_s)}, demand {_per_s(fleet.demand_tokens_per_s)}; "
        f"misplacement {_money(fleet.misplacement_cost_per_week_usd, fleet.price)}",
        markup=False,
    )
    pools = Table(title="Pools", title_justify="left")
    for column in (
        "pool",
        "serving",
        "GPUs by SKU x role",
        "prompt/output",
        "capacity tok/s",
        "utilisation",
        "bound",
        "P:D now -> best",
        "lost output tok/s (range)",
        "lost req/s",
        "total tok/s (secondary)",
        "drift",
    ):
        pools.add_column(column, overflow="fold")
    notes: list[str] = []
    for row in summary.pools:
        traffic = row.traffic
        mix = (
            f"{traffic.mean_prompt_tokens:,.0f}/{traffic.mean_output_tokens:,.0f}"
            if traffic.mean_prompt_tokens is not None and traffic.mean_output_tokens is not None
            else "unknown"
        )
        by_sku = "; ".join(
            f"{sku} " + ",".join(f"{n} {role}" for role, n in roles.items())
            for sku, roles in row.workers_by_sku_role.items()
        )
        utilisation = f"{row.utilisation:.0%}" if row.utilisation is not None else "unknown"
        add_row(
            pools,
            row.pool,
            row.serving,
            by_sku,
            mix,
            _tokens(row.capacity_tokens_per_s),
            utilisation,
            row.bound or "-",
            f"{row.prefill_decode_now or '-'} -> {row.prefill_decode_recommended or '-'}",
            _lost(row.lost.output_tokens_per_s),
            _rate(row.lost.requests_per_s.value, 2),
            _rate(row.lost.tokens_per_s.value),
            "yes" if row.ratio_drift else "",
        )
        notes += [f"{row.pool}: {note}" for note in row.notes]
        if row.capacity_reason:
            notes.append(f"{row.pool}: capacity unknown: {row.capacity_reason}")
    console.print(pools)
    if notes:
        console.print("Pool notes", style="bold")
        for line in notes:
            console.print(f"- {line}", markup=False)
    advice: list[str] = []
    for number, f in enumerate(result.findings, start=1):
        rec = f.recommendation
        if rec:
            advice.append(f"#{number} {rec.action}: {rec.detail}")
    if result.findings:
        print_findings(result.findings, console)
        if advice:
            console.print("Recommendations", style="bold")
            for line in advice:
                console.print(line, markup=False)
        if fleet.unjudged_workers:
            console.print(unjudged_sentence(fleet), markup=False)
    else:
        console.print(judged_sentence(fleet), markup=False)


# The findings' columns, in order: the header and the figure of one finding.
FINDING_COLUMNS = (
    "#",
    "severity",
    "kind",
    "worker / pool",
    "SKU",
    "role",
    "bottleneck",
    "lost output tok/s (range)",
    "lost req/s",
    "total tok/s",
    "since (UTC)",
    "status",
)


def finding_cells(number: int, f: Finding) -> tuple[str, ...]:
    """One finding's cells, in :data:`FINDING_COLUMNS` order (an unknown figure reads "-", never 0; the
    total tokens/s of a finding that estimates no loss reads "unknown")."""
    from analyzer.findings.loss import states_loss

    total = f.lost_tokens_per_s if states_loss(f) else None
    return (
        str(number),
        f.severity.value,
        f.kind.value,
        f.worker_id or f.pool or "fleet",
        f.gpu_sku or "-",
        f.role.value,
        f.bottleneck.value,
        _range(f.lost_output_tokens_per_s, f.lost_output_tokens_per_s_low, f.lost_output_tokens_per_s_high),
        _rate(f.lost_requests_per_s, 2),
        "unknown" if total is None else _rate(total),
        f.first_seen.strftime("%m-%d %H:%M"),
        f.status.value,
    )


def print_findings(findings: list[Finding], console: Console) -> None:
    """The findings as a table when every cell fits the console's width unwrapped, else stacked: one block
    per finding, its worker on a line of its own. Either way no column is dropped or cut and every name
    prints whole (a stacked line longer than the width is left for the terminal to wrap, never folded or
    truncated), in a terminal of any width as in a log."""
    from rich.measure import Measurement
    from rich.table import Table

    rows = [finding_cells(number, f) for number, f in enumerate(findings, start=1)]
    table = Table(title="Findings", title_justify="left")
    for column in FINDING_COLUMNS:
        table.add_column(column, no_wrap=True)
    for cells in rows:
        add_row(table, *cells)
    natural = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    _print_stacked(rows, console)


def _print_stacked(rows: list[tuple[str, ...]], console: Console) -> None:
    """Narrow consoles: ``#N worker / pool: NAME`` on a line of its own, then the other columns as
    ``label: value`` items packed into indented lines of the console's width (an item is never split)."""
    from rich.text import Text

    console.print("Findings", style="italic")
    indent = "   "
    for cells in rows:
        number, name = cells[0], cells[FINDING_COLUMNS.index("worker / pool")]
        head = Text.assemble((f"#{number} ", "bold"), ("worker / pool: ", "dim"), (name, "bold"))
        console.print(
            head, soft_wrap=True
        )  # a long name runs on whole: the terminal wraps it, rich never cuts
        items = [
            Text.assemble((f"{label}: ", "dim"), value)
            for label, value in zip(FINDING_COLUMNS, cells, strict=True)
            if label not in ("#", "worker / pool")
        ]
        line = Text(indent)
        for item in items:
            if len(line) > len(indent) and line.cell_len + 2 + item.cell_len > console.width:
                console.print(line, soft_wrap=True)
                line = Text(indent)
            if len(line) > len(indent):
                line.append("; ")
            line.append_text(item)
        console.print(line, soft_wrap=True)
