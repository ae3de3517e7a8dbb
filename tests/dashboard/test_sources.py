"""The dashboard's two data sources: the store directly, and the phasefit service's API (the real app, in
process through FastAPI's TestClient), on the same seeded store; plus the settings that choose them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from dashboard.api_source import ApiSource
from dashboard.settings import DashboardSettings
from dashboard.store_source import StoreSource
from dashboard.views import NotServedError, Scope
from fleet.store.engine import make_engine
from tests.dashboard.seed import Seeded


@pytest.fixture
def store(seeded: Seeded) -> Iterator[StoreSource]:
    engine = make_engine(seeded.url)
    yield StoreSource(engine)
    engine.dispose()


@pytest.fixture
def api(seeded: Seeded) -> Iterator[ApiSource]:
    from fastapi.testclient import TestClient
    from prometheus_client import CollectorRegistry

    from phasefit.service.app import create_app
    from phasefit.service.settings import ServiceSettings

    engine = make_engine(seeded.url)
    settings = ServiceSettings(database_url=seeded.url, dev=True)
    with TestClient(create_app(settings, engine=engine, registry=CollectorRegistry())) as client:
        yield ApiSource(client)
    engine.dispose()


def week(seeded: Seeded, **filters: Any) -> Scope:
    return Scope(seeded.start, seeded.end + timedelta(hours=1), **filters)


def test_store_inventory_and_time_span(store: StoreSource, seeded: Seeded) -> None:
    inventory = store.inventory()
    assert len(inventory.workers) == 32 and sum(g.gpus for g in inventory.groups) == 64
    # one cluster, the one the simulated collectors report (never parsed from node names)
    assert len(inventory.clusters) == 1 and inventory.clusters != ["node"]
    assert inventory.models == ["meta-llama/Llama-3.1-70B-Instruct"]
    assert inventory.data_from == seeded.start
    assert inventory.data_until is not None and seeded.end <= inventory.data_until <= seeded.end + timedelta(
        hours=1
    )
    skus = {w.record.worker_id: w.sku for w in inventory.workers}
    assert skus["node03/decode-1"] == "H100-SXM" and skus["node04/decode-1"] == "H200-SXM"


def test_store_reads_follow_the_model_filter(store: StoreSource, seeded: Seeded) -> None:
    assert store.findings(week(seeded, model="another/model")) == []
    assert store.findings(week(seeded, cluster="elsewhere")) == []
    assert len(store.findings(week(seeded, model="meta-llama/Llama-3.1-70B-Instruct"))) == 4


def test_utilisation_rollups_and_raw_agree(store: StoreSource, seeded: Seeded) -> None:
    """The last hours come from raw samples when rollups stop short: the two paths give the same means."""
    from fleet.store.schema import GpuSample1hRow, table_of

    scope = week(seeded)
    from_rollups = {(p.ts, p.sku, p.role): p for p in store.utilisation(scope, None)}
    cut = seeded.start + timedelta(hours=48)
    rollups = table_of(GpuSample1hRow)
    engine = make_engine(seeded.url)
    copy = make_engine("sqlite://")
    # A copy of the store whose rollups end at `cut`: the later hours are read from raw samples.
    with engine.connect() as source, copy.begin() as target:
        raw = source.connection.driver_connection
        raw.backup(target.connection.driver_connection)
    with copy.begin() as connection:
        connection.execute(rollups.delete().where(rollups.c.bucket >= cut))
    mixed = {(p.ts, p.sku, p.role): p for p in StoreSource(copy).utilisation(scope, None)}
    engine.dispose()
    copy.dispose()
    later = [key for key in from_rollups if key[0] >= cut]
    assert later and set(from_rollups) == set(mixed)
    for key in later:
        assert mixed[key].tensor_active == pytest.approx(from_rollups[key].tensor_active, rel=1e-9)
        assert mixed[key].gpus == from_rollups[key].gpus


def test_worker_activity_matches_the_counters(store: StoreSource, seeded: Seeded) -> None:
    activity = {a.worker_id: a for a in store.worker_activity(week(seeded), None)}
    assert len(activity) == 32
    decode = activity["node03/decode-1"]
    prefill = activity["node00/prefill-1"]
    assert decode.dram_active is not None and decode.tensor_active is not None
    assert decode.dram_active > 0.3 > decode.tensor_active  # memory-bound
    assert prefill.tensor_active is not None and prefill.dram_active is not None
    assert prefill.tensor_active > prefill.dram_active  # compute-bound
    assert decode.gpu_hours == pytest.approx(2 * 72, rel=0.05)  # two GPUs over three days


def test_api_serves_the_same_findings_and_reports(store: StoreSource, api: ApiSource, seeded: Seeded) -> None:
    scope = week(seeded)
    through_api = sorted(
        (f.id, f.kind, f.worker_id, round(f.lost_tokens_per_s, 3)) for f in api.findings(scope)
    )
    direct = sorted((f.id, f.kind, f.worker_id, round(f.lost_tokens_per_s, 3)) for f in store.findings(scope))
    assert through_api == direct and len(direct) == 4
    assert [r.week for r in api.reports()] == [r.week for r in store.reports()] == ["2026-W48"]
    assert api.report_body("2026-W48") == store.report_body("2026-W48")
    assert api.report_body("2026-W47") is None
    inventory = api.inventory()
    assert len(inventory.workers) == 32 and sum(g.gpus for g in inventory.groups) == 64
    lost = [p for p in api.lost_tokens(scope) if p.lost is not None]
    assert lost and all(p.lost > 0 for p in lost)


def test_api_says_what_it_does_not_serve(api: ApiSource, seeded: Seeded) -> None:
    for read in (
        lambda: api.utilisation(week(seeded), None),
        lambda: api.alerts(week(seeded)),
        lambda: api.traffic(week(seeded), {}),
        lambda: api.worker_activity(week(seeded), None),
    ):
        with pytest.raises(NotServedError, match="PHASEFIT_DASHBOARD_SOURCE=store"):
            read()


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "api")
    monkeypatch.setenv("PHASEFIT_DASHBOARD_API_URL", "https://phasefit.internal:8443/")
    monkeypatch.setenv("PHASEFIT_DASHBOARD_CACHE_TTL_S", "15")
    settings = DashboardSettings()
    assert (settings.source, settings.api_url, settings.cache_ttl_s, settings.host) == (
        "api",
        "https://phasefit.internal:8443",
        15,
        "127.0.0.1",
    )
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "prometheus")
    with pytest.raises(ValidationError):
        DashboardSettings()
    with pytest.raises(ValidationError, match="http"):
        DashboardSettings(source="api", api_url="phasefit:8000")
