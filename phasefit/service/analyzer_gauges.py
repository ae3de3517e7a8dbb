"""The analyzer's current conclusions as Prometheus gauges, computed per scrape from the store.

Sources: the open findings (per worker: misplacement kinds and lost tokens) and the latest analyzer run's
summary (per pool: capacity, lost tokens, current and recommended prefill:decode ratio, drift; fleet total;
run time). A pool the summary does not cover falls back to its findings. Nothing is cached between scrapes
(client_python's custom-collector rule); a store that cannot be read yields ``phasefit_service_store_up 0``
instead of a failed scrape.

- ``phasefit_worker_misplaced{pool,worker,sku,role,model,kind}``: 1 per open misplacement finding (the
  series disappears when the finding resolves);
- ``phasefit_worker_lost_output_tokens_per_second`` and ``phasefit_worker_lost_requests_per_second``
  ``{pool,worker,sku,role,model}``: the largest loss among the worker's open findings (findings of one
  worker overlap; they are not added up), in the units an SRE acts on (generated tokens, requests); only
  where a finding carries them;
- ``phasefit_worker_lost_tokens_per_second``: the same in total (prompt + output) tokens, secondary;
- ``phasefit_pool_lost_output_tokens_per_second``, ``phasefit_pool_lost_requests_per_second``, then
  ``phasefit_pool_lost_tokens_per_second`` (secondary) and the other ``phasefit_pool_*{pool}`` gauges;
  a figure the analyzer could not estimate (a capacity, a loss) has no series rather than a 0;
- ``phasefit_pool_latency_target_seconds{pool,metric}`` and
  ``phasefit_pool_latency_target_attainment_ratio{pool,metric}``: each latency target of the pool and the
  share of its measured serving time whose p90 met it (no series where unknown, never 0), and
  ``phasefit_pool_latency_p90_seconds{pool,metric}``: the pool's p90 from its workers' merged histograms;
- ``phasefit_fleet_lost_output_tokens_per_second``, ``phasefit_fleet_lost_requests_per_second``,
  ``phasefit_fleet_lost_tokens_per_second`` (secondary);
- ``phasefit_fleet_judged_workers`` and ``phasefit_fleet_unjudged_workers{reason}``: workers whose
  bottleneck was (not) measured, so a quiet fleet nobody could judge does not pass for a healthy one;
- ``phasefit_change_realized_to_predicted_ratio{pool}``: the latest scored change of the pool's split,
  realized over predicted; ``phasefit_changes_scored``: how many the latest run scored;
- ``phasefit_analyzer_last_run_timestamp_seconds`` (0 when the analyzer has never run, so staleness alerts).

A stored run may be of any summary version, or partial: the figures are read through the tolerant views
the dashboard reads too (:mod:`fleet.store.stored_summary`, named after :mod:`analyzer.results.summary`'s
fields): a figure a run did not store, or stored as something other than a number, reads as unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from fleet.contract import Finding, FindingKind, FindingStatus
from fleet.store.analysis import AnalysisRun, latest_analysis_run
from fleet.store.findings import StoredFinding, list_findings
from fleet.store.queries import list_workers
from fleet.store.stored_summary import StoredGroupPlan, StoredPool, StoredSummary

log = logging.getLogger(__name__)

MISPLACEMENT_KINDS = frozenset({
    FindingKind.DECODE_ON_LOW_BANDWIDTH,
    FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    FindingKind.CAPACITY_ON_SMALL_MEMORY,
    FindingKind.ROLE_DRIFT,
})  # fmt: skip
MAX_OPEN_FINDINGS = 200_000
WorkerKey = tuple[str, str, str, str, str]  # pool, worker, sku, role, model
_K = TypeVar("_K")


@dataclass
class Conclusions:
    misplaced: set[tuple[str, str, str, str, str, str]] = field(default_factory=set)
    worker_lost: dict[WorkerKey, float] = field(default_factory=dict)  # total tokens/s (secondary)
    worker_lost_output: dict[WorkerKey, float] = field(default_factory=dict)
    worker_lost_requests: dict[WorkerKey, float] = field(default_factory=dict)
    pool_lost: dict[str, float] = field(default_factory=dict)
    pool_lost_output: dict[str, float] = field(default_factory=dict)
    pool_lost_requests: dict[str, float] = field(default_factory=dict)
    pool_capacity: dict[str, float] = field(default_factory=dict)
    pool_ratio: dict[str, float] = field(default_factory=dict)
    pool_recommended_ratio: dict[str, float] = field(default_factory=dict)
    pool_drift: dict[str, float] = field(default_factory=dict)
    # (pool, metric) -> the target (seconds) and the share of serving time whose measured p90 met it
    pool_target: dict[tuple[str, str], float] = field(default_factory=dict)
    pool_attainment: dict[tuple[str, str], float] = field(default_factory=dict)
    # (pool, metric) -> its p90 from the workers' histograms merged bucket by bucket
    pool_latency_p90: dict[tuple[str, str], float] = field(default_factory=dict)
    # (pool, gpu_sku, tp, role, state) -> workers; state "current" or "recommended" (never applied)
    pool_workers: dict[tuple[str, str, str, str, str], float] = field(default_factory=dict)
    fleet_lost: float = 0.0
    fleet_lost_output: float | None = None
    fleet_lost_requests: float | None = None
    judged_workers: float | None = None
    unjudged_workers: dict[str, float] = field(default_factory=dict)  # reason -> workers
    last_run: float = 0.0
    change_ratio: dict[str, float] = field(
        default_factory=dict
    )  # pool -> realized / predicted, latest scored
    changes_scored: float | None = None


def conclude(
    findings: Sequence[StoredFinding], models: Mapping[str, str], run: AnalysisRun | None
) -> Conclusions:
    """Pure: the gauges' values from open findings, worker -> model, and the latest run (its summary read
    through the tolerant views the dashboard reads too)."""
    out = Conclusions()
    open_findings = [s.finding for s in findings if s.finding.status is FindingStatus.OPEN]
    drifting: set[str] = set()
    view = run.summary if run is not None else StoredSummary()
    pools: dict[str, StoredPool] = {p.pool: p for p in view.pools if p.pool}
    pool_models = {name: p.model for name, p in pools.items() if p.model}
    for finding in open_findings:
        pool = finding.pool or ""
        if finding.kind is FindingKind.POOL_RATIO_DRIFT and finding.pool is not None:
            drifting.add(finding.pool)
        if finding.worker_id is None:
            continue
        key = _worker_key(finding, pool, models, pool_models)
        if finding.kind in MISPLACEMENT_KINDS:
            out.misplaced.add((*key, finding.kind.value))
        _largest(out.worker_lost, key, finding.lost_tokens_per_s)
        _largest(out.worker_lost_output, key, finding.lost_output_tokens_per_s)
        _largest(out.worker_lost_requests, key, finding.lost_requests_per_s)
    fallback = [
        (out.pool_lost, _by_pool(out.worker_lost)),
        (out.pool_lost_output, _by_pool(out.worker_lost_output)),
        (out.pool_lost_requests, _by_pool(out.worker_lost_requests)),
    ]
    covered: set[str] = set()
    if run is not None:
        out.last_run = run.created_at.timestamp()
        for name, figures in pools.items():
            covered.add(name)
            _put(out.pool_lost, name, figures.lost.tokens_per_s.value)
            _put(out.pool_lost_output, name, figures.lost.output_tokens_per_s.value)
            _put(out.pool_lost_requests, name, figures.lost.requests_per_s.value)
            scored = [
                c for c in figures.changes or [] if c.realized_to_predicted is not None and c.at is not None
            ]
            if scored:
                latest = max(scored, key=lambda c: c.at or 0)
                _put(out.change_ratio, name, latest.realized_to_predicted)
            _put(out.pool_capacity, name, figures.capacity_tokens_per_s)
            _put(out.pool_ratio, name, figures.prefill_decode_ratio)
            _put(out.pool_recommended_ratio, name, figures.recommended_prefill_decode_ratio)
            if figures.ratio_drift is not None:  # unknown: no series, never 0
                out.pool_drift[name] = 1.0 if figures.ratio_drift else 0.0
            out.pool_workers.update(_plan(name, figures.recommended or {}))
            for measured in figures.targets.attainment:
                if measured.metric:
                    _put(out.pool_target, (name, measured.metric), measured.target_s)
                    _put(out.pool_attainment, (name, measured.metric), measured.share)
                    _put(out.pool_latency_p90, (name, measured.metric), measured.pool_p90_s)
    elif findings:
        out.last_run = max(s.updated_at.timestamp() for s in findings)
    for target, by_pool in fallback:
        for pool, lost in by_pool.items():
            if pool and pool not in covered:
                target[pool] = lost
    for pool in drifting - covered:
        out.pool_drift[pool] = 1.0
    fleet = view.fleet
    if view.model is not None and view.model.changes_scored is not None:
        out.changes_scored = float(view.model.changes_scored)
    if fleet is not None and fleet.lost.tokens_per_s.value is not None:
        out.fleet_lost = fleet.lost.tokens_per_s.value
    else:
        unpooled = sum(lost for key, lost in out.worker_lost.items() if not key[0])
        out.fleet_lost = sum(out.pool_lost.values()) + unpooled
    out.fleet_lost_output = fleet.lost.output_tokens_per_s.value if fleet else None
    if out.fleet_lost_output is None and out.pool_lost_output:
        out.fleet_lost_output = sum(out.pool_lost_output.values())
    out.fleet_lost_requests = fleet.lost.requests_per_s.value if fleet else None
    if out.fleet_lost_requests is None and out.pool_lost_requests:
        out.fleet_lost_requests = sum(out.pool_lost_requests.values())
    out.judged_workers = (
        None if fleet is None or fleet.judged_workers is None else float(fleet.judged_workers)
    )
    out.unjudged_workers = {k: float(v) for k, v in fleet.unjudged_reasons.items()} if fleet else {}
    return out


def _plan(pool: str, groups: Mapping[str, StoredGroupPlan]) -> dict[tuple[str, str, str, str, str], float]:
    """Workers per (SKU, TP, role), now and in the best plan, from a pool's ``recommended`` groups (keyed
    ``<sku>/tp<N>``; a MIG SKU key has a slash of its own)."""
    out: dict[tuple[str, str, str, str, str], float] = {}
    for key, group in groups.items():
        sku, _, tp = key.rpartition("/tp")
        if not sku or not tp.isdigit():
            continue
        for role, now, best in (
            ("prefill", group.prefill_now, group.prefill_best),
            ("decode", group.decode_now, group.decode_best),
        ):
            if now is not None:
                out[(pool, sku, tp, role, "current")] = now
            if best is not None:
                out[(pool, sku, tp, role, "recommended")] = best
    return out


def _largest(target: dict[WorkerKey, float], key: WorkerKey, value: float | None) -> None:
    if value is not None:
        target[key] = max(target.get(key, 0.0), value)


def _by_pool(per_worker: Mapping[WorkerKey, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in per_worker.items():
        out[key[0]] = out.get(key[0], 0.0) + value
    return out


def _worker_key(
    finding: Finding, pool: str, models: Mapping[str, str], pool_models: Mapping[str, str] | None = None
) -> WorkerKey:
    """A pool key is "<cluster>/<model>" or "<cluster>/<deployment>/<model>" (models hold "/" too), so the
    model comes from the worker, else the summary's pool row, never from splitting the key."""
    worker = finding.worker_id or ""
    model = models.get(worker) or (pool_models or {}).get(pool, "")
    return (pool, worker, finding.gpu_sku or "", finding.role.value, model)


def _put(target: dict[_K, float], key: _K, value: float | None) -> None:
    if value is not None:
        target[key] = value


class AnalyzerCollector:
    """A custom collector: reads the store at every scrape and yields fresh gauge families."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def describe(self) -> list[Metric]:
        return []  # registering must not touch the store

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("phasefit_service_store_up", "1 when the last scrape could read the store.")
        try:
            with self.engine.connect() as connection:
                findings = list_findings(connection, status=FindingStatus.OPEN, limit=MAX_OPEN_FINDINGS)
                models = {w.worker_id: w.model for w in list_workers(connection)}
                run = latest_analysis_run(connection)
        except (SQLAlchemyError, self.engine.dialect.loaded_dbapi.Error) as exc:
            log.warning("/metrics: cannot read the analyzer's conclusions: %s: %s", type(exc).__name__, exc)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families(conclude(findings, models, run))


def families(c: Conclusions) -> Iterator[Metric]:
    worker_labels = ["pool", "worker", "sku", "role", "model"]
    misplaced = GaugeMetricFamily(
        "phasefit_worker_misplaced",
        "1 while the analyzer has an open misplacement finding of this kind for the worker.",
        labels=[*worker_labels, "kind"],
    )
    for labels in sorted(c.misplaced):
        misplaced.add_metric(list(labels), 1.0)
    yield misplaced
    worker_gauges = (
        (
            "lost_output_tokens_per_second",
            "Output (generated) tokens per second the best placement of the same GPUs would add at this "
            "worker (largest open finding).",
            c.worker_lost_output,
        ),
        (
            "lost_requests_per_second",
            "Requests per second the best placement of the same GPUs would add at this worker "
            "(largest open finding).",
            c.worker_lost_requests,
        ),
        (
            "lost_tokens_per_second",
            "Secondary: total (prompt + output) tokens per second the best placement of the same GPUs "
            "would add at this worker (largest open finding); see lost_output_tokens_per_second.",
            c.worker_lost,
        ),
    )
    for suffix, help_text, worker_values in worker_gauges:
        family = GaugeMetricFamily(f"phasefit_worker_{suffix}", help_text, labels=worker_labels)
        for key, value in sorted(worker_values.items()):
            family.add_metric(list(key), value)
        yield family
    pool_gauges = (
        (
            "lost_output_tokens_per_second",
            "Output (generated) tokens per second the pool loses to placement.",
            c.pool_lost_output,
        ),
        (
            "lost_requests_per_second",
            "Requests per second the pool loses to placement.",
            c.pool_lost_requests,
        ),
        (
            "lost_tokens_per_second",
            "Secondary: total (prompt + output) tokens per second the pool loses to placement; see "
            "lost_output_tokens_per_second.",
            c.pool_lost,
        ),
        (
            "capacity_tokens_per_second",
            "The pool's token capacity (prompt + output) as placed; no series where it is unknown.",
            c.pool_capacity,
        ),
        ("prefill_decode_ratio", "The pool's prefill:decode capacity ratio.", c.pool_ratio),
        (
            "recommended_prefill_decode_ratio",
            "The prefill:decode ratio its traffic needs.",
            c.pool_recommended_ratio,
        ),
        ("ratio_drift", "1 when the pool's ratio no longer matches its traffic.", c.pool_drift),
    )
    for suffix, help_text, values in pool_gauges:
        name = f"phasefit_pool_{suffix}"
        family = GaugeMetricFamily(name, help_text, labels=["pool"])
        for pool, value in sorted(values.items()):
            family.add_metric([pool], value)
        yield family
    target_gauges = (
        (
            "phasefit_pool_latency_target_seconds",
            'The pool\'s latency target at the 90th percentile, per metric ("ttft", "tpot", "e2e").',
            c.pool_target,
        ),
        (
            "phasefit_pool_latency_target_attainment_ratio",
            "Share of the pool's measured serving time whose p90 latency met its target (prefill and "
            "colocated workers for TTFT, decode and colocated for TPOT and end to end); no series where "
            "unknown.",
            c.pool_attainment,
        ),
        (
            "phasefit_pool_latency_p90_seconds",
            "The pool's p90 latency over the analysed span, per metric, from its workers' histograms merged "
            "bucket by bucket (histogram_quantile over sum by le); no series where no worker sent them.",
            c.pool_latency_p90,
        ),
    )
    for name, help_text, by_metric in target_gauges:
        family = GaugeMetricFamily(name, help_text, labels=["pool", "metric"])
        for (pool, metric), value in sorted(by_metric.items()):
            family.add_metric([pool, metric], value)
        yield family
    workers = GaugeMetricFamily(
        "phasefit_pool_workers",
        'Serving workers per pool, GPU model, TP degree and role: state="current" as placed, '
        'state="recommended" in the latest analyzer run\'s best plan (an advice for autoscalers and '
        "operators: phasefit never applies it).",
        labels=["pool", "gpu_sku", "tp", "role", "state"],
    )
    for group_role, count in sorted(c.pool_workers.items()):
        workers.add_metric(list(group_role), count)
    yield workers
    fleet_gauges = (
        (
            "phasefit_fleet_lost_output_tokens_per_second",
            "Output (generated) tokens per second the fleet loses to placement.",
            c.fleet_lost_output,
        ),
        (
            "phasefit_fleet_lost_requests_per_second",
            "Requests per second the fleet loses to placement.",
            c.fleet_lost_requests,
        ),
    )
    for name, help_text, known in fleet_gauges:
        family = GaugeMetricFamily(name, help_text)
        if known is not None:  # unknown: no sample rather than 0
            family.add_metric([], known)
        yield family
    yield GaugeMetricFamily(
        "phasefit_fleet_lost_tokens_per_second",
        "Secondary: total (prompt + output) tokens per second the fleet loses to placement; see "
        "phasefit_fleet_lost_output_tokens_per_second.",
        value=c.fleet_lost,
    )
    judged = GaugeMetricFamily(
        "phasefit_fleet_judged_workers",
        "Workers whose bottleneck the latest analyzer run measured and whose role is known.",
    )
    if c.judged_workers is not None:
        judged.add_metric([], c.judged_workers)
    yield judged
    unjudged = GaugeMetricFamily(
        "phasefit_fleet_unjudged_workers",
        "Workers the latest analyzer run could not judge (no profiling fields, unknown role, no GPUs "
        "attributed, not serving), by reason.",
        labels=["reason"],
    )
    for reason, count in sorted(c.unjudged_workers.items()):
        unjudged.add_metric([reason], count)
    yield unjudged
    ratio = GaugeMetricFamily(
        "phasefit_change_realized_to_predicted_ratio",
        "The latest scored change of the pool's prefill/decode split: realized over predicted gain (1: as "
        "predicted, below 0: it made things worse); no series where no change was scored.",
        labels=["pool"],
    )
    for pool, value in sorted(c.change_ratio.items()):
        ratio.add_metric([pool], value)
    yield ratio
    scored = GaugeMetricFamily(
        "phasefit_changes_scored", "Changes of a split the latest analyzer run scored against its prediction."
    )
    if c.changes_scored is not None:
        scored.add_metric([], c.changes_scored)
    yield scored
    yield GaugeMetricFamily(
        "phasefit_analyzer_last_run_timestamp_seconds",
        "When the analyzer last finished a run (POSIX seconds; 0 if never).",
        value=c.last_run,
    )
