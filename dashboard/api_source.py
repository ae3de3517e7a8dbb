"""The dashboard's reads through the phasefit service's query API (``PHASEFIT_DASHBOARD_SOURCE=api``).

The API serves the fleet's GPU groups, workers, findings, lost tokens over time, the GPU view of a fleet
without a serving engine and the weekly reports. It
does not serve fleet-wide activity series, per-worker counter means, traffic per pool, analyzer summaries
or alert events; those reads raise :class:`~dashboard.views.NotServedError` with what to do instead, and the
page shows that message where the chart would be.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from dashboard import api_wire
from dashboard.records import finding_view, report_listing, worker_view
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
)
from fleet.gpus import is_mig_key

if TYPE_CHECKING:
    from analyzer.telemetry.gpu_view import GpuView

PAGE = 1000
MAX_PAGES = 200
GPU_VIEW = "/v1/gpu-view"


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
        return self._json(path, self.client.get(path, params=params))

    def _json(self, path: str, response: httpx.Response) -> Any:
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
            page = api_wire.Page.model_validate(self._get(path, {**params, "limit": PAGE, "offset": offset}))
            yield from page.items
            if not page.next:
                return
            offset += PAGE

    def inventory(self) -> Inventory:
        fleet = api_wire.FleetSummary.model_validate(self._get("/v1/fleet"))
        workers = tuple(
            worker_view(api_wire.WORKER.validate_python(item), sku=None)  # the API names no GPU's SKU
            for item in self._pages("/v1/workers", {})
        )
        groups = tuple(GpuGroup(g.sku, g.role, g.state, g.gpus, mig=is_mig_key(g.sku)) for g in fleet.groups)
        # A service too old to report the telemetry span: pages anchor their range on the current time.
        return Inventory(
            workers=workers, groups=groups, data_until=fleet.data_until, data_from=fleet.data_from
        )

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
        served = (api_wire.stored_finding(item) for item in self._pages("/v1/findings", params))
        return [finding_view(s) for s in served if scope.pool_matches(s.finding.pool)]

    def lost_tokens(self, scope: Scope) -> list[LostPoint]:
        params = {"from": scope.since.isoformat(), "to": scope.until.isoformat(), "step": "1h"}
        series = api_wire.LostTokensSeries.model_validate(self._get("/v1/lost-tokens", params))
        points = []
        for p in series.points:
            if scope.cluster is None and scope.model is None:
                points.append(
                    LostPoint(p.ts, p.lost_tokens_per_s, p.lost_tokens_per_s_low, p.lost_tokens_per_s_high)
                )
                continue
            pools = [lost for pool, lost in p.pools.items() if scope.pool_matches(pool)]
            points.append(LostPoint(p.ts, sum(pools) if pools else None, None, None))
        return points

    def gpu_view(self, scope: Scope) -> GpuView | None:
        """The GPU view over the scope's range, or None where the service has none to show (404: an engine
        reported, so placement can be judged, or no GPU sample lies in the range)."""
        params = {"from": scope.since.isoformat(), "to": scope.until.isoformat()}
        response = self.client.get(GPU_VIEW, params=params)
        if response.status_code == 404:
            return None
        return api_wire.GpuView.model_validate(self._json(GPU_VIEW, response)).record()

    def reports(self) -> list[ReportListing]:
        return [
            report_listing(api_wire.REPORT_INFO.validate_python(item))
            for item in self._pages("/v1/reports", {})
        ]

    def report_body(self, week: str) -> str | None:
        response = self.client.get(f"/v1/reports/{week}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return api_wire.REPORT.validate_python(response.json()).body
