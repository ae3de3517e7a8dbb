"""The weekly audit from shards analysed apart (an indexed Job), merged: the same audit as one analysis."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import typer
from sqlalchemy import select
from typer.testing import CliRunner

from analyzer.report.build import ReportError, build_audit
from fleet.catalog import load_catalog
from fleet.store.analysis import latest_analysis, put_analysis
from fleet.store.engine import make_engine, writing
from fleet.store.schema import AnalysisRunRow
from phasefit.cli.report import report
from tests.analyzer.report.test_report import WEEK, build, copy_store
from tests.dashboard.seed import Seeded, shared_seed

app = typer.Typer()
app.command()(report)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return shared_seed(tmp_path_factory)


def _cli(url: str, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["--database-url", url, "--week", WEEK, "--json", *args])
    assert result.exit_code == 0, result.output
    payload: dict[str, object] = json.loads(result.stdout)
    return payload


def test_shards_merged_give_the_audit_of_one_analysis(seeded: Seeded, tmp_path: Path) -> None:
    url = copy_store(seeded, tmp_path)
    whole = build(url)
    shards = [_cli(url, "--shard", f"{i}/3") for i in range(3)]
    pools = [p for s in shards for p in s["pools"]]  # type: ignore[attr-defined]
    assert sorted(pools) == sorted(p.pool for p in whole.pools) and len(pools) == len(set(pools))
    engine = make_engine(url)
    with engine.connect() as connection:
        merged = build_audit(connection, WEEK, load_catalog(), version="test", shards=3)
    engine.dispose()
    assert merged.this_week == whole.this_week
    assert merged.pools == whole.pools
    assert [(a.subject, a.kind) for a in merged.actions] == [(a.subject, a.kind) for a in whole.actions]
    assert merged.points == whole.points and merged.fingerprint == whole.fingerprint
    stored = _cli(url, "--shards", "3")
    assert stored["misplaced_workers"] == whole.this_week.misplaced_workers


def test_a_missing_shard_is_named(seeded: Seeded, tmp_path: Path) -> None:
    url = copy_store(seeded, tmp_path)
    _cli(url, "--shard", "0/2")
    engine = make_engine(url)
    with (
        engine.connect() as connection,
        pytest.raises(ReportError, match=r"shard\(s\) 1 of 2 have not stored"),
    ):
        build_audit(connection, WEEK, load_catalog(), version="test", shards=2)
    engine.dispose()
    result = CliRunner().invoke(
        app, ["--database-url", url, "--week", WEEK, "--shard", "0/2", "--shards", "2"]
    )
    assert result.exit_code == 2 and "give one" in " ".join(result.output.split())


def test_a_shard_stored_by_an_older_summary_version_counts_as_not_run(seeded: Seeded, tmp_path: Path) -> None:
    url = copy_store(seeded, tmp_path)
    _cli(url, "--shard", "0/2")
    engine = make_engine(url)
    with engine.connect() as connection:
        run = latest_analysis(connection)
        raw = connection.execute(select(AnalysisRunRow.summary).order_by(AnalysisRunRow.id.desc())).first()
    assert run is not None and raw is not None
    old = {**raw[0], "version": 2, "scope": {**raw[0]["scope"], "shard": [1, 2]}}  # its shapes cannot merge
    with writing(engine) as connection:
        later = run.created_at + timedelta(minutes=1)
        put_analysis(connection, created_at=later, from_ts=run.from_ts, to_ts=run.to_ts, summary=old)
    with (
        engine.connect() as connection,
        pytest.raises(ReportError, match=r"shard\(s\) 1 of 2 have not stored"),
    ):
        build_audit(connection, WEEK, load_catalog(), version="test", shards=2)
    engine.dispose()
