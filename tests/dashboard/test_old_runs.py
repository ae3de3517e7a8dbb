"""The pages render a stored run of any summary version: the current one (3) as the model says, the same run
as version 2 wrote it (each loss as flat fields), an older one that lacks the fields added since, and a
partial one holding the wrong types. What a run does not say shows as "unknown", never as 0 and never as
healthy."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from analyzer.report.style import si
from analyzer.results.summary import Summary
from dashboard.plain import plain
from dashboard.store_source import StoreSource
from dashboard.views import Scope
from fleet.store.analysis import put_analysis
from fleet.store.engine import make_engine, writing
from fleet.store.reports import Report, put_report
from fleet.store.schema import AnalysisRunRow
from tests.dashboard.seed import Seeded
from tests.dashboard.test_pages import chart_specs, inline_values, metrics, run_page

LOST = 1234.0  # si(): "1.23k"
CURRENT = ("current", "version 2")  # the same run: version 3 and version 2 hold the same figures
_BOUNDS = {"value": "", "low": "_low", "high": "_high"}


def version_2(run: dict[str, Any]) -> dict[str, Any]:
    """A version-3 run as version 2 wrote it: each loss as flat ``lost_<unit>[_mean][_low|_high]`` fields,
    and no ``loss_range_to_zero``."""

    def flat(row: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in row.items() if k not in ("lost", "lost_mean", "loss_range_to_zero")}
        for field, mean in (("lost", ""), ("lost_mean", "_mean")):
            for unit, loss in row.get(field, {}).items():
                out.update({f"lost_{unit}{mean}{suffix}": loss[bound] for bound, suffix in _BOUNDS.items()})
        return out

    pools = [{**flat(p), "segments": [flat(s) for s in p["segments"]]} for p in run["pools"]]
    return {**run, "version": 2, "fleet": flat(run["fleet"]), "pools": pools}


def _copy(seeded: Seeded, folder: Path) -> str:
    """A copy of the seeded store to add runs to (the seeded one is shared and never written)."""
    target = folder / "phasefit.db"
    with sqlite3.connect(seeded.url.removeprefix("sqlite:///")) as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    return f"sqlite:///{target}"


def _summaries(current: dict[str, Any], pool: str, start: datetime, end: datetime) -> dict[str, Any]:
    old = {  # before the output/request units, judged counts, capacity, ratios per SKU and drift events
        "fleet": {"lost_tokens_per_s": LOST},
        "pools": [
            {
                "pool": pool,
                "lost_tokens_per_s": LOST,
                "prefill_decode_ratio": 0.5,
                "segments": [{"start": start.isoformat(), "end": end.isoformat(), "lost_tokens_per_s": LOST}],
            }
        ],
    }
    partial = {
        "fleet": {"lost_tokens_per_s": "n/a", "judged_workers": "3", "demand_limited": "yes"},
        "pools": [
            {
                "pool": pool,
                "prefill_decode_now": 7,
                "lost_tokens_per_s": "lots",
                "recommended": {"H100-SXM/tp2": "bad", "H200-SXM/tp2": {"prefill_now": "2", "decode_now": 3}},
                "drift_events": [{"description": "longer prompts"}, "junk"],
                "checks": [{"check": "kv transfer", "passed": "maybe"}],
                "segments": [{"start": "yesterday", "end": None}, 5],
            },
            "not a pool",
        ],
    }
    return {"current": current, "version 2": version_2(current), "old": old, "partial": partial}


@pytest.fixture(params=["current", "version 2", "old", "partial"])
def stored(
    request: pytest.FixtureRequest, seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Summary, str]:
    """The case, the seeded run's strict summary, and the URL of a store whose latest run is the case's."""
    raw: dict[str, Any] = {}

    def case(seeded_run: dict[str, Any]) -> dict[str, Any]:
        raw.update(seeded_run)
        pool = Summary.model_validate(seeded_run).pools[0].pool
        return _summaries(seeded_run, pool, seeded.start, seeded.end)[request.param]

    url = _store_with_run(seeded, tmp_path, monkeypatch, case)
    return request.param, Summary.model_validate(raw), url


def _store_with_run(
    seeded: Seeded,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    summary_of: Callable[[dict[str, Any]], dict[str, Any]],
) -> str:
    """A copy of the seeded store whose latest run is ``summary_of(the seeded run's summary)``, and the
    dashboard pointed at it."""
    url = _copy(seeded, folder)
    engine = make_engine(url)
    with engine.connect() as connection:
        raw = connection.execute(select(AnalysisRunRow.summary)).scalar_one()
    with writing(engine) as connection:
        put_analysis(
            connection,
            created_at=seeded.end + timedelta(hours=1),
            from_ts=seeded.start,
            to_ts=seeded.end,
            summary=summary_of(raw),
        )
    engine.dispose()
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", url)
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "store")
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)
    return url


def test_the_fleet_page(stored: tuple[str, Summary, str]) -> None:
    case, current, _ = stored
    app = run_page("fleet")
    shown = list(metrics(app).values())
    infos = " ".join(i.value for i in app.info)
    fleet = current.fleet
    assert fleet.capacity_tokens_per_s is not None and fleet.best_tokens_per_s is not None
    now = [
        si(fleet.lost.output_tokens_per_s.value),
        f"{fleet.capacity_tokens_per_s / fleet.best_tokens_per_s:.0%}",
    ]
    expected = {"old": [si(LOST), "unknown"], "partial": ["unknown", "unknown"]}.get(case, now)
    assert [shown[0], shown[2]] == expected
    assert shown[3] == "3"  # misplaced workers: from the run, else its open findings
    assert ("could judge is unknown" in infos) == (case not in CURRENT)


def test_the_lost_tokens_over_time(stored: tuple[str, Summary, str], seeded: Seeded) -> None:
    case, _, url = stored
    engine = make_engine(url)
    lost = StoreSource(engine).lost_tokens(Scope(seeded.start, seeded.end))
    engine.dispose()
    known = [p for p in lost if p.lost is not None]
    assert known
    if case == "old":  # its segment covers the range: its hours, with no range it did not state
        assert all(p.lost == LOST and p.low is None and p.high is None for p in known)
    else:  # the current run's own hours; the partial run places no segment in time: the earlier run's
        assert all(p.lost != LOST and p.low is not None for p in known)


def test_the_drift_page(stored: tuple[str, Summary, str]) -> None:
    case, current, _ = stored
    app = run_page("drift")
    pool = current.pools[0]
    assert pool.prefill_decode_now is not None and pool.prefill_decode_recommended is not None
    now = [pool.prefill_decode_now, pool.prefill_decode_recommended, str(pool.bound)]
    expected = {
        # The loss tile leads with output tokens: an old run stated only total tokens (in the tile's help).
        "old": ["unknown", "unknown", "unknown", "unknown"],
        "partial": ["unknown", "unknown", "unknown", "unknown"],
    }.get(case, [*now, si(pool.lost.output_tokens_per_s.value)])
    assert list(metrics(app).values()) == expected
    if case == "old":  # its total, secondary, is still said
        assert f"total prompt + output: {si(LOST)}" in app.metric[3].proto.help
    series = {row["series"] for row in inline_values(chart_specs(app)[1]) if "series" in row}
    captions = " ".join(c.value for c in app.caption)
    tables = [t.value for t in app.table]
    if case in CURRENT:  # the seeded fleet's recommendation stood all along: said plainly
        (changes,) = [t for t in tables if "verdict" in t.columns]
        assert list(changes["verdict"]) == [c.verdict for c in pool.changes] == ["not carried out"]
        tables = [t for t in tables if "verdict" not in t.columns]
    else:
        assert "Changes unknown" in captions
    if case in CURRENT:
        assert series == {"provisioned", "traffic needs", "recommended (analyzer)"}
        assert len(tables[0]) == len(pool.drift_events)
    elif case == "old":
        assert series == {"provisioned"} and not tables
        assert "Change points unknown" in captions
    else:
        assert series == {"provisioned"}
        changes, groups, checks = tables
        assert list(changes["from (UTC)"]) == ["unknown"] and list(changes["magnitude"]) == ["unknown"]
        assert list(groups["group"]) == ["H200-SXM/tp2"] and list(groups["decode now"]) == [3]
        assert list(checks["passed"]) == ["unknown"]


def test_the_reports_page_reads_an_old_report_summary(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _copy(seeded, tmp_path)
    engine = make_engine(url)
    with writing(engine) as connection:
        old = Report(
            "2026-W47", "html", datetime(2026, 11, 23, tzinfo=UTC), {"misplaced_workers": "three"}, ""
        )
        put_report(connection, old)
    engine.dispose()
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", url)
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "store")
    trend = run_page("reports").dataframe[0].value
    assert list(trend["week"]) == ["2026-W48", "2026-W47"]
    week47 = trend.iloc[1]
    assert (week47["lost tokens /week"], week47["placement efficiency"]) == ("unknown", "unknown")
    assert trend["misplaced workers"].isna().tolist() == [False, True]  # unknown: an empty cell, not 0
    assert trend["misplaced workers"].iloc[0] == 3


def test_the_drift_page_shows_whether_a_change_paid_off(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    change = {
        "at": seeded.start.isoformat(),
        "moved": [{"worker_id": "node00/decode-1", "from_role": "decode", "to_role": "prefill"}, "junk"],
        "followed": "as recommended",
        "verdict": "made things worse",
        "reason": "predicted +1,000 tokens/s, realized -200",
        "predicted_output_tokens_per_s": 400.0,
        "realized_output_tokens_per_s": "n/a",
        "realized_to_predicted": -0.2,
    }

    def with_change(raw: dict[str, Any]) -> dict[str, Any]:
        raw["pools"][0]["changes"] = [change]
        raw["model"] = {**raw["model"], "changes_scored": 1, "realized_error_median": 1.2}
        return raw

    _store_with_run(seeded, tmp_path, monkeypatch, with_change)
    tables = [t.value for t in run_page("drift").table]
    (changes,) = [t for t in tables if "verdict" in t.columns]
    assert list(changes["workers moved"]) == ["node00/decode-1 decode->prefill"]
    assert list(changes["verdict"]) == ["made things worse"]
    assert list(changes["realized output tok/s"]) == ["unknown"]  # never 0
    assert list(changes["realized / predicted"]) == ["-20%"]
    fleet_captions = " ".join(c.value for c in run_page("fleet").caption)
    assert "1 change(s) of a split scored" in fleet_captions and "120%" in fleet_captions


def test_the_drift_page_shows_the_pools_latency_targets_and_their_attainment(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = {
        "tpot_p90_s": 0.05,
        "ttft_p90_s": 1.0,
        "source": "catalog",
        "rule": "/etc/[x](https://e.example)/catalog.yaml: targets[0]",  # shown as the text it is
        "attainment": [
            {"metric": "tpot", "target_s": 0.05, "share": 0.625, "p90_s": 0.061, "worker_buckets": 40},
            {"metric": "ttft", "target_s": 1.0, "share": None, "p90_s": None, "worker_buckets": 0},
            "junk",
        ],
    }

    def with_targets(raw: dict[str, Any]) -> dict[str, Any]:
        raw["pools"][0]["targets"] = targets
        return raw

    _store_with_run(seeded, tmp_path, monkeypatch, with_targets)
    app = run_page("drift")
    (table,) = [t.value for t in app.table if "latency (p90)" in t.value.columns]
    assert list(table["latency (p90)"]) == ["TPOT", "TTFT"]
    assert list(table["serving time within it"]) == ["62%", "unknown"]  # never 0
    assert list(table["measured p90"]) == ["0.061 s", "unknown"]
    caption = next(c.value for c in app.caption if c.value.startswith("Rule:"))
    assert plain(str(targets["rule"])) in caption  # escaped: shown as text, never a link
