"""The weekly placement audit from the store: the analyzer run over the ISO week (and over the week before,
for the change), the inventory, and the telemetry's coverage.

It depends on the store's contents alone: the same store gives the same report, byte for byte.
Reasoning: docs/analyzer.md#build
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
from sqlalchemy import Connection, func, select

from analyzer.pipeline import AnalysisInput, AnalysisResult, AnalyzerParams, analyze
from analyzer.planning.standing import StandingWhatIf, evaluate
from analyzer.pools.selection import PoolSelection
from analyzer.report.change_record import PoolChange, changes_since, running_accuracy
from analyzer.report.coverage import data_quality, roofline_points, sku_hours
from analyzer.report.fleet_roofline import roofs_for
from analyzer.report.model import PRICE_NOT_SET, AuditReport, DriftEvent, FollowUp, WeekFigures
from analyzer.report.sections import actions_of, hourly_lost, pool_rows, ratio_points, verdict
from analyzer.results.summary import LossBound, LossUnit, SegmentSummary, Summary
from analyzer.results.totals import merge
from analyzer.sources.store import read_input, shard_summaries
from fleet.catalog import Catalog
from fleet.contract import Finding, FindingKind, FindingStatus
from fleet.store.alerts import list_alert_events
from fleet.store.findings import list_findings
from fleet.store.reports import check_week, list_reports
from fleet.store.schema import EngineSample1hRow, EngineSampleRow, GpuSample1hRow, GpuSampleRow, table_of

HOUR = timedelta(hours=1)
MISPLACEMENT = {
    FindingKind.DECODE_ON_LOW_BANDWIDTH,
    FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    FindingKind.CAPACITY_ON_SMALL_MEMORY,
    FindingKind.ROLE_DRIFT,
}


class ReportError(ValueError):
    """The week cannot be audited (no telemetry in it); the message says why."""


def week_bounds(week: str) -> tuple[datetime, datetime]:
    """[Monday 00:00, next Monday 00:00) UTC of an ISO week such as ``2026-W48``."""
    year, number = check_week(week).split("-W")
    start = datetime.fromisocalendar(int(year), int(number), 1).replace(tzinfo=UTC)
    return start, start + timedelta(days=7)


def previous_week(week: str) -> str:
    start, _ = week_bounds(week)
    year, number, _ = (start - timedelta(days=7)).isocalendar()
    return f"{year:04d}-W{number:02d}"


def _data_span(connection: Connection, since: datetime, until: datetime) -> tuple[datetime, datetime] | None:
    """[start of the first, end of the last) hour in [since, until) that holds telemetry (rollups or raw)."""
    firsts, lasts = [], []
    for model, column in (
        (GpuSample1hRow, "bucket"),
        (EngineSample1hRow, "bucket"),
        (GpuSampleRow, "ts"),
        (EngineSampleRow, "ts"),
    ):
        c = table_of(model).c[column]
        first, last = connection.execute(select(func.min(c), func.max(c)).where(c >= since, c < until)).one()
        if first is not None:
            firsts.append(first.replace(minute=0, second=0, microsecond=0))
            lasts.append(last.replace(minute=0, second=0, microsecond=0) + HOUR)
    if not firsts:
        return None
    return max(min(firsts), since), min(max(lasts), until)


@dataclass(frozen=True)
class WeekAnalysis:
    """A week's telemetry and what the analyzer concluded over it (one run, or shards merged)."""

    week: str
    since: datetime
    until: datetime
    data: AnalysisInput
    summary: Summary
    findings: list[Finding]


def week_input(connection: Connection, week: str) -> tuple[datetime, datetime, AnalysisInput] | None:
    """The week's bounds and its telemetry over the hours that hold any; None without any."""
    since, until = week_bounds(week)
    span = _data_span(connection, since, until)
    if span is None:
        return None
    data = read_input(connection, *span)
    if not data.inventory.workers or not data.gpu_buckets["ts"]:
        return None
    return since, until, data


def analyse_week(
    connection: Connection,
    week: str,
    catalog: Catalog,
    params: AnalyzerParams | None = None,
    selection: PoolSelection | None = None,
) -> tuple[WeekAnalysis, AnalysisResult] | None:
    """The analyzer run over the hours of the week that hold telemetry; None without any."""
    found = week_input(connection, week)
    if found is None:
        return None
    since, until, data = found
    result = analyze(data, catalog, params, selection=selection)
    return WeekAnalysis(week, since, until, data, result.typed_summary, result.findings), result


def merged_week(connection: Connection, week: str, shards: int) -> WeekAnalysis | None:
    """The week from the stored runs of its ``shards`` shards (``phasefit report --shard``), merged; None
    without telemetry. A shard that has not run is an error that names it."""
    found = week_input(connection, week)
    if found is None:
        return None
    since, until, data = found
    start, end = datetime.fromtimestamp(data.start, tz=UTC), datetime.fromtimestamp(data.end, tz=UTC)
    parts = shard_summaries(connection, start, end, shards)
    missing = [i for i in range(shards) if i not in parts]
    if missing:
        raise ReportError(
            f"{week}: shard(s) {', '.join(str(i) for i in missing)} of {shards} have not stored a run over "
            f"{start:%Y-%m-%d %H:%M}..{end:%Y-%m-%d %H:%M}: run phasefit report --week {week} "
            f"--shard I/{shards} for each"
        )
    summary = merge([parts[i] for i in range(shards)])
    pools = {p.pool for p in summary.pools}
    findings = [
        s.finding for s in list_findings(connection, since=start, until=end) if s.finding.pool in pools
    ]
    return WeekAnalysis(week, since, until, data, summary, findings)


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


Figure = Callable[[SegmentSummary], float | None]


def _lost(unit: LossUnit, bound: LossBound = "value") -> Figure:
    """A segment's loss in ``unit`` (its estimate, or ``bound`` of its range)."""
    return lambda s: s.lost.figure(unit, bound)


def _segment_tokens(summary: Summary, figure: Figure, end: float) -> float:
    """A segment figure (per second) integrated over the segments, up to ``end``."""
    total = 0.0
    for pool in summary.pools:
        for s in pool.segments:
            start, stop = _parse(s.start).timestamp(), min(_parse(s.end).timestamp(), end)
            if stop > start:
                total += float(figure(s) or 0.0) * (stop - start)
    return total


def _segment_total(summary: Summary, figure: Figure, end: float) -> float | None:
    """Like :func:`_segment_tokens`, but None when no segment estimated the figure (unknown, not 0)."""
    known = any(figure(s) is not None for pool in summary.pools for s in pool.segments)
    return _segment_tokens(summary, figure, end) if known else None


def week_figures(w: WeekAnalysis) -> WeekFigures:
    summary = w.summary
    fleet = summary.fleet
    end = w.data.end
    hours = (end - w.data.start) / 3600.0
    lost = _segment_tokens(summary, _lost("tokens_per_s"), end)
    lost_output = _segment_total(summary, _lost("output_tokens_per_s"), end)
    lost_requests = _segment_total(summary, _lost("requests_per_s"), end)
    seconds = hours * 3600.0
    quality = data_quality(w.data)
    worst = max(
        (
            p
            for p in summary.pools
            if p.prefill_decode_now
            and p.prefill_decode_recommended
            and p.prefill_decode_now != p.prefill_decode_recommended
        ),
        key=lambda p: (p.lost.output_tokens_per_s.value or 0.0, p.lost.tokens_per_s.value or 0.0),
        default=None,
    )
    return WeekFigures(
        week=w.week,
        since=w.since,
        until=w.until,
        analysed_hours=hours,
        lost_tokens=lost,
        lost_tokens_low=_segment_tokens(summary, _lost("tokens_per_s", "low"), end),
        lost_tokens_high=_segment_tokens(summary, _lost("tokens_per_s", "high"), end),
        mean_lost_tokens_per_s=lost / (hours * 3600.0) if hours > 0 else 0.0,
        capacity_tokens_per_s=fleet.capacity_tokens_per_s,
        best_tokens_per_s=fleet.best_tokens_per_s,
        demand_tokens_per_s=fleet.demand_tokens_per_s,
        demand_limited=fleet.demand_limited,
        misplaced_workers=fleet.misplaced_workers,
        open_findings=fleet.open_findings,
        findings_by_kind=dict(fleet.open_findings_by_kind),
        weekly_cost_usd=fleet.weekly_cost_usd,
        misplacement_cost_usd=fleet.misplacement_cost_per_week_usd,
        idle_cost_usd=fleet.idle_cost_per_week_usd,
        worst_ratio=f"{worst.pool}: {worst.prefill_decode_now} -> {worst.prefill_decode_recommended}"
        if worst
        else None,
        telemetry_coverage=quality.coverage,
        lost_output_tokens=lost_output,
        lost_output_tokens_low=_segment_total(summary, _lost("output_tokens_per_s", "low"), end),
        lost_output_tokens_high=_segment_total(summary, _lost("output_tokens_per_s", "high"), end),
        lost_requests=lost_requests,
        mean_lost_output_tokens_per_s=lost_output / seconds
        if lost_output is not None and seconds > 0
        else None,
        mean_lost_requests_per_s=lost_requests / seconds
        if lost_requests is not None and seconds > 0
        else None,
        judged_workers=fleet.judged_workers,
        unjudged_workers=fleet.unjudged_workers,
        unjudged_reasons=dict(fleet.unjudged_reasons),
        capacity_unknown_pools=list(fleet.capacity_unknown_pools),
    )


def _plain(value: Any) -> Any:
    """JSON for values orjson does not know (PostgreSQL returns SUMs of integers as Decimal; a latency
    histogram comes as its stored bytes)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot fingerprint {type(value).__name__}")


def fingerprint(data: AnalysisInput) -> str:
    """A hash of the rows the report read (inventory and bucketed telemetry), for reproducibility."""
    digest = hashlib.sha256()
    inventory = sorted([*(repr(w) for w in data.inventory.workers), *(repr(g) for g in data.inventory.gpus)])
    digest.update(orjson.dumps(inventory))
    for columns in (data.gpu_buckets, data.engine_buckets):
        for name in sorted(columns):
            digest.update(name.encode())
            values = [
                float(v) if isinstance(v, int | Decimal) and not isinstance(v, bool) else v
                for v in columns[name]
            ]
            digest.update(orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY, default=_plain))
    return digest.hexdigest()[:16]


def _drift_events(w: WeekAnalysis, alerts: Sequence[Any]) -> list[DriftEvent]:
    ratio_findings = {f.pool: f for f in w.findings if f.kind is FindingKind.POOL_RATIO_DRIFT and f.pool}
    out = []
    for pool in w.summary.pools:
        for event in pool.drift_events:
            at = _parse(event.start)
            became = []
            finding = ratio_findings.get(pool.pool)
            if finding is not None and finding.first_seen <= at + timedelta(hours=6):
                became.append("pool-ratio-drift finding")
            became += [
                f"alert {a.labels.get('alertname', '?')} ({a.fingerprint})"
                for a in alerts
                if a.labels.get("pool") == pool.pool and abs((a.starts_at - at).total_seconds()) <= 6 * 3600
            ]
            out.append(DriftEvent(at, pool.pool, event.description, event.magnitude, ", ".join(became)))
    for f in w.findings:
        if f.kind is FindingKind.ROLE_DRIFT and f.worker_id:
            out.append(
                DriftEvent(
                    f.first_seen,
                    f.pool or "",
                    f"{f.worker_id}: measured bottleneck "
                    f"{f.bottleneck.value} no longer matches role {f.role.value}",
                    None,
                    "role-drift finding",
                )
            )
    return sorted(out, key=lambda e: (e.at, e.pool, e.what))


def _follow_up(this: WeekAnalysis, last: WeekAnalysis | None) -> list[FollowUp]:
    if last is None:
        return []
    now = {
        (f.kind.value, f.worker_id or f.pool or "fleet"): f
        for f in this.findings
        if f.status is FindingStatus.OPEN
    }
    out = []
    for f in last.findings:
        if f.status is not FindingStatus.OPEN:
            continue
        key = (f.kind.value, f.worker_id or f.pool or "fleet")
        current = now.get(key)
        out.append(
            FollowUp(
                key[1],
                key[0],
                "persisting" if current else "resolved",
                f.lost_output_tokens_per_s,
                current.lost_output_tokens_per_s if current else None,
            )
        )
    return sorted(
        out,
        key=lambda u: (u.lost_last_week is None, -(u.lost_last_week or 0.0), u.subject, u.kind),
    )


def _changes(
    connection: Connection,
    catalog: Catalog,
    this: WeekAnalysis,
    last: WeekAnalysis | None,
    params: AnalyzerParams | None,
    sharded: bool = False,
) -> list[PoolChange]:
    """Changes of a split since last week began, judged with all the traffic seen since: one analysis over
    both weeks, so a change made late last week is scored on this week's traffic. A sharded audit analyses
    nothing itself: it reports the changes its shards saw this week."""
    if last is None or sharded:
        return changes_since(this.summary, this.since)
    start = datetime.fromtimestamp(last.data.start, tz=UTC)
    end = datetime.fromtimestamp(this.data.end, tz=UTC)
    both = analyze(read_input(connection, start, end), catalog, params)
    return changes_since(both.typed_summary, last.since)


def _weeks(
    connection: Connection, week: str, catalog: Catalog, params: AnalyzerParams | None, shards: int | None
) -> tuple[WeekAnalysis, WeekAnalysis | None, AnalysisResult | None]:
    """This week (analysed here, or merged from its shards) and the week before where it has telemetry
    (from its shards when they all ran, else not compared); and this week's analysis, where it ran here."""
    result: AnalysisResult | None = None
    if shards is None:
        found = analyse_week(connection, week, catalog, params)
        last_found = analyse_week(connection, previous_week(week), catalog, params)
        this, last = (found[0] if found else None), (last_found[0] if last_found else None)
        result = found[1] if found else None
    else:
        this = merged_week(connection, week, shards)
        try:
            last = merged_week(connection, previous_week(week), shards)
        except ReportError:
            last = None
    if this is None:
        since, until = week_bounds(week)
        raise ReportError(
            f"no telemetry between {since:%Y-%m-%d} and {until:%Y-%m-%d} ({week}): nothing to audit"
        )
    return this, last, result


def build_audit(
    connection: Connection,
    week: str,
    catalog: Catalog,
    *,
    params: AnalyzerParams | None = None,
    version: str = "",
    shards: int | None = None,
    what_ifs: Sequence[StandingWhatIf] = (),
) -> AuditReport:
    """Everything the week's audit says, from the store (see the module docstring). With ``shards``, the
    week and the week before come from their shards' stored runs, merged, instead of an analysis here."""
    this, last, result = _weeks(connection, week, catalog, params, shards)
    summary = this.summary
    alerts = [
        s.event
        for s in list_alert_events(connection, since=this.since, limit=10_000)
        if s.event.starts_at < this.until
    ]
    previous_keys = (
        {(f.kind.value, f.worker_id or f.pool or "fleet") for f in last.findings} if last else set()
    )
    actions, considered, appendix = actions_of(this.findings, previous_keys)
    workers = summary.workers
    misplaced_episodes = {
        f.worker_id: (f.first_seen, f.last_seen)
        for f in this.findings
        if f.worker_id and f.kind in MISPLACEMENT and f.status is FindingStatus.OPEN
    }
    points = roofline_points(
        this.data,
        catalog,
        {w.worker_id: w.pool for w in workers},
        {w.worker_id: w.sku for w in workers},
        sorted(misplaced_episodes),
        params.clusters if params else None,
    )
    by_sku_role: dict[str, dict[str, int]] = {}
    for pool in summary.pools:
        for sku, roles in pool.workers_by_sku_role.items():
            for role, n in roles.items():
                by_sku_role.setdefault(sku, {})[role] = by_sku_role.get(sku, {}).get(role, 0) + n
    skus = [catalog.gpus.lookup(k) for k in by_sku_role]
    prices = [sku.hourly_price_usd if sku is not None else None for sku in skus]
    price_source = (
        "catalog hourly_price_usd, on-demand"
        if prices and all(p is not None for p in prices)
        else PRICE_NOT_SET
    )
    figures = week_figures(this)
    changes = _changes(connection, catalog, this, last, params, sharded=shards is not None)
    stored = [r.summary for r in list_reports(connection, limit=None) if r.week != week]
    return AuditReport(
        week=week,
        since=this.since,
        until=this.until,
        clusters=sorted({p.cluster or p.pool.split("/", 1)[0] for p in summary.pools}),
        this_week=figures,
        last_week=week_figures(last) if last else None,
        verdict=verdict(figures, actions),
        actions=actions,
        considered=considered,
        pools=pool_rows(summary.pools),
        drift_events=_drift_events(this, alerts),
        follow_up=_follow_up(this, last),
        quality=data_quality(this.data, catalog),
        roofs=roofs_for(catalog, sorted({(p.sku, p.precision) for p in points})),
        points=points,
        hourly_lost=hourly_lost(summary, this.data.end),
        hourly_lost_last_week=hourly_lost(last.summary, last.data.end, shift=timedelta(days=7))
        if last
        else [],
        ratios=ratio_points(summary),
        sku_hours=sku_hours(this.data, catalog, misplaced_episodes),
        gpus_by_sku_role=by_sku_role,
        model_error=summary.model,
        price_source=price_source,
        fingerprint=fingerprint(this.data),
        version=version,
        appendix=appendix,
        changes=changes,
        accuracy=running_accuracy(changes, stored),
        what_ifs=evaluate(what_ifs, result.pools if result else [], catalog, params or AnalyzerParams()),
        sharded=shards is not None,
    )
