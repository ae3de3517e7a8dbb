"""The phasefit service's JSON as typed records, for :mod:`dashboard.api_source`.

Workers, findings and reports are the store's own records (:mod:`fleet.store`, ``fleet.contract.Finding``)
and are validated back into them. The rest is read through small views of ``phasefit.service.models``, by
its names: the dashboard may not import ``phasefit`` (docs/architecture.md). Fields a view does not name
are ignored, so a service that gains fields still serves an older dashboard.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

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
