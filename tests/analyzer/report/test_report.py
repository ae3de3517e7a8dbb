"""The weekly placement audit: figures against the seeded store, offline HTML, Markdown, determinism, storage,
prices, and the ``phasefit report`` command."""

from __future__ import annotations

import base64
import re
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from analyzer.report.blocks import Table, Tiles
from analyzer.report.build import ReportError, build_audit, previous_week, week_bounds
from analyzer.report.document import ACTION_COLUMNS, _action_rows
from analyzer.report.model import PRICE_NOT_SET, AuditReport, PoolRow, WeekFigures
from analyzer.report.parts import pool_blocks, tiles, week_table
from analyzer.report.publish import Rendered, render, store_report, write_files
from analyzer.report.sections import actions_of, pool_rows, verdict
from analyzer.results.summary import UNKNOWN_LOSS, LatencyTargets, TargetAttainment
from fleet.catalog import load_catalog
from fleet.contract import Finding, FindingKind, Recommendation, Role
from fleet.store.engine import make_engine, writing
from fleet.store.reports import get_report, list_reports
from phasefit.cli.report import last_complete_week, report
from tests.analyzer.summary_samples import lost, pool_summary
from tests.dashboard.seed import Seeded, seed_store, shared_seed

WEEK = "2026-W48"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return shared_seed(tmp_path_factory)


def build(url: str, catalog_path: Path | None = None, week: str = WEEK) -> AuditReport:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return build_audit(connection, week, load_catalog(catalog_path), version="test")
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def audit(seeded: Seeded) -> AuditReport:
    return build(seeded.url)


@pytest.fixture(scope="module")
def rendered(audit: AuditReport) -> Rendered:
    return render(audit)


def copy_store(seeded: Seeded, folder: Path) -> str:
    """A private copy of the shared store, for tests that write to it."""
    target = folder / "copy.db"
    with sqlite3.connect(seeded.url.removeprefix("sqlite:///")) as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    return f"sqlite:///{target}"


def test_iso_weeks() -> None:
    assert week_bounds("2026-W48") == (datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))
    assert previous_week("2026-W01") == "2025-W52"
    assert week_bounds("2026-W53")[0] == datetime(2026, 12, 28, tzinfo=UTC)  # 2026 has 53 ISO weeks
    assert last_complete_week(datetime(2026, 12, 1, 6, tzinfo=UTC)) == "2026-W48"
    with pytest.raises(ValueError, match="ISO week"):
        week_bounds("2025-W53")


def test_figures_agree_with_the_store(audit: AuditReport, seeded: Seeded) -> None:
    truth = {w["worker_id"] for w in seeded.truth["misplaced_workers"]}
    w = audit.this_week
    assert w.misplaced_workers == len(truth) == 3
    assert truth <= {a.subject for a in audit.actions}
    assert [a.rank for a in audit.actions] == list(range(1, len(audit.actions) + 1))
    # ranked by output tokens/s to gain (issue 13), the estimated ones first
    known = [a.lost_output_tokens_per_s for a in audit.actions if a.lost_output_tokens_per_s is not None]
    assert known == sorted(known, reverse=True)
    assert [a.lost_output_tokens_per_s is None for a in audit.actions] == sorted(
        a.lost_output_tokens_per_s is None for a in audit.actions
    )
    for action in (a for a in audit.actions if a.subject in truth):
        assert (action.kind, action.sku, action.role, action.action) == (
            "decode-on-low-bandwidth",
            "H100-SXM",
            "decode",
            "swap-roles-in-place",
        )
    # the week's loss is the hourly series summed: both come from the same segments
    assert audit.hourly_lost and all(h.output for h in audit.hourly_lost)  # output tokens/s by hour
    hourly = sum(h.lost for h in audit.hourly_lost) * 3600.0
    assert w.lost_output_tokens == pytest.approx(hourly, rel=0.02)
    assert w.lost_tokens_low <= w.lost_tokens <= w.lost_tokens_high
    assert 70 <= w.analysed_hours <= 74  # three simulated days
    assert w.placement_efficiency is not None and 0.5 < w.placement_efficiency < 1.0
    assert audit.last_week is None and audit.follow_up == []  # no telemetry the week before


def test_the_report_leads_with_output_tokens_and_requests(audit: AuditReport, rendered: Rendered) -> None:
    w = audit.this_week
    assert w.lost_output_tokens is not None and w.lost_requests is not None
    # output tokens are part of the total (prompt + output), never more than it
    assert 0 < w.lost_output_tokens <= w.lost_tokens
    assert w.lost_output_tokens_low is not None and w.lost_output_tokens_high is not None
    assert w.lost_output_tokens_low <= w.lost_output_tokens <= w.lost_output_tokens_high
    summary = audit.summary()
    for key in ("lost_output_tokens_week", "lost_requests_week", "mean_lost_output_tokens_per_s"):
        assert summary[key] is not None and summary[key] > 0, key
    assert summary["lost_tokens_week"] >= summary["lost_output_tokens_week"]
    assert audit.clusters and all("/" not in c for c in audit.clusters)
    assert "output tokens" in rendered.html and "secondary" in rendered.html.lower()
    # no price is set in the seeded catalog: "price not set", never $0
    assert "$0" not in rendered.markdown and "$0" not in rendered.html
    assert "| output tok/s to gain | output range | requests/s to gain |" in rendered.markdown
    assert audit.actions[0].lost_output_tokens_per_s is not None


def test_data_quality_and_coverage(audit: AuditReport) -> None:
    q = audit.quality
    assert (q.gpus, q.workers, q.unattributed_gpus, q.workers_role_unknown) == (64, 32, 0, 0)
    assert q.role_sources == {"sim": 32} and set(q.gpu_hours_by_source) == {"dcgm"}
    assert q.coverage is not None and 0.95 <= q.coverage <= 1.0
    assert q.gpu_hours_with_telemetry == pytest.approx(64 * 72, rel=0.03)
    hours = {row.sku: row for row in audit.sku_hours}
    assert hours["H100-SXM"].misplaced > 0 and hours["H200-SXM"].misplaced == 0
    assert hours["H100-SXM"].misplaced <= 3 * 2 * 73  # node03's three decode workers, two GPUs each


def test_roofline_points_and_drift(audit: AuditReport, seeded: Seeded) -> None:
    assert {r.sku for r in audit.roofs} == {"H100-SXM", "H200-SXM"}
    assert len(audit.points) == 32
    misplaced = {p.worker_id for p in audit.points if p.misplaced}
    assert misplaced == {w["worker_id"] for w in seeded.truth["misplaced_workers"]}
    h200 = next(r for r in audit.roofs if r.sku == "H200-SXM")
    for p in (p for p in audit.points if p.misplaced):
        assert p.bound == "memory" and p.gain_on(h200) == pytest.approx(4.8 / 3.35, rel=1e-3)
    assert audit.drift_events and all(e.pool for e in audit.drift_events)
    assert any(p.ratio_drift for p in audit.pools)
    pool = audit.pools[0]
    assert pool.ratio_now and pool.ratio_recommended and pool.ratio_now != pool.ratio_recommended


class _Resources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.sources: list[str] = []
        self.headings: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.sources += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "data", "action")]
        self._in_h2 = tag == "h2"

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.headings.append(data)
            self._in_h2 = False


def test_html_is_self_contained_and_opens_offline(rendered: Rendered) -> None:
    html = rendered.html
    assert not re.search(r"(?i)https?://", html), "no http(s) reference anywhere"
    assert "@import" not in html and "url(" not in html
    parsed = _Resources()
    parsed.feed(html)
    assert not {"script", "link", "iframe", "object"} & set(parsed.tags)
    assert len(parsed.sources) == len(rendered.charts) == 4
    for source in parsed.sources:
        prefix = "data:image/png;base64,"
        assert source.startswith(prefix)
        assert base64.b64decode(source[len(prefix) :]).startswith(PNG)
    assert parsed.headings == [
        "1. Executive summary",
        "2. Actions",
        "3. The fleet on the roofline",
        "4. Pools and the recommended prefill:decode ratio",
        "5. Drift events",
        "6. Follow-up on last week's findings",
        "7. Did last week's changes pay off?",
        "8. Considered, not recommended",
        "9. Data quality and method",
        "Appendix: all findings",
    ]
    assert "node03/decode-1" in html and PRICE_NOT_SET in html


def test_the_same_store_gives_the_same_report(seeded: Seeded, rendered: Rendered) -> None:
    again = render(build(seeded.url))
    assert again.html == rendered.html
    assert again.markdown == rendered.markdown
    assert [c.png for c in again.charts] == [c.png for c in rendered.charts]
    assert again.summary == rendered.summary
    assert "created" not in rendered.html.lower() and "generated at" not in rendered.html.lower()


def test_markdown_has_the_same_sections_and_relative_images(rendered: Rendered, tmp_path: Path) -> None:
    md = rendered.markdown
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "1. Executive summary" and headings[-1] == "Appendix: all findings"
    assert md.count("\n## ") == 10 and "data:" not in md
    files = write_files(rendered, WEEK, tmp_path, "md")
    assert files[0].name == f"phasefit-audit-{WEEK}.md"
    for chart in rendered.charts:
        name = f"phasefit-audit-{WEEK}-{chart.name}.png"
        assert f"]({name})" in md and (tmp_path / name).read_bytes() == chart.png
    (html_file,) = write_files(rendered, WEEK, tmp_path, "html")
    assert html_file.read_text() == rendered.html


def test_prices_from_the_catalog(seeded: Seeded, tmp_path: Path) -> None:
    prices = tmp_path / "catalog.yaml"
    prices.write_text("gpus:\n  H100-SXM: {hourly_price_usd: 2.5}\n  H200-SXM: {hourly_price_usd: 3.5}\n")
    priced = build(seeded.url, prices)
    assert priced.price_source.startswith("catalog")
    w = priced.this_week
    assert w.weekly_cost_usd == pytest.approx(16 * 2 * 2.5 * 168 + 16 * 2 * 3.5 * 168, rel=1e-6)
    assert w.misplacement_cost_usd is not None and w.idle_cost_usd is not None
    html = render(priced).html
    assert PRICE_NOT_SET not in html and "$" in html


def test_stored_by_week_and_replaced(seeded: Seeded, rendered: Rendered, tmp_path: Path) -> None:
    url = copy_store(seeded, tmp_path)
    engine = make_engine(url)
    created = datetime(2026, 12, 1, 6, tzinfo=UTC)
    with writing(engine) as connection:
        store_report(connection, WEEK, rendered, created_at=created)
        store_report(connection, WEEK, rendered, created_at=created + timedelta(days=1))
    with engine.connect() as connection:
        stored = get_report(connection, WEEK)
        listed = list_reports(connection)
    engine.dispose()
    assert stored is not None and stored.body == rendered.html and stored.format == "html"
    assert stored.created_at == created + timedelta(days=1)
    assert [r.week for r in listed] == [WEEK] and listed[0].summary == rendered.summary


def test_a_week_without_telemetry_is_refused(seeded: Seeded) -> None:
    with pytest.raises(ReportError, match="no telemetry"):
        build(seeded.url, week="2026-W40")


def test_report_command(seeded: Seeded, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(report)
    url = copy_store(seeded, tmp_path)
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(
        app, ["--week", WEEK, "--format", "md", "--out", str(out), "--database-url", url, "--json"]
    )
    assert result.exit_code == 0, result.output
    assert '"misplaced_workers": 3' in result.stdout
    assert (out / f"phasefit-audit-{WEEK}.md").is_file() and (
        out / f"phasefit-audit-{WEEK}-roofline.png"
    ).is_file()
    engine = make_engine(url)
    with engine.connect() as connection:
        stored = get_report(connection, WEEK)
    engine.dispose()
    assert stored is not None and stored.body.startswith("<!DOCTYPE html>")
    for args, message in (
        (["--week", "2026-W99"], "not an ISO week"),
        (["--week", WEEK, "--format", "pdf"], "html or md"),
        (["--week", "2026-W40"], "no telemetry"),
    ):
        failed = runner.invoke(app, [*args, "--database-url", url])
        assert failed.exit_code == 1 and message in failed.output, failed.output


def test_week_over_week(tmp_path: Path) -> None:
    """A store spanning the end of 2026-W47 and the start of W48: the change and the follow-up sections.
    W47 holds three days: one or two days of 20-minute windows leave the demo's swap just under the act
    rule's confidence (held back, not flagged; two days since the H200's prefill edge is modelled), which
    would leave nothing to follow up."""
    url = f"sqlite:///{tmp_path / 'two-weeks.db'}"
    seed_store(url, tmp_path, days=4.0, window_s=1200, start=datetime(2026, 11, 20, tzinfo=UTC), alert=False)
    audit = build(url)
    assert audit.last_week is not None and audit.last_week.week == "2026-W47"
    assert 71 <= audit.last_week.analysed_hours <= 73 and 23 <= audit.this_week.analysed_hours <= 25
    followed = {(u.subject, u.state) for u in audit.follow_up}
    assert {("node03/decode-1", "persisting"), ("node03/decode-2", "persisting")} <= followed
    assert {a.status for a in audit.actions if a.subject.startswith("node03/")} == {"persisting"}
    ghost = audit.hourly_lost_last_week  # last week's hours, moved onto this week's for the chart
    assert ghost and all(audit.since <= h.ts < audit.until for h in ghost)
    html = render(audit).html
    assert "last week (2026-W47)" in html and "6. Follow-up on last week" in html


def _finding(worker: str, total: float, output: float | None, requests: float | None) -> Finding:
    ts = datetime(2026, 11, 24, tzinfo=UTC)
    return Finding(
        kind=FindingKind.DECODE_ON_LOW_BANDWIDTH,
        worker_id=worker,
        pool="c/m",
        gpu_sku="H100-SXM",
        role=Role.DECODE,
        lost_tokens_per_s=total,
        lost_tokens_per_s_low=total * 0.8,
        lost_tokens_per_s_high=total * 1.2,
        lost_output_tokens_per_s=output,
        lost_output_tokens_per_s_low=None if output is None else output * 0.8,
        lost_output_tokens_per_s_high=None if output is None else output * 1.2,
        lost_requests_per_s=requests,
        recommendation=Recommendation(action="swap-roles-in-place", expected_gain_tokens_per_s=total),
        first_seen=ts,
        last_seen=ts,
    )


def test_actions_rank_by_output_tokens_with_total_as_a_secondary_column() -> None:
    """Issue 13: "+19,057 tokens/s" for a decode worker turned prefill is mostly prompt tokens; the
    ranking and the lead columns are output tokens/s and requests/s, an unknown loss reads "unknown"."""
    findings = [
        _finding("prompt-heavy", total=19_057.0, output=40.0, requests=0.1),
        _finding("output-heavy", total=2_000.0, output=900.0, requests=2.5),
        _finding("unsized", total=50_000.0, output=None, requests=None),
    ]
    actions, _, _ = actions_of(findings, set())
    assert [a.subject for a in actions] == ["output-heavy", "prompt-heavy", "unsized"]
    rows = _action_rows(actions)
    column = {name: i for i, name in enumerate(ACTION_COLUMNS)}
    assert column["output tok/s to gain"] < column["requests/s to gain"]
    assert column["requests/s to gain"] < column["secondary: total tok/s (prompt + output)"]
    first, _, unsized = rows
    assert first[column["output tok/s to gain"]] == "900 output tok/s"
    assert first[column["requests/s to gain"]] == "2.50 req/s"
    assert first[column["secondary: total tok/s (prompt + output)"]] == "2k tok/s"
    assert unsized[column["output tok/s to gain"]] == "unknown"
    assert unsized[column["output range"]] == "unknown"
    assert unsized[column["requests/s to gain"]] == "unknown"
    sentence = verdict(_week(), actions)
    assert sentence.index("900 output tok/s") < sentence.index("2.50 req/s") < sentence.index("secondary")


def _week(**changes: Any) -> WeekFigures:
    since = datetime(2026, 11, 23, tzinfo=UTC)
    base = WeekFigures(
        week=WEEK, since=since, until=since + timedelta(days=7), analysed_hours=72.0,
        lost_tokens=1e9, lost_tokens_low=8e8, lost_tokens_high=1.2e9, mean_lost_tokens_per_s=3858.0,
        capacity_tokens_per_s=None, best_tokens_per_s=None, demand_tokens_per_s=None, demand_limited=True,
        misplaced_workers=1, open_findings=1, findings_by_kind={}, weekly_cost_usd=None,
        misplacement_cost_usd=None, idle_cost_usd=None, worst_ratio=None, telemetry_coverage=None,
    )  # fmt: skip
    return replace(base, **changes)


def _text(block: Any) -> str:
    if isinstance(block, Tiles):
        return " ".join(f"{t.label} {t.value} {t.detail}" for t in block.tiles)
    if isinstance(block, Table):
        return " ".join(" ".join(r) for r in block.rows) + " " + block.note
    return str(block)


def test_unknown_figures_read_unknown_never_zero() -> None:
    """No "$0" for a price that is not set, no "0 tokens/s" for a loss the analyzer could not estimate."""
    w = _week()  # output tokens, requests, capacity and every price unknown
    text = _text(tiles(w)) + " " + _text(week_table(w, None))
    assert "$0" not in text and not re.search(r"(?<![\d.])0 (output )?tok(en)?s?/s", text)
    assert "Output" in tiles(w).tiles[0].label and tiles(w).tiles[0].value == "unknown"
    assert PRICE_NOT_SET in text and "unknown" in text
    # one price set, the other not: never a sum that passes the missing one off as $0
    money = tiles(_week(misplacement_cost_usd=1200.0)).tiles[1]
    assert money.value == "at least $1,200 /week" and PRICE_NOT_SET in money.detail
    row = _pool_row(requests_per_s=None, lost_tokens_per_s=None)
    pools = _text(pool_blocks(_report_with(row), {})[1])
    assert "unknown" in pools and not re.search(r"(?<![\d.])0(\.0)? (tok/s|output tok/s|req/s)", pools)
    assert "secondary" in pool_blocks(_report_with(row), {})[1].columns[-2]


def _pool_row(**changes: Any) -> PoolRow:
    base = PoolRow(
        pool="c/m", model="m", precision="fp8", serving="disaggregated", gpus=8,
        workers_by_sku_role={"H100-SXM": {"decode": 2}}, mean_prompt_tokens=None, mean_output_tokens=None,
        requests_per_s=1.0, bound=None, utilisation=None, ratio_now=None, ratio_recommended=None, per_sku={},
        ratio_drift=False, lost_tokens_per_s=10.0, checks=[], notes=[],
    )  # fmt: skip
    return replace(base, **changes)


def _report_with(row: PoolRow) -> Any:
    return SimpleNamespace(pools=[row])  # pool_blocks reads only the pools


def test_pool_rows_keep_unknown_losses_unknown() -> None:
    (row,) = pool_rows([pool_summary(pool="c/m", model="m", lost=UNKNOWN_LOSS, demand_limited=True)])
    assert row.lost_tokens_per_s is None and row.lost_output_tokens_per_s is None
    assert row.demand_limited is True
    cells = pool_blocks(_report_with(row), {})[1].rows[0]
    # output, what it rests on, requests, total, serves its demand
    assert cells[-5:] == ["unknown", "unknown", "unknown", "unknown", "yes: idle capacity, not lost tokens"]
    figures = lost(output_tokens_per_s=4.0, requests_per_s=0.01, tokens_per_s=10.0)
    (known,) = pool_rows([pool_summary(lost=figures, loss_basis="calibrated")])
    assert pool_blocks(_report_with(known), {})[1].rows[0][-4] == "calibrated"
    assert (known.lost_output_tokens_per_s, known.lost_requests_per_s, known.lost_tokens_per_s) == (
        4.0,
        0.01,
        10.0,
    )


def test_the_pools_latency_targets_and_their_attainment_are_a_table_unknown_said_so() -> None:
    measured = TargetAttainment(
        metric="tpot", target_s=0.05, share=0.625, p90_s=0.061, worker_buckets=12, pool_p90_s=0.047,
        pool_met_share=0.75, observations=1200.0,
    )  # fmt: skip
    unknown = TargetAttainment(
        metric="ttft", target_s=1.0, share=None, p90_s=None, worker_buckets=0, reason="no engine said",
        pool_reason="no worker sent its histogram",
    )  # fmt: skip
    targets = LatencyTargets(
        tpot_p90_s=0.05, ttft_p90_s=1.0, source="settings", rule="S[0]", attainment=[measured, unknown]
    )
    table = next(
        b
        for b in pool_blocks(_report_with(_pool_row(targets=targets)), {})
        if isinstance(b, Table) and "latency" in b.columns
    )
    assert table.rows == [
        ["c/m", "TPOT", "0.05 s", "62%", "0.061 s", "0.047 s", "75%", "settings (S[0])"],
        [
            "c/m",
            "TTFT",
            "1 s",
            "unknown: no engine said",
            "unknown",
            "unknown: no worker sent its histogram",
            "unknown",
            "settings (S[0])",
        ],
    ]
    plain = pool_blocks(_report_with(_pool_row()), {})
    assert not any(isinstance(b, Table) and "latency" in b.columns for b in plain)  # no targets: no table
