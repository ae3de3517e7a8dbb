"""The dashboard reads the analyzer's summary, its pools, segments and findings through typed views only:
no module indexes data by a string key (but the few open-ended maps named below), every view field is a
field of the strict summary model, and a current stored run reads through the views as the model says."""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import select

from analyzer.results import summary as strict
from fleet.contract import Role
from fleet.store import stored_summary as views
from fleet.store.engine import make_engine
from fleet.store.reports import list_reports
from fleet.store.schema import AnalysisRunRow
from tests.dashboard.seed import Seeded
from tests.dashboard.test_old_runs import version_2

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
# (module, receiver) pairs that may be read by a string key: maps whose keys are open-ended by design or
# rows the dashboard builds itself for a table or a chart; never the analyzer's summary or a finding.
OPEN_MAPS = {
    ("store_source.py", "labels"): "Alertmanager labels",
    ("store_source.py", "e.annotations"): "Alertmanager annotations",
    ("app_pages/alerts.py", "a.labels"): "Alertmanager labels",
    ("charts.py", "a.labels"): "Alertmanager labels",
    ("widgets.py", "st.session_state"): "Streamlit's session state",
    ("chart_kit.py", "ROLE_COLOURS"): "a colour palette",
    ("charts.py", "r"): "chart rows built in the module",
    ("roofline_chart.py", "r"): "chart rows built in the module",
    ("app_pages/misplacements.py", "r"): "compute.finding_rows' table rows",
}
VIEWS: dict[type[BaseModel], type[BaseModel]] = {
    views.StoredSummary: strict.Summary,
    views.StoredFleet: strict.FleetTotals,
    views.StoredPool: strict.PoolSummary,
    views.StoredSegment: strict.SegmentSummary,
    views.StoredLostCapacity: strict.LostCapacity,
    views.StoredLoss: strict.Loss,
    views.StoredDrift: strict.TrafficDrift,
    views.StoredCheck: strict.RuleCheck,
    views.StoredGroupPlan: strict.GroupRecommendation,
    views.StoredTargets: strict.LatencyTargets,
    views.StoredAttainment: strict.TargetAttainment,
}


def string_keyed_reads(source: str) -> list[tuple[int, str, str]]:
    """(line, receiver, key) of every ``x["key"]`` and ``x.get("key", ...)`` in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            receiver, key = node.value, node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            receiver, key = node.func.value, node.args[0].value
        else:
            continue
        if isinstance(key, str):
            found.append((node.lineno, ast.unparse(receiver), key))
    return found


def test_the_check_finds_string_keyed_reads() -> None:
    source = 'a = summary["fleet"]\nb = pool.get("segments", [])\nc = rows[0]\nd = group.get(role)\n'
    assert string_keyed_reads(source) == [(1, "summary", "fleet"), (2, "pool", "segments")]


def test_no_dashboard_module_reads_data_by_a_string_key() -> None:
    offending = []
    for path in sorted(DASHBOARD.rglob("*.py")):
        module = path.relative_to(DASHBOARD).as_posix()
        for line, receiver, key in string_keyed_reads(path.read_text()):
            if (module, receiver) not in OPEN_MAPS:
                offending.append(f"dashboard/{module}:{line}: {receiver}[{key!r}]")
    assert not offending, "read these through fleet.store.stored_summary or typed records: " + ", ".join(
        offending
    )


@pytest.mark.parametrize("view", list(VIEWS), ids=lambda v: v.__name__)
def test_every_view_field_is_a_field_of_the_summary_model(view: type[BaseModel]) -> None:
    assert set(view.model_fields) <= set(VIEWS[view].model_fields)


def test_placement_counts_are_named_after_roles() -> None:
    assert set(views.StoredRoleCounts.model_fields) <= {r.value for r in Role}


def _same(mine: Any, theirs: Any, where: str) -> None:
    """``mine`` (a view's value) holds what ``theirs`` (the strict model's, or the stored JSON's) holds."""
    if isinstance(mine, BaseModel):
        for name in type(mine).model_fields:
            value = theirs[name] if isinstance(theirs, dict) else getattr(theirs, name)
            _same(getattr(mine, name), value, f"{where}.{name}")
    elif isinstance(mine, list | dict):
        assert len(mine) == len(theirs), where
        pairs = (
            zip(mine, theirs, strict=True) if isinstance(mine, list) else ((mine[k], theirs[k]) for k in mine)
        )
        for i, (a, b) in enumerate(pairs):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(mine, datetime):
        assert mine == datetime.fromisoformat(theirs), where
    else:
        assert mine == theirs and (mine is None) == (theirs is None), where


def test_a_current_run_reads_through_the_views_as_the_model_says(seeded: Seeded) -> None:
    engine = make_engine(seeded.url)
    with engine.connect() as connection:
        stored = connection.execute(select(AnalysisRunRow.summary)).scalars().all()
        reports = list_reports(connection)
    engine.dispose()
    assert stored and reports
    for raw in stored:
        typed = strict.Summary.model_validate(raw)
        view = views.StoredSummary.read(raw)
        assert view.fleet is not None and view.pools and view.pools[0].segments
        _same(view, typed, "summary")
        assert view.fleet.lost.tokens_per_s.value is not None  # a loss to compare
        assert views.StoredSummary.read(version_2(raw)) == view  # the same run, as version 2 wrote it
    for report in reports:
        figures = views.StoredReportSummary.model_validate(report.summary)
        assert figures.misplaced_workers == 3 and figures.lost_tokens_week is not None
        _same(figures, report.summary, "report")
