"""Each dashboard page on its own with Streamlit's AppTest, against the seeded store (tests/dashboard/seed).

Pages are loaded from their source with ``AppTest.from_string``: ``from_file`` would put the page's folder
first on ``sys.path``, where ``fleet.py`` and ``alerts.py`` would shadow the ``fleet`` and ``alerts``
packages (``streamlit run dashboard/app.py`` puts ``dashboard/`` there instead, where nothing shadows).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from fleet.store.analysis import latest_analysis
from fleet.store.engine import make_engine
from tests.dashboard.seed import Seeded

PAGES = Path(__file__).resolve().parents[2] / "dashboard" / "app_pages"


@pytest.fixture
def store_env(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", seeded.url)
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "store")
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)
    return seeded


def run_page(name: str) -> AppTest:
    app = AppTest.from_string((PAGES / f"{name}.py").read_text(), default_timeout=60)
    app.run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def metrics(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def _arrow_rows(payload: bytes) -> list[dict[str, Any]]:
    import pyarrow as pa

    return list(pa.ipc.open_stream(payload).read_all().to_pylist()) if payload else []


def chart_specs(app: AppTest) -> list[dict[str, Any]]:
    """Each chart's Vega-Lite spec, with the rows Streamlit moved into Arrow datasets put back as ``rows``."""
    specs = []
    for chart in app.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        rows = _arrow_rows(chart.proto.data.data) if chart.proto.HasField("data") else []
        for dataset in chart.proto.datasets:
            rows += _arrow_rows(dataset.data.data)
        for layer in [spec, *spec.get("layer", [])]:
            rows += (layer.get("data") or {}).get("values", [])
        spec["rows"] = rows
        specs.append(spec)
    return specs


def inline_values(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every data row of a chart (see :func:`chart_specs`)."""
    return list(spec["rows"])


def test_every_page_is_routed(seeded: Seeded) -> None:
    app = (Path(__file__).resolve().parents[2] / "dashboard" / "app.py").read_text()
    for page in ("fleet", "misplacements", "roofline", "drift", "alerts", "reports"):
        assert f'PAGES / "{page}.py"' in app
        assert (PAGES / f"{page}.py").is_file()


def test_fleet_shows_the_misplaced_workers_and_the_fleet(store_env: Seeded) -> None:
    app = run_page("fleet")
    shown = metrics(app)
    assert shown["Misplaced workers"] == str(len(store_env.misplaced)) == "3"
    engine = make_engine(store_env.url)
    with engine.connect() as connection:
        run = latest_analysis(connection)
    engine.dispose()
    assert run is not None
    efficiency = run.summary.model_dump()["fleet"]
    assert (
        shown["Placement efficiency"]
        == f"{efficiency['capacity_tokens_per_s'] / efficiency['best_tokens_per_s']:.0%}"
    )
    groups = app.dataframe[0].value
    h100_decode = groups[(groups["SKU"] == "H100-SXM") & (groups["role"] == "decode")]["GPUs"].sum()
    assert h100_decode == 6  # node03's three decode workers at TP 2
    assert groups["GPUs"].sum() == 64
    specs = chart_specs(app)
    # lost output tokens (leading), lost total tokens (secondary), GPUs by SKU, tensor and DRAM activity
    assert len(specs) == 5
    assert any("lost output tokens/s" in row for row in inline_values(specs[0]))
    activity = [row for spec in specs[3:] for row in inline_values(spec)]
    assert {row["sku"] for row in activity} == {"H100-SXM", "H200-SXM"}
    assert all(0.0 <= row["value"] <= 1.0 for row in activity)


def test_fleet_follows_the_time_range_and_model_filters(store_env: Seeded) -> None:
    app = run_page("fleet")
    app.sidebar.selectbox[0].select("Last 24 hours").run()
    assert not app.exception
    assert "2026-11-25" in app.sidebar.caption[0].value  # the range ends at the newest telemetry
    app.sidebar.selectbox[2].select("meta-llama/Llama-3.1-70B-Instruct").run()
    assert not app.exception
    assert app.dataframe[0].value["GPUs"].sum() == 64


def test_misplacements_lists_the_seeded_misplaced_workers_first(store_env: Seeded) -> None:
    app = run_page("misplacements")
    top = app.table[0].value
    workers = set(top["worker / pool"])
    assert {"node03/decode-1", "node03/decode-2", "node03/decode-3"} <= workers
    assert workers >= set(store_env.misplaced)
    findings = app.dataframe[0].value
    keys = list(
        zip(findings["lost output tok/s"].fillna(0), findings["total tok/s (secondary)"], strict=True)
    )
    assert keys == sorted(keys, reverse=True)  # output tokens first; total tokens only break ties
    assert set(findings[findings["kind"] == "decode-on-low-bandwidth"]["action"]) == {"swap-roles-in-place"}
    assert app.get("download_button"), "the findings table can be downloaded as CSV"


def test_misplacements_filter_by_kind(store_env: Seeded) -> None:
    app = run_page("misplacements")
    app.multiselect(key="mp_kind").select("decode-on-low-bandwidth").run()
    assert not app.exception
    shown = app.dataframe[0].value
    assert set(shown["kind"]) == {"decode-on-low-bandwidth"}
    assert set(shown["worker"]) == {"node03/decode-1", "node03/decode-2", "node03/decode-3"}


def test_roofline_draws_both_roofs_and_every_worker(store_env: Seeded) -> None:
    app = run_page("roofline")
    (spec,) = chart_specs(app)
    rows = inline_values(spec)
    roofs = {row["roof"] for row in rows if isinstance(row.get("roof"), str)}
    assert roofs == {"H100 SXM FP8", "H200 SXM FP8"}
    points = {row["worker"]: row for row in rows if "worker" in row and "share" in row}
    assert len(points) == 32
    for worker in ("node03/decode-1", "node03/decode-2", "node03/decode-3"):
        assert points[worker]["misplaced"] == "yes"
        assert points[worker]["bound"] == "memory" and points[worker]["sku"] == "H100-SXM"
    assert all(p["bound"] == "compute" for p in points.values() if p["role"] == "prefill")
    table = app.dataframe[0].value
    assert len(table) == 32
    assert set(table[table["misplaced"]]["worker"]) == set(store_env.misplaced)
    app.radio(key="rf_view").set_value("Speed-of-light plane").run()
    assert not app.exception and len(chart_specs(app)) == 1


def test_drift_shows_the_analyzers_ratio_and_change_points(store_env: Seeded) -> None:
    engine = make_engine(store_env.url)
    with engine.connect() as connection:
        run = latest_analysis(connection)
    engine.dispose()
    assert run is not None
    pool = run.summary.model_dump()["pools"][0]
    app = run_page("drift")
    shown = metrics(app)
    assert shown["Prefill:decode now"] == pool["prefill_decode_now"]
    assert shown["Recommended"] == pool["prefill_decode_recommended"]
    (lost,) = [m for m in app.metric if m.label == "Lost output tokens/s"]
    assert pool["loss_basis"] and f"Rests on {pool['loss_basis']} capacities" in lost.proto.help
    changes = app.table[0].value
    assert len(changes) == len(pool["drift_events"]) > 0  # the demo's mid-week drift to long prompts
    specs = chart_specs(app)
    series = {row["series"] for row in inline_values(specs[1]) if "series" in row}
    assert series == {"provisioned", "traffic needs", "recommended (analyzer)"}
    traffic = [row for row in inline_values(specs[0]) if row["series"] == "prompt tokens/s"]
    assert len(traffic) >= 70 and min(row["value"] for row in traffic) > 0  # no partial-hour dip at the end
    assert "Latency targets" in [h.value for h in app.subheader]
    assert any("No latency target applies to this pool" in c.value for c in app.caption)  # none seeded


def test_alerts_lists_firing_and_resolved(store_env: Seeded) -> None:
    app = run_page("alerts")
    assert metrics(app) == {"Firing": "1", "Resolved": "1", "Alert names": "2"}
    table = app.dataframe[0].value
    assert set(table["alert"]) == {"PhasefitWorkerMisplaced", "PhasefitPoolRatioDrift"}
    assert set(table[table["status"] == "firing"]["worker"]) == {"node03/decode-1"}


def test_reports_shows_the_stored_week(store_env: Seeded) -> None:
    app = run_page("reports")
    assert app.selectbox(key="rp_week").value == "2026-W48"
    trend = app.dataframe[0].value
    assert list(trend["week"]) == ["2026-W48"] and list(trend["misplaced workers"]) == [3]
    assert len(app.get("download_button")) == 2
    (frame,) = app.get("iframe")
    prefix = "data:text/html;base64,"  # an opaque origin: the stored HTML cannot reach the app
    assert frame.proto.src.startswith(prefix)
    body = base64.b64decode(frame.proto.src[len(prefix) :]).decode()
    assert body.startswith("<!DOCTYPE html>") and "phasefit placement audit" in body


def test_a_store_that_cannot_be_read_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", f"sqlite:///{tmp_path / 'missing' / 'none.db'}")
    app = AppTest.from_string((PAGES / "fleet.py").read_text(), default_timeout=30).run()
    assert not app.exception
    assert app.error and "Cannot read phasefit's data" in app.error[0].value


@pytest.fixture
def api_env(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pages in API mode, reading the real service app (in process) over the seeded store."""
    from fastapi.testclient import TestClient
    from prometheus_client import CollectorRegistry

    from dashboard import data
    from dashboard.api_source import ApiSource
    from phasefit.service.app import create_app
    from phasefit.service.settings import ServiceSettings

    engine = make_engine(seeded.url)
    app = create_app(
        ServiceSettings(database_url=seeded.url, dev=True), engine=engine, registry=CollectorRegistry()
    )
    with TestClient(app) as client:
        monkeypatch.setattr(data, "_api_source", lambda *_: ApiSource(client))
        monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "api")
        monkeypatch.setenv("PHASEFIT_DASHBOARD_API_URL", "http://phasefit.test")
        yield
    engine.dispose()


def test_pages_through_the_api(api_env: None, seeded: Seeded) -> None:
    fleet = run_page("fleet")
    assert metrics(fleet)["Misplaced workers"] == "3"
    assert any("does not serve fleet-wide activity" in info.value for info in fleet.info)
    misplacements = run_page("misplacements")
    assert set(seeded.misplaced) <= set(misplacements.table[0].value["worker / pool"])
    roofline = run_page("roofline")
    assert any("PHASEFIT_DASHBOARD_SOURCE=store" in info.value for info in roofline.info)
    assert not roofline.get("vega_lite_chart")
    reports = run_page("reports")
    assert reports.selectbox(key="rp_week").value == "2026-W48"
