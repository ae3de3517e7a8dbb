"""The store's records (workers, findings, reports) as the dashboard's views: one conversion for both data
sources, since the store returns them typed (:mod:`fleet.store`) and the service's API serves the same
records as JSON (validated back into them by :mod:`dashboard.api_wire`).
"""

from __future__ import annotations

from analyzer.pools.pool import cluster_of
from dashboard.views import FindingView, ReportListing, WorkerView
from fleet.inventory import WorkerRecord
from fleet.store.findings import StoredFinding
from fleet.store.reports import ReportInfo


def worker_view(w: WorkerRecord, sku: str | None) -> WorkerView:
    """A worker; ``sku``: the SKU most of its GPUs resolve to, None where unknown."""
    return WorkerView(record=w, cluster=cluster_of(w.node, w.cluster), sku=sku)


def finding_view(stored: StoredFinding) -> FindingView:
    f = stored.finding
    r = f.recommendation
    return FindingView(
        id=stored.id,
        kind=f.kind.value,
        status=f.status.value,
        severity=f.severity.value,
        worker_id=f.worker_id,
        pool=f.pool,
        gpu_sku=f.gpu_sku,
        role=f.role.value,
        bottleneck=f.bottleneck.value,
        evidence=dict(f.evidence),
        tokens_per_s=f.tokens_per_s,
        lost_tokens_per_s=f.lost_tokens_per_s,
        lost_tokens_per_s_low=f.lost_tokens_per_s_low,
        lost_tokens_per_s_high=f.lost_tokens_per_s_high,
        action=r.action if r else None,
        action_detail=r.detail if r else "",
        counterpart_worker_id=r.counterpart_worker_id if r else None,
        target_sku=r.target_sku if r else None,
        expected_gain_tokens_per_s=r.expected_gain_tokens_per_s if r else None,
        first_seen=f.first_seen,
        last_seen=f.last_seen,
        resolved_at=stored.resolved_at,
        lost_output_tokens_per_s=f.lost_output_tokens_per_s,
        lost_output_tokens_per_s_low=f.lost_output_tokens_per_s_low,
        lost_output_tokens_per_s_high=f.lost_output_tokens_per_s_high,
        lost_requests_per_s=f.lost_requests_per_s,
    )


def report_listing(info: ReportInfo) -> ReportListing:
    return ReportListing(info.week, info.format, info.created_at, dict(info.summary))
