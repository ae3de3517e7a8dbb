"""Cached reads for the pages: the store or the service's API (``PHASEFIT_DASHBOARD_SOURCE``), each query kept
for ``PHASEFIT_DASHBOARD_CACHE_TTL_S`` seconds by ``st.cache_data``.

The engine or HTTP client is a ``st.cache_resource`` (one per process and URL). Query results are cached
per (source, arguments); the source object itself is passed as an ``_``-prefixed argument so it is not
hashed. Settings are read when a page runs (:func:`open_reads`), never at import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import streamlit as st

from dashboard.settings import DashboardSettings
from dashboard.views import (
    AlertView,
    AnalysisView,
    FindingView,
    Inventory,
    LostPoint,
    ReportListing,
    Scope,
    TrafficPoint,
    UtilisationPoint,
    WorkerActivity,
)

if TYPE_CHECKING:
    from fleet.catalog import Catalog

T = TypeVar("T")


class DataSource(Protocol):
    kind: str

    def inventory(self) -> Inventory: ...
    def utilisation(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[UtilisationPoint]: ...
    def worker_activity(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[WorkerActivity]: ...
    def traffic(self, scope: Scope, pools: dict[str, list[str]]) -> list[TrafficPoint]: ...
    def findings(self, scope: Scope) -> list[FindingView]: ...
    def lost_tokens(self, scope: Scope) -> list[LostPoint]: ...
    def analysis(self, scope: Scope) -> AnalysisView | None: ...
    def alerts(self, scope: Scope) -> list[AlertView]: ...
    def reports(self) -> list[ReportListing]: ...
    def report_body(self, week: str) -> str | None: ...


@st.cache_resource(show_spinner=False)
def _store_source(database_url: str) -> DataSource:
    from dashboard.store_source import StoreSource
    from fleet.store.engine import make_engine

    return StoreSource(make_engine(database_url))


@st.cache_resource(show_spinner=False)
def _api_source(api_url: str, token: str | None, timeout_s: float) -> DataSource:
    import httpx

    from dashboard.api_source import ApiSource

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return ApiSource(httpx.Client(base_url=api_url, headers=headers, timeout=timeout_s))


# The cached reads: plain functions of (source key, arguments); ``_source`` is not hashed.
def _inventory(key: str, _source: DataSource) -> Inventory:
    return _source.inventory()


def _utilisation(
    key: str, _source: DataSource, scope: Scope, ids: tuple[str, ...] | None
) -> list[UtilisationPoint]:
    return _source.utilisation(scope, ids)


def _activity(
    key: str, _source: DataSource, scope: Scope, ids: tuple[str, ...] | None
) -> list[WorkerActivity]:
    return _source.worker_activity(scope, ids)


def _traffic(
    key: str, _source: DataSource, scope: Scope, pools: tuple[tuple[str, tuple[str, ...]], ...]
) -> list[TrafficPoint]:
    return _source.traffic(scope, {pool: list(ids) for pool, ids in pools})


def _findings(key: str, _source: DataSource, scope: Scope) -> list[FindingView]:
    return _source.findings(scope)


def _lost(key: str, _source: DataSource, scope: Scope) -> list[LostPoint]:
    return _source.lost_tokens(scope)


def _analysis(key: str, _source: DataSource, scope: Scope) -> AnalysisView | None:
    return _source.analysis(scope)


def _alerts(key: str, _source: DataSource, scope: Scope) -> list[AlertView]:
    return _source.alerts(scope)


def _reports(key: str, _source: DataSource) -> list[ReportListing]:
    return _source.reports()


def _report_body(key: str, _source: DataSource, week: str) -> str | None:
    return _source.report_body(week)


class Reads:
    """The pages' reads over one source, each cached for the configured TTL."""

    def __init__(self, source: DataSource, key: str, ttl_s: int) -> None:
        self.source = source
        self.key = key

        def cached(fn: Callable[..., T]) -> Callable[..., T]:
            return st.cache_data(ttl=ttl_s, show_spinner=False, max_entries=256)(fn)

        self._inventory = cached(_inventory)
        self._utilisation = cached(_utilisation)
        self._activity = cached(_activity)
        self._traffic = cached(_traffic)
        self._findings = cached(_findings)
        self._lost = cached(_lost)
        self._analysis = cached(_analysis)
        self._alerts = cached(_alerts)
        self._reports = cached(_reports)
        self._report_body = cached(_report_body)

    @property
    def kind(self) -> str:
        return self.source.kind

    def inventory(self) -> Inventory:
        return self._inventory(self.key, self.source)

    def utilisation(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[UtilisationPoint]:
        return self._utilisation(self.key, self.source, scope, _ids(worker_ids))

    def worker_activity(self, scope: Scope, worker_ids: Sequence[str] | None) -> list[WorkerActivity]:
        return self._activity(self.key, self.source, scope, _ids(worker_ids))

    def traffic(self, scope: Scope, pools: dict[str, list[str]]) -> list[TrafficPoint]:
        frozen = tuple(sorted((pool, tuple(sorted(ids))) for pool, ids in pools.items()))
        return self._traffic(self.key, self.source, scope, frozen)

    def findings(self, scope: Scope) -> list[FindingView]:
        return self._findings(self.key, self.source, scope)

    def lost_tokens(self, scope: Scope) -> list[LostPoint]:
        return self._lost(self.key, self.source, scope)

    def analysis(self, scope: Scope) -> AnalysisView | None:
        return self._analysis(self.key, self.source, scope)

    def alerts(self, scope: Scope) -> list[AlertView]:
        return self._alerts(self.key, self.source, scope)

    def reports(self) -> list[ReportListing]:
        return self._reports(self.key, self.source)

    def report_body(self, week: str) -> str | None:
        return self._report_body(self.key, self.source, week)


def _ids(worker_ids: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(sorted(worker_ids)) if worker_ids is not None else None


def open_reads(settings: DashboardSettings | None = None, database_url: str | None = None) -> Reads:
    """The reads the settings choose (environment ``PHASEFIT_DASHBOARD_*`` and ``PHASEFIT_DATABASE_URL``)."""
    settings = settings or DashboardSettings()
    if settings.source == "api":
        token = settings.api_token.get_secret_value() if settings.api_token else None
        source = _api_source(settings.api_url, token, settings.api_timeout_s)
        return Reads(source, f"api:{settings.api_url}", settings.cache_ttl_s)
    if database_url is None:
        from fleet.settings import Settings

        database_url = Settings().database_url
    return Reads(_store_source(database_url), f"store:{database_url}", settings.cache_ttl_s)


def describe_source(reads: Reads) -> str:
    """One line for the sidebar: where the figures come from (the store URL without its password)."""
    if reads.kind == "api":
        return f"API {reads.key.removeprefix('api:')}"
    from sqlalchemy.engine import make_url

    return f"store {make_url(reads.key.removeprefix('store:')).render_as_string(hide_password=True)}"


@st.cache_resource(show_spinner=False)
def _catalog(extra_path: str | None) -> Catalog:
    from pathlib import Path

    from fleet.catalog import load_catalog

    return load_catalog(Path(extra_path) if extra_path else None)


def catalog() -> Catalog:
    """The GPU and model catalogs (built-in data plus PHASEFIT_CATALOG_PATH), loaded once per process."""
    from fleet.settings import Settings

    path = Settings().catalog_path
    return _catalog(str(path) if path is not None else None)
