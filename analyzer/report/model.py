"""The weekly placement audit as data: what :mod:`analyzer.report.build` computes and the renderers print.

Every figure is a positive quantity with its unit in the field name; ranges are (low, high), never summed
from overlapping items; money is None when the catalog has no price (the renderers then say where to set
one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from analyzer.planning.standing import WhatIfRow
from analyzer.report.change_record import SCORED_KEY, Accuracy, PoolChange, scored_records
from analyzer.report.fleet_roofline import Roof, WorkerPoint
from analyzer.results.summary import GroupRecommendation, LatencyTargets, ModelInfo, RuleCheck

PRICE_NOT_SET = "price not set (PHASEFIT_CATALOG_PATH)"


@dataclass(frozen=True)
class WeekFigures:
    """One ISO week's headline figures, from the analyzer run over that week."""

    week: str
    since: datetime
    until: datetime
    analysed_hours: float  # hours of the week the analyzer had telemetry for
    lost_tokens: float  # capacity lost to placement over the week (tokens, not tokens/s)
    lost_tokens_low: float
    lost_tokens_high: float
    mean_lost_tokens_per_s: float
    capacity_tokens_per_s: float | None  # as placed, latest traffic mix
    best_tokens_per_s: float | None  # best placement of the same GPUs
    demand_tokens_per_s: float | None
    demand_limited: bool
    misplaced_workers: int
    open_findings: int
    findings_by_kind: dict[str, int]
    weekly_cost_usd: float | None
    misplacement_cost_usd: float | None  # per week, at the catalog's prices
    idle_cost_usd: float | None
    worst_ratio: str | None  # the pool furthest from its recommended prefill:decode split, "pool now -> best"
    telemetry_coverage: float | None  # share of GPU-hours with telemetry
    # What an SRE acts on: output (generated) tokens and requests lost over the week (None: not estimated);
    # lost_tokens above is the secondary total (prompt + output).
    lost_output_tokens: float | None = None
    lost_output_tokens_low: float | None = None
    lost_output_tokens_high: float | None = None
    lost_requests: float | None = None
    mean_lost_output_tokens_per_s: float | None = None
    mean_lost_requests_per_s: float | None = None
    judged_workers: int | None = None
    unjudged_workers: int = 0
    unjudged_reasons: dict[str, int] = field(default_factory=dict)
    capacity_unknown_pools: list[str] = field(default_factory=list)

    @property
    def placement_efficiency(self) -> float | None:
        if self.capacity_tokens_per_s and self.best_tokens_per_s:
            return min(1.0, self.capacity_tokens_per_s / self.best_tokens_per_s)
        return None


@dataclass(frozen=True)
class Action:
    """One recommended action (a finding with something to do), ranked by the output tokens/s it would
    recover, then requests/s; total (prompt + output) tokens/s is secondary. None: not estimated (the
    finding is not a throughput loss, or the analyzer could not size it), printed as "unknown"."""

    rank: int
    status: str  # new | persisting (seen the previous week too)
    kind: str
    subject: str  # worker id, or the pool for pool-level findings
    pool: str
    sku: str | None
    role: str
    bottleneck: str
    action: str
    detail: str
    counterpart: str | None
    # Total (prompt + output) tokens/s, secondary; None where the finding estimates no loss (telemetry
    # degraded, not serving, ...: the finding's 0 there is unknown, never "loses nothing").
    lost_tokens_per_s: float | None
    lost_low: float | None
    lost_high: float | None
    expected_gain_tokens_per_s: float | None
    evidence: str  # the counters it rests on, one line
    share_of_week: float | None  # fraction of the analysed time the finding held
    lost_output_tokens_per_s: float | None = None
    lost_output_low: float | None = None
    lost_output_high: float | None = None
    lost_requests_per_s: float | None = None


@dataclass(frozen=True)
class PoolRow:
    pool: str
    model: str
    precision: str | None
    serving: str
    gpus: int
    workers_by_sku_role: dict[str, dict[str, int]]
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    requests_per_s: float | None
    bound: str | None
    utilisation: float | None
    ratio_now: str | None
    ratio_recommended: str | None
    per_sku: dict[str, GroupRecommendation]
    ratio_drift: bool
    lost_tokens_per_s: float | None  # secondary: total (prompt + output); None: not estimated
    checks: list[RuleCheck]
    notes: list[str]
    lost_output_tokens_per_s: float | None = None
    lost_requests_per_s: float | None = None
    demand_limited: bool | None = None
    targets: LatencyTargets | None = None  # its latency targets and their measured attainment
    loss_basis: str | None = None  # measured, calibrated, transferred or model (None: loss not estimated)


@dataclass(frozen=True)
class DriftEvent:
    at: datetime
    pool: str
    what: str
    magnitude: float | None
    became: str  # the finding or alert it led to, or ""


@dataclass(frozen=True)
class FollowUp:
    """Last week's findings and what became of them."""

    subject: str
    kind: str
    state: str  # persisting | resolved
    lost_last_week: float | None  # output tokens/s; None: not estimated
    lost_this_week: float | None


@dataclass(frozen=True)
class NodeGap:
    node: str
    missing_hours: int
    hours: int


@dataclass(frozen=True)
class DataQuality:
    gpus: int
    gpu_hours_expected: float
    gpu_hours_with_telemetry: float
    gpu_hours_by_source: dict[str, float]
    nodes_with_gaps: list[NodeGap]
    lost_gpus: list[str]
    degraded_gpu_hours: float
    unattributed_gpus: int
    workers: int
    workers_role_unknown: int
    role_sources: dict[str, int]
    mig_instances: int
    physical_gpus: int | None = None  # whole GPUs plus those carved into MIG instances (None: unknown)
    mig_parent_gpus: int = 0

    @property
    def coverage(self) -> float | None:
        return self.gpu_hours_with_telemetry / self.gpu_hours_expected if self.gpu_hours_expected else None


@dataclass(frozen=True)
class HourlyLost:
    ts: datetime
    lost: float
    low: float
    high: float
    output: bool = False  # output tokens/s; False: total (prompt + output) tokens/s, where output is unknown


@dataclass(frozen=True)
class SkuHours:
    """GPU-hours of one SKU in the week, split by what the GPUs did."""

    sku: str
    hourly_price_usd: float | None
    well_placed: float
    misplaced: float
    unattributed: float

    @property
    def total(self) -> float:
        return self.well_placed + self.misplaced + self.unattributed


@dataclass(frozen=True)
class RatioPoint:
    pool: str
    start: datetime
    end: datetime
    provisioned: float | None  # prefill workers per decode worker in the segment
    recommended: float | None


@dataclass(frozen=True)
class AuditReport:
    week: str
    since: datetime
    until: datetime
    clusters: list[str]
    this_week: WeekFigures
    last_week: WeekFigures | None
    verdict: str
    actions: list[Action]
    considered: list[Action]  # findings with no action worth taking, and why
    pools: list[PoolRow]
    drift_events: list[DriftEvent]
    follow_up: list[FollowUp]
    quality: DataQuality
    roofs: list[Roof]
    points: list[WorkerPoint]
    hourly_lost: list[HourlyLost]
    hourly_lost_last_week: list[HourlyLost]
    ratios: list[RatioPoint]
    sku_hours: list[SkuHours]
    gpus_by_sku_role: dict[str, dict[str, int]]
    model_error: ModelInfo
    price_source: str
    fingerprint: str
    version: str
    appendix: list[Action] = field(default_factory=list)
    changes: list[PoolChange] = field(default_factory=list)  # of a split, since last week began
    accuracy: Accuracy = field(default_factory=lambda: Accuracy(0, None))
    what_ifs: list[WhatIfRow] = field(default_factory=list)  # the operator's standing what-ifs, answered
    sharded: bool = False  # merged from shards' stored runs

    def summary(self) -> dict[str, Any]:
        """The figures stored next to the report (reports.summary) and served by the API."""
        w = self.this_week
        previous = self.last_week
        return {
            "week": self.week,
            "from": self.since.isoformat(),
            "to": self.until.isoformat(),
            "clusters": self.clusters,
            "lost_output_tokens_week": _round(w.lost_output_tokens),
            "lost_output_tokens_week_low": _round(w.lost_output_tokens_low),
            "lost_output_tokens_week_high": _round(w.lost_output_tokens_high),
            "lost_requests_week": _round(w.lost_requests),
            "mean_lost_output_tokens_per_s": _round(w.mean_lost_output_tokens_per_s, 1),
            "mean_lost_requests_per_s": _round(w.mean_lost_requests_per_s, 4),
            "lost_tokens_week": round(w.lost_tokens),
            "lost_tokens_week_low": round(w.lost_tokens_low),
            "lost_tokens_week_high": round(w.lost_tokens_high),
            "mean_lost_tokens_per_s": round(w.mean_lost_tokens_per_s, 1),
            "demand_limited": w.demand_limited,
            "placement_efficiency": None
            if w.placement_efficiency is None
            else round(w.placement_efficiency, 4),
            "misplaced_workers": w.misplaced_workers,
            "judged_workers": w.judged_workers,
            "unjudged_workers": w.unjudged_workers,
            "unjudged_reasons": dict(w.unjudged_reasons),
            "open_findings": w.open_findings,
            "weekly_cost_usd": w.weekly_cost_usd,
            "misplacement_cost_per_week_usd": w.misplacement_cost_usd,
            "idle_cost_per_week_usd": w.idle_cost_usd,
            "price": self.price_source,
            "telemetry_coverage": None if w.telemetry_coverage is None else round(w.telemetry_coverage, 4),
            "actions": len(self.actions),
            "previous_week": None
            if previous is None
            else {
                "week": previous.week,
                "lost_output_tokens_week": _round(previous.lost_output_tokens),
                "lost_requests_week": _round(previous.lost_requests),
                "lost_tokens_week": round(previous.lost_tokens),
                "misplaced_workers": previous.misplaced_workers,
                "placement_efficiency": None
                if previous.placement_efficiency is None
                else round(previous.placement_efficiency, 4),
            },
            "fingerprint": self.fingerprint,
            SCORED_KEY: scored_records(self.changes),
            "changes": len(self.changes),
            "realized_error_median": None
            if self.accuracy.median_error is None
            else round(self.accuracy.median_error, 4),
            "realized_changes_scored": self.accuracy.scored,
        }


def _round(value: float | None, digits: int = 0) -> float | int | None:
    if value is None:
        return None
    return round(value, digits) if digits else round(value)
