"""The dashboard's reads through the phasefit service's query API (``PHASEFIT_DASHBOARD_SOURCE=api``).

The API serves the fleet's GPU groups, workers, findings, lost tokens over time and the weekly reports. It
does not serve fleet-wide activity series, per-worker counter means, traffic per pool, analyzer summaries
or alert events; those reads raise :class:`~dashboard.views.NotServedError` with what to do instead, and the
page shows that message where the chart would be.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import httpx

from dashboard.views import (
    AlertView,
    AnalysisView,
    FindingView,
    GpuGroup,
    Inventory,
    LostPoint,
    NotServedError,
    ReportListing,
    Scope,
    TrafficPoint,
    UtilisationPoint,
    WorkerActivity,
    WorkerInfo,
)
from fleet.gpus import is_mig_key

PAGE = 1000
MAX_PAGES = 200


def _cluster(node: str, reported: str | None) -> str:
    from analyzer.pools.pool import cluster_of

    return cluster_of(node, reported)


def _ts(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _not_served(what: str) -> NotServedError:
    return NotServedError(
        f"The phasefit API does not serve {what}. Read the store directly instead: "
        "PHASEFIT_DASHBOARD_SOURCE=store with PHASEFIT_DATABASE_URL."
    )


class ApiSource:
    """Reads for the dashboard over HTTP; ``client`` is an ``httpx.Client`` with the base URL and token."""

    kind = "api"

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = self.client.get(path, params=params)
        if response.status_code in (401, 403):
            raise NotServedError(
                f"the phasefit service refused the dashboard's read of {path} ({response.status_code}): "
                "set PHASEFIT_DASHBOARD_API_TOKEN to a read token"
            )
        response.raise_for_status()
        return response.json()

    def _pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        offset = 0
        for _ in range(MAX_PAGES):
            page = self._get(path, {**params, "limit": PAGE, "offset": offset})
            yield from page["items"]
            if not page.get("next"):
                return
            offset += PAGE

    def inventory(self) -> Inventory:
        fleet = self._get("/v1/fleet")
        workers = tuple(
            WorkerInfo(
                worker_id=w["worker_id"],
                node=w["node"],
                cluster=_cluster(w["node"], w.get("cluster")),
                model=w["model"],
                role=w["role"],
                role_source=w["role_source"],
                engine=w["engine"],
                precision=w["precision"],
                tp=int(w["tp"]) if w.get("tp") is not None else None,  # unknown, never defaulted
                sku=None,
                deployment=w.get("deployment"),
            )
            for w in self._pages("/v1/workers", {})
        )
        groups = tuple(
            GpuGroup(g["sku"], g["role"], g["state"], int(g["gpus"]), mig=is_mig_key(g["sku"]))
            for g in fleet["groups"]
        )
        # The API reports no telemetry span: pages anchor their time range on the current time.
        return Inventory(workers=workers, groups=groups, data_until=None)

    def utilisation(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[UtilisationPoint]:
        raise _not_served("fleet-wide activity over time")

    def worker_activity(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[WorkerActivity]:
        raise _not_served("per-worker counter means (the roofline)")

    def traffic(self, scope: Scope, pools: dict[str, list[str]]) -> list[TrafficPoint]:
        raise _not_served("traffic per pool over time")

    def analysis(self, scope: Scope) -> AnalysisView | None:
        raise _not_served("the analyzer's run summaries (pool ratios, drift events)")

    def alerts(self, scope: Scope) -> list[AlertView]:
        raise _not_served("Alertmanager events")

    def findings(self, scope: Scope) -> list[FindingView]:
        params = {"from": scope.since.isoformat(), "to": scope.until.isoformat()}
        out = []
        for item in self._pages("/v1/findings", params):
            if scope.pool_matches(item.get("pool")):
                out.append(_finding(item))
        return out

    def lost_tokens(self, scope: Scope) -> list[LostPoint]:
        params = {"from": scope.since.isoformat(), "to": scope.until.isoformat(), "step": "1h"}
        series = self._get("/v1/lost-tokens", params)
        points = []
        for p in series["points"]:
            ts = _ts(p["ts"])
            assert ts is not None
            if scope.cluster is None and scope.model is None:
                points.append(
                    LostPoint(
                        ts, p["lost_tokens_per_s"], p["lost_tokens_per_s_low"], p["lost_tokens_per_s_high"]
                    )
                )
                continue
            pools = [v for k, v in p.get("pools", {}).items() if scope.pool_matches(k)]
            points.append(LostPoint(ts, sum(pools) if pools else None, None, None))
        return points

    def reports(self) -> list[ReportListing]:
        out = []
        for r in self._pages("/v1/reports", {}):
            created = _ts(r["created_at"])
            assert created is not None
            out.append(ReportListing(r["week"], r["format"], created, r.get("summary") or {}))
        return out

    def report_body(self, week: str) -> str | None:
        response = self.client.get(f"/v1/reports/{week}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return str(response.json()["body"])


def _finding(item: dict[str, Any]) -> FindingView:
    r = item.get("recommendation") or {}
    first, last = _ts(item["first_seen"]), _ts(item["last_seen"])
    assert first is not None and last is not None
    return FindingView(
        id=int(item["id"]),
        kind=item["kind"],
        status=item["status"],
        severity=item["severity"],
        worker_id=item.get("worker_id"),
        pool=item.get("pool"),
        gpu_sku=item.get("gpu_sku"),
        role=item["role"],
        bottleneck=item["bottleneck"],
        evidence=dict(item.get("evidence") or {}),
        tokens_per_s=item.get("tokens_per_s"),
        lost_tokens_per_s=float(item["lost_tokens_per_s"]),
        lost_tokens_per_s_low=float(item["lost_tokens_per_s_low"]),
        lost_tokens_per_s_high=float(item["lost_tokens_per_s_high"]),
        action=r.get("action"),
        action_detail=r.get("detail", ""),
        counterpart_worker_id=r.get("counterpart_worker_id"),
        target_sku=r.get("target_sku"),
        expected_gain_tokens_per_s=r.get("expected_gain_tokens_per_s"),
        first_seen=first,
        last_seen=last,
        resolved_at=_ts(item.get("resolved_at")),
        lost_output_tokens_per_s=_opt(item.get("lost_output_tokens_per_s")),
        lost_output_tokens_per_s_low=_opt(item.get("lost_output_tokens_per_s_low")),
        lost_output_tokens_per_s_high=_opt(item.get("lost_output_tokens_per_s_high")),
        lost_requests_per_s=_opt(item.get("lost_requests_per_s")),
    )


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)
