"""The dashboard's reads straight from the store: inventory, findings, analyzer runs, alerts and reports
here; the time series (never raw samples row by row) in :mod:`dashboard.store_series`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sqlalchemy import Engine

from dashboard import analysis_reads, store_series
from dashboard.lost import lost_from_episodes
from dashboard.records import finding_view, report_listing, worker_view
from dashboard.views import (
    AlertView,
    AnalysisView,
    FindingView,
    GpuGroup,
    Inventory,
    LostPoint,
    ReportListing,
    Scope,
    TrafficPoint,
    UtilisationPoint,
    WorkerActivity,
)
from fleet.gpus import UNKNOWN_SKU_KEY, is_mig_key, mig_key
from fleet.store.alerts import list_alert_events
from fleet.store.findings import list_findings
from fleet.store.queries import list_gpus, list_workers, telemetry_span
from fleet.store.reports import get_report, list_reports

HOUR_S = 3600.0


def device_sku(sku: str | None, mig_profile: str | None) -> str | None:
    """The SKU key a device is counted under: a MIG instance stored under its parent's key (before MIG SKUs
    existed) under its own, ``<parent>/<profile>``; never the whole GPU's."""
    if sku is None or mig_profile is None or is_mig_key(sku) or sku == UNKNOWN_SKU_KEY:
        return sku
    return mig_key(sku, mig_profile)


MAX_FINDINGS = 20_000
MAX_ALERTS = 5_000


class StoreSource:
    """Reads for the dashboard over one SQLAlchemy engine (SQLite or PostgreSQL)."""

    kind = "store"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- inventory -------------------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        with self.engine.connect() as connection:
            gpus = list_gpus(connection)
            workers = list_workers(connection)
            data_from, data_until = telemetry_span(connection)
        gpu_sku = {g.gpu_uuid: device_sku(g.sku, g.mig_profile) for g in gpus}
        attributed: dict[str, set[str]] = {}
        for g in gpus:
            if g.worker_id is not None:
                attributed.setdefault(g.worker_id, set()).add(g.gpu_uuid)
        infos = []
        for w in workers:
            owned = set(w.gpu_uuids or ()) | attributed.get(w.worker_id, set())
            skus = Counter(gpu_sku[u] for u in sorted(owned) if gpu_sku.get(u))
            infos.append(worker_view(w, skus.most_common(1)[0][0] if skus else None))
        roles = {w.worker_id: w.role for w in workers}
        groups: Counter[tuple[str, str, str, bool]] = Counter()
        parents: set[str] = set()
        orphans = 0
        for g in gpus:
            role = roles.get(g.worker_id or "", "unattributed")
            sku = gpu_sku[g.gpu_uuid]
            mig = g.mig_profile is not None or g.parent_gpu_uuid is not None or is_mig_key(sku or "")
            groups[(sku or "unresolved", role, g.state, mig)] += 1
            if mig and g.parent_gpu_uuid is not None:
                parents.add(g.parent_gpu_uuid)
            elif mig:
                orphans += 1
        whole = sum(n for (_, _, _, mig), n in groups.items() if not mig)
        return Inventory(
            workers=tuple(infos),
            groups=tuple(
                GpuGroup(sku, role, state, n, mig=mig)
                for (sku, role, state, mig), n in sorted(groups.items())
            ),
            data_until=data_until,
            data_from=data_from,
            physical_gpus=None if orphans else whole + len(parents),
            mig_parent_gpus=len(parents),
        )

    # --- time series -----------------------------------------------------------------------------------
    def utilisation(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[UtilisationPoint]:
        return store_series.utilisation(self.engine, scope, worker_ids)

    def worker_activity(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[WorkerActivity]:
        return store_series.worker_activity(self.engine, scope, worker_ids)

    def traffic(self, scope: Scope, pools: dict[str, list[str]]) -> list[TrafficPoint]:
        return store_series.traffic(self.engine, scope, pools)

    # --- analyzer conclusions --------------------------------------------------------------------------
    def findings(self, scope: Scope) -> list[FindingView]:
        with self.engine.connect() as connection:
            stored = list_findings(connection, since=scope.since, until=scope.until, limit=MAX_FINDINGS)
        return [finding_view(s) for s in stored if scope.pool_matches(s.finding.pool)]

    def lost_tokens(self, scope: Scope) -> list[LostPoint]:
        """Lost tokens/s per hour: the stored analyzer runs where there are any, else the findings."""
        with self.engine.connect() as connection:
            from_runs = analysis_reads.lost_series(connection, scope)
        if from_runs is not None:
            return from_runs
        return lost_from_episodes(self.findings(scope), scope.since, scope.until, HOUR_S)

    def analysis(self, scope: Scope) -> AnalysisView | None:
        with self.engine.connect() as connection:
            return analysis_reads.latest(connection, scope.since, scope.until)

    # --- alerts and reports ----------------------------------------------------------------------------
    def alerts(self, scope: Scope) -> list[AlertView]:
        with self.engine.connect() as connection:
            events = list_alert_events(connection, limit=MAX_ALERTS)
        out = []
        for stored in events:
            e = stored.event
            if e.starts_at >= scope.until or (e.ends_at is not None and e.ends_at < scope.since):
                continue
            labels = {str(k): str(v) for k, v in e.labels.items()}
            if not _alert_in_scope(labels, scope):
                continue
            out.append(
                AlertView(
                    fingerprint=e.fingerprint,
                    alertname=labels.get("alertname", ""),
                    status=e.status,
                    severity=labels.get("severity", ""),
                    starts_at=e.starts_at,
                    ends_at=e.ends_at,
                    summary=str(e.annotations.get("summary", "")),
                    labels=labels,
                    receiver=e.receiver,
                )
            )
        return out

    def reports(self) -> list[ReportListing]:
        with self.engine.connect() as connection:
            return [report_listing(r) for r in list_reports(connection)]

    def report_body(self, week: str) -> str | None:
        with self.engine.connect() as connection:
            found = get_report(connection, week)
        return found.body if found is not None else None


def _alert_in_scope(labels: dict[str, str], scope: Scope) -> bool:
    if scope.cluster is not None and labels.get("cluster") not in (None, scope.cluster):
        return False
    pool = labels.get("pool")
    if pool is not None:
        return scope.pool_matches(pool)
    return scope.model is None or labels.get("model") in (None, scope.model)
