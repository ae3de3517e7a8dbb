"""The analyzer's current conclusions as Prometheus gauges, computed per scrape from the store.

Sources: the open findings (per worker: misplacement kinds and lost tokens) and the latest analyzer run's
summary (per pool: capacity, lost tokens, current and recommended prefill:decode ratio, drift; fleet total;
run time). A pool the summary does not cover falls back to its findings. Nothing is cached between scrapes
(client_python's custom-collector rule); a store that cannot be read yields ``phasefit_service_store_up 0``
instead of a failed scrape.

- ``phasefit_worker_misplaced{pool,worker,sku,role,model,kind}``: 1 per open misplacement finding (the
  series disappears when the finding resolves);
- ``phasefit_worker_lost_tokens_per_second{pool,worker,sku,role,model}``: the largest loss among the
  worker's open findings (findings of one worker overlap; they are not added up);
- ``phasefit_pool_*{pool}``, ``phasefit_fleet_lost_tokens_per_second``,
  ``phasefit_analyzer_last_run_timestamp_seconds`` (0 when the analyzer has never run, so staleness alerts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from fleet.contract import Finding, FindingKind, FindingStatus
from fleet.store.analysis import AnalysisSummary, latest_analysis_run
from fleet.store.findings import StoredFinding, list_findings
from fleet.store.queries import list_workers

log = logging.getLogger(__name__)

MISPLACEMENT_KINDS = frozenset({
    FindingKind.DECODE_ON_LOW_BANDWIDTH,
    FindingKind.PREFILL_ON_HIGH_BANDWIDTH,
    FindingKind.CAPACITY_ON_SMALL_MEMORY,
    FindingKind.ROLE_DRIFT,
})  # fmt: skip
MAX_OPEN_FINDINGS = 200_000
WorkerKey = tuple[str, str, str, str, str]  # pool, worker, sku, role, model


@dataclass
class Conclusions:
    misplaced: set[tuple[str, str, str, str, str, str]] = field(default_factory=set)
    worker_lost: dict[WorkerKey, float] = field(default_factory=dict)
    pool_lost: dict[str, float] = field(default_factory=dict)
    pool_capacity: dict[str, float] = field(default_factory=dict)
    pool_ratio: dict[str, float] = field(default_factory=dict)
    pool_recommended_ratio: dict[str, float] = field(default_factory=dict)
    pool_drift: dict[str, float] = field(default_factory=dict)
    fleet_lost: float = 0.0
    last_run: float = 0.0


def conclude(
    findings: Sequence[StoredFinding], models: Mapping[str, str], summary: AnalysisSummary | None
) -> Conclusions:
    """Pure: the gauges' values from open findings, worker -> model, and the latest run's summary."""
    out = Conclusions()
    open_findings = [s.finding for s in findings if s.finding.status is FindingStatus.OPEN]
    fallback_pool_lost: dict[str, float] = {}
    drifting: set[str] = set()
    for finding in open_findings:
        pool = finding.pool or ""
        if finding.kind is FindingKind.POOL_RATIO_DRIFT and finding.pool is not None:
            drifting.add(finding.pool)
        if finding.worker_id is None:
            continue
        key = _worker_key(finding, pool, models)
        if finding.kind in MISPLACEMENT_KINDS:
            out.misplaced.add((*key, finding.kind.value))
        out.worker_lost[key] = max(out.worker_lost.get(key, 0.0), finding.lost_tokens_per_s)
    for key, lost in out.worker_lost.items():
        fallback_pool_lost[key[0]] = fallback_pool_lost.get(key[0], 0.0) + lost
    covered: set[str] = set()
    if summary is not None:
        out.last_run = summary.run_at.timestamp()
        for summary_pool in summary.pools:
            name = summary_pool.pool
            covered.add(name)
            _put(out.pool_lost, name, summary_pool.lost_tokens_per_s)
            _put(out.pool_capacity, name, summary_pool.capacity_tokens_per_s)
            _put(out.pool_ratio, name, summary_pool.prefill_decode_ratio)
            _put(out.pool_recommended_ratio, name, summary_pool.recommended_prefill_decode_ratio)
            out.pool_drift[name] = 1.0 if summary_pool.ratio_drift else 0.0
    elif findings:
        out.last_run = max(s.updated_at.timestamp() for s in findings)
    for pool, lost in fallback_pool_lost.items():
        if pool and pool not in covered:
            out.pool_lost[pool] = lost
    for pool in drifting - covered:
        out.pool_drift[pool] = 1.0
    if summary is not None and summary.fleet_lost_tokens_per_s is not None:
        out.fleet_lost = summary.fleet_lost_tokens_per_s
    else:
        unpooled = sum(lost for key, lost in out.worker_lost.items() if not key[0])
        out.fleet_lost = sum(out.pool_lost.values()) + unpooled
    return out


def _worker_key(finding: Finding, pool: str, models: Mapping[str, str]) -> WorkerKey:
    worker = finding.worker_id or ""
    model = models.get(worker) or (pool.split("/", 1)[1] if "/" in pool else "")
    return (pool, worker, finding.gpu_sku or "", finding.role.value, model)


def _put(target: dict[str, float], key: str, value: float | None) -> None:
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
        yield from families(conclude(findings, models, run.summary if run is not None else None))


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
    lost = GaugeMetricFamily(
        "phasefit_worker_lost_tokens_per_second",
        "Tokens per second the best placement of the same GPUs would add at this worker "
        "(largest open finding).",
        labels=worker_labels,
    )
    for key, value in sorted(c.worker_lost.items()):
        lost.add_metric(list(key), value)
    yield lost
    pool_gauges = (
        ("lost_tokens_per_second", "Tokens per second the pool loses to placement.", c.pool_lost),
        ("capacity_tokens_per_second", "The pool's token capacity as placed.", c.pool_capacity),
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
    yield GaugeMetricFamily(
        "phasefit_fleet_lost_tokens_per_second",
        "Tokens per second the fleet loses to placement.",
        value=c.fleet_lost,
    )
    yield GaugeMetricFamily(
        "phasefit_analyzer_last_run_timestamp_seconds",
        "When the analyzer last finished a run (POSIX seconds; 0 if never).",
        value=c.last_run,
    )
