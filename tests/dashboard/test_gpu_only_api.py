"""The GPU view through the service's API (``PHASEFIT_DASHBOARD_SOURCE=api``): ``ApiSource.gpu_view`` reads
``GET /v1/gpu-view`` of the real app (in process, FastAPI's TestClient) into the same analyzer GpuView the
store source builds, None where the service has none to show; the Fleet page shows it under AppTest."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dashboard.api_source import ApiSource
from dashboard.gpu_only import gpu_rows, read_gpu_view
from dashboard.views import NotServedError, Scope
from fleet.contract import EngineSample, GpuSample
from fleet.store.engine import make_engine
from tests.dashboard.test_gpu_only import assert_fleet_page_shows_the_gpu_view
from tests.phasefit.test_cli_analyze_gpu_only import (
    BLIND,
    BUSY,
    H100,
    IDLE,
    T0,
    _engine,
    _gpu,
    _gpu_only,
    _store,
)

SCOPE = Scope(T0, T0 + timedelta(hours=3))


def _client(url: str, **settings: Any) -> Iterator[ApiSource]:
    from fastapi.testclient import TestClient
    from prometheus_client import CollectorRegistry

    from phasefit.service.app import create_app
    from phasefit.service.settings import ServiceSettings

    engine = make_engine(url)
    app = create_app(
        ServiceSettings(database_url=url, dev=True, **settings), engine=engine, registry=CollectorRegistry()
    )
    with TestClient(app) as client:
        yield ApiSource(client)
    engine.dispose()


@pytest.fixture
def gpu_url(tmp_path: Path) -> str:
    return _store(tmp_path / "gpu.db", _gpu_only())


@pytest.fixture
def api(gpu_url: str) -> Iterator[ApiSource]:
    yield from _client(gpu_url)


def test_the_api_serves_the_view_the_store_builds(api: ApiSource, gpu_url: str) -> None:
    served = api.gpu_view(SCOPE)
    engine = make_engine(gpu_url)
    built = read_gpu_view(engine, SCOPE.since, SCOPE.until)
    engine.dispose()
    assert served is not None and built is not None
    assert served == built  # the same analyzer record, field for field (the range as RFC 3339 with a Z)
    rows = {r["GPU"]: r for r in gpu_rows(served)}
    assert rows[BUSY]["SM active %"] == 90.0 and rows[BUSY]["bottleneck"] == "compute"
    assert rows[IDLE]["idle GPU-hours"] == 2.0
    assert rows[BLIND]["SM active %"] is None and "DCGM_FI_PROF_SM_ACTIVE" in rows[BLIND]["why unknown"]


def test_nothing_to_show_is_none(api: ApiSource, tmp_path: Path) -> None:
    assert api.gpu_view(Scope(T0 + timedelta(days=2), T0 + timedelta(days=3))) is None  # no GPU sample
    records: list[GpuSample | EngineSample] = []
    for i in range(4):
        ts = T0 + timedelta(minutes=15 * (i + 1))
        records += [_gpu(ts, BUSY, 0, H100, worker_id="decode-0", sm_active=0.6), _engine(ts, "decode-0")]
    for source in _client(_store(tmp_path / "engine.db", records)):
        assert source.gpu_view(SCOPE) is None  # an engine reported: placement can be judged


def test_a_refused_read_says_to_set_a_token(gpu_url: str, tmp_path: Path) -> None:
    tokens = tmp_path / "read-tokens"
    tokens.write_text("some-read-token-0123456789abcdef\n")
    for source in _client(gpu_url, read_access="token", read_tokens_file=tokens):
        with pytest.raises(NotServedError, match="PHASEFIT_DASHBOARD_API_TOKEN"):
            source.gpu_view(SCOPE)


def test_the_fleet_page_shows_the_gpu_view_through_the_api(
    api: ApiSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import data

    monkeypatch.setattr(data, "_api_source", lambda *_: api)
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "api")
    # Its own URL: the pages' reads are cached per source URL for the process (st.cache_data), and another
    # test's seeded fleet must not answer for this one, nor this one for it.
    monkeypatch.setenv("PHASEFIT_DASHBOARD_API_URL", "http://gpu-only.phasefit.test")
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)
    assert_fleet_page_shows_the_gpu_view()
