"""The phasefit service's JSON as typed records, for :mod:`dashboard.api_source`.

Workers, findings and reports are the store's own records (:mod:`fleet.store`, ``fleet.contract.Finding``)
and are validated back into them. The rest is read through small views of ``phasefit.service.models``, by
its names: the dashboard may not import ``phasefit`` (docs/architecture.md). Fields a view does not name
are ignored, so a service that gains fields still serves an older dashboard.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from analyzer.telemetry import gpu_view as view
from fleet.contract import Finding
from fleet.inventory import WorkerRecord
from fleet.store.findings import StoredFinding
from fleet.store.reports import Report, ReportInfo

WORKER = TypeAdapter(WorkerRecord)
REPORT_INFO = TypeAdapter(ReportInfo)
REPORT = TypeAdapter(Report)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Page(_Wire):
    """One page of a list (``Page``): its items, and whether another page follows."""

    items: list[dict[str, Any]]
    next: str | None = None


class FleetGroup(_Wire):
    sku: str
    role: str
    state: str
    gpus: int


class FleetSummary(_Wire):
    groups: list[FleetGroup]
    data_from: datetime | None = None  # absent from services before the field existed
    data_until: datetime | None = None


class LostTokensPoint(_Wire):
    ts: datetime
    lost_tokens_per_s: float | None = None
    lost_tokens_per_s_low: float | None = None
    lost_tokens_per_s_high: float | None = None
    pools: dict[str, float] = {}


class LostTokensSeries(_Wire):
    points: list[LostTokensPoint]


class _FindingEnvelope(_Wire):
    """What ``FindingOut`` adds to a finding: the store's id and episode times."""

    id: int
    resolved_at: datetime | None = None
    updated_at: datetime


def stored_finding(item: dict[str, Any]) -> StoredFinding:
    """A served finding as the store holds it (its times as stored: never refused for their year)."""
    envelope = _FindingEnvelope.model_validate(item)
    fields = {name: value for name, value in item.items() if name in Finding.model_fields}
    finding = Finding.model_validate(fields, context={"stored": True})
    return StoredFinding(envelope.id, finding, envelope.resolved_at, envelope.updated_at)


class GpuView(_Wire):
    """``GET /v1/gpu-view``: its rows are validated into the analyzer's own records
    (:mod:`analyzer.telemetry.gpu_view`), so the page shows the same view from either source."""

    from_: datetime = Field(alias="from")
    to: datetime
    reason: str
    gpus: list[view.GpuRow]
    skus: list[view.SkuRow]
    totals: view.GpuTotals
    warnings: list[str] = []
    profiling_help: str | None = None
    engine_metrics_needed: list[view.EngineMetrics] = []
    engine_join_help: str = view.ENGINE_JOIN_HELP

    def record(self) -> view.GpuView:
        """The analyzer's GpuView, its range written as the store source writes it (RFC 3339, UTC, Z)."""
        from analyzer.results.summary import iso

        return view.GpuView(
            from_=iso(self.from_.timestamp()),
            to=iso(self.to.timestamp()),
            reason=self.reason,
            gpus=list(self.gpus),
            skus=list(self.skus),
            totals=self.totals,
            warnings=list(self.warnings),
            profiling_help=self.profiling_help,
            engine_metrics_needed=list(self.engine_metrics_needed),
            engine_join_help=self.engine_join_help,
        )
