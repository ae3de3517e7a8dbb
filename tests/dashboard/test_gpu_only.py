"""The dashboard's Fleet page on a store with GPU samples and no engine: the GPU view (per SKU and per GPU
activity, idle GPU-hours, unknown activity empty, never 0), names shown as the text they are."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.gpu_only import gpu_rows, read_gpu_view
from fleet.store.engine import make_engine
from tests.phasefit.test_cli_analyze_gpu_only import BLIND, BUSY, IDLE, T0, _gpu_only, _store

PAGES = Path(__file__).resolve().parents[2] / "dashboard" / "app_pages"


@pytest.fixture
def gpu_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = _store(tmp_path / "gpu.db", _gpu_only())
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", url)
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "store")
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)
    return url


def test_read_gpu_view_rows_keep_unknown_empty(gpu_store: str) -> None:
    from datetime import timedelta

    engine = make_engine(gpu_store)
    view = read_gpu_view(engine, T0, T0 + timedelta(hours=3))
    engine.dispose()
    assert view is not None
    rows = {r["GPU"]: r for r in gpu_rows(view)}
    assert rows[BUSY]["SM active %"] == 90.0 and rows[BUSY]["bottleneck"] == "compute"
    assert rows[IDLE]["idle GPU-hours"] == 2.0
    assert rows[BLIND]["SM active %"] is None and "DCGM_FI_PROF_SM_ACTIVE" in rows[BLIND]["why unknown"]


def test_the_fleet_page_shows_the_gpu_view(gpu_store: str) -> None:
    assert_fleet_page_shows_the_gpu_view()


def assert_fleet_page_shows_the_gpu_view() -> None:
    """The fleet page over the seeded GPU-only fleet, whichever source (store or API) answers it."""
    app = AppTest.from_string((PAGES / "fleet.py").read_text(), default_timeout=60)
    app.run()
    assert not app.exception, [e.message for e in app.exception]
    shown = {m.label: m.value for m in app.metric}
    assert shown["GPUs"] == "3" and shown["Idle GPUs"] == "1" and shown["Idle GPU-hours"] == "2.0"
    skus, gpus = app.dataframe[0].value, app.dataframe[1].value
    assert set(skus["SKU"]) == {"H100-SXM", "H200-SXM"}
    assert "llm/[bold red]pod[/]" in set(gpus["pod"])  # the dataframe shows the name as it is
    warnings = [w.value.replace("\\", "") for w in app.warning]  # plain() escapes punctuation
    assert any("DCGM_EXPORTER_COLLECTORS" in w and "-f FILE.csv" in w for w in warnings)
    advice = [m.value.replace("\\", "") for m in app.markdown]
    assert any("vllm:generation_tokens_total" in m for m in advice)
