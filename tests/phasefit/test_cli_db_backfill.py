"""`phasefit db partitions|prune` after a backfill (issue 31): the backfilled day leaves ``DEFAULT`` for a
partition of its own, is closed and expired like any other (PostgreSQL); SQLite has no partitions. The
backfill is analysable either way, and the same before and after."""

from __future__ import annotations

import json
from typing import Any

import typer
from sqlalchemy import text
from typer.testing import CliRunner

from fleet.store.engine import make_engine
from phasefit.cli.analyze import analyze
from phasefit.cli.db import app
from tests.analyzer.synthetic import H100, H200, Fleet, workers
from tests.phasefit.synthetic_store import store_fleet

runner = CliRunner()
analyzing = typer.Typer()
analyzing.command()(analyze)
DAY = "20240603"  # the synthetic fleet's 8 hours (tests.analyzer.synthetic)
NEXT_DAY = ["--now", "2024-06-04T06:00:00", "--days-ahead", "0"]


def _analysis(url: str) -> dict[str, Any]:
    result = runner.invoke(analyzing, ["--database-url", url, "--json"])
    assert result.exit_code == 0, result.output
    payload: dict[str, Any] = json.loads(result.stdout)
    return {"from": payload["summary"]["from"], "fleet": payload["summary"]["fleet"],
            "findings": sorted((f["worker_id"], f["kind"]) for f in payload["findings"])}  # fmt: skip


def _count(url: str, sql: str) -> int:
    engine = make_engine(url)
    with engine.connect() as connection:
        count = int(connection.execute(text(sql)).scalar_one())
    engine.dispose()
    return count


def test_a_backfilled_day_is_partitioned_closed_and_pruned_like_any_other(store_url: str) -> None:
    assert runner.invoke(app, ["upgrade", "--database-url", store_url]).exit_code == 0
    fleet = Fleet(workers([("node00", H100, 0, 2), ("node01", H200, 2, 0)]), hours=8, window_s=900.0,
                  rate_rps=lambda h: 12.0, osl=lambda h: 900.0)  # fmt: skip
    store_fleet(store_url, fleet)
    samples = _count(store_url, "SELECT count(*) FROM gpu_samples")
    before = _analysis(store_url)
    args = ["partitions", *NEXT_DAY, "--close-after-days", "0", "--database-url", store_url]
    listed = runner.invoke(app, [*args, "--json"])
    assert listed.exit_code == 0, listed.output
    changes = json.loads(listed.stdout)
    assert _analysis(store_url) == before
    if store_url.startswith("sqlite"):
        assert changes == {"created": [], "closed": [], "deferred": [], "partitions": []}
        assert "unpartitioned" in runner.invoke(app, args).stderr
    else:
        backfilled = [f"raw_gpu_samples_p{DAY}", f"raw_engine_samples_p{DAY}"]
        assert set(backfilled) <= set(changes["created"]) and set(backfilled) <= set(changes["closed"])
        default = [item for item in changes["partitions"] if item["from"] is None]
        assert [(item["name"], item["rows_estimate"]) for item in default] == [
            ("raw_gpu_samples_default", 0),
            ("raw_engine_samples_default", 0),
        ]
        assert _count(store_url, "SELECT count(*) FROM raw_gpu_samples_default") == 0
        assert _count(store_url, f"SELECT count(*) FROM raw_gpu_samples_p{DAY}") == samples
        shown = runner.invoke(app, args).stderr
        assert "partitions created: none; closed: none" in shown
        assert "raw_gpu_samples_default: DEFAULT (days without a partition), open, " in shown
        span = "[2024-06-03T00:00:00+00:00, 2024-06-04T00:00:00+00:00)"
        assert f"raw_gpu_samples_p{DAY}: {span}, closed" in shown
    pruned = runner.invoke(
        app, ["prune", "--now", "2024-06-20", "--retention-days", "14", "--json", "--database-url", store_url]
    )
    assert pruned.exit_code == 0, pruned.output
    summary = json.loads(pruned.stdout)
    assert summary["deleted"]["gpu_samples"] == samples
    if store_url.startswith("postgresql"):
        dropped = set(summary["dropped_partitions"])  # with the empty one of the next day
        assert {f"raw_gpu_samples_p{DAY}", f"raw_engine_samples_p{DAY}"} <= dropped
    assert _count(store_url, "SELECT count(*) FROM gpu_samples") == 0


def test_prune_partitions_the_backfilled_days_inside_the_retention(store_url: str) -> None:
    """``db prune`` expires what is past the retention first, then gives the rest of ``DEFAULT`` its days."""
    assert runner.invoke(app, ["upgrade", "--database-url", store_url]).exit_code == 0
    fleet = Fleet(workers([("node00", H100, 0, 2)]), hours=8, window_s=900.0, rate_rps=lambda h: 12.0,
                  osl=lambda h: 900.0)  # fmt: skip
    store_fleet(store_url, fleet)
    samples = _count(store_url, "SELECT count(*) FROM gpu_samples")
    args = ["prune", *NEXT_DAY, "--close-after-days", "0", "--json", "--database-url", store_url]
    pruned = runner.invoke(app, args)
    assert pruned.exit_code == 0, pruned.output
    summary = json.loads(pruned.stdout)
    assert summary["deleted"]["gpu_samples"] == 0
    assert _count(store_url, "SELECT count(*) FROM gpu_samples") == samples
    if store_url.startswith("postgresql"):
        assert f"raw_gpu_samples_p{DAY}" in summary["created_partitions"]
        assert f"raw_gpu_samples_p{DAY}" in summary["closed_partitions"]
        assert _count(store_url, "SELECT count(*) FROM raw_gpu_samples_default") == 0
