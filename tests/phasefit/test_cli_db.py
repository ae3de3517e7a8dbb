"""`phasefit db upgrade|downgrade|current|stats|partitions|prune`."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import inspect
from typer.testing import CliRunner

from fleet.store.engine import make_engine, writing
from fleet.store.migrate import head_revision
from fleet.store.writer import write_samples
from phasefit.cli.db import app
from tests.fleet.store_factories import T0, engine_sample, gpu_sample

runner = CliRunner()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    names = set(inspect(engine).get_table_names())
    engine.dispose()
    return names


def test_upgrade_current_stats_and_downgrade(store_url: str) -> None:
    before = runner.invoke(app, ["current", "--json", "--database-url", store_url])
    assert json.loads(before.stdout) | {"database": None} == {
        "database": None, "current": None, "head": head_revision(), "state": "empty",
    }  # fmt: skip
    refused = runner.invoke(app, ["stats", "--database-url", store_url])
    assert refused.exit_code == 1 and "phasefit db upgrade" in refused.stderr

    upgraded = runner.invoke(app, ["upgrade", "--database-url", store_url, "--days-ahead", "2"])
    assert upgraded.exit_code == 0 and f"at revision {head_revision()}" in upgraded.stderr
    if store_url.startswith("postgresql"):  # today and 2 days ahead, for each raw table
        assert "partitions created: raw_gpu_samples_p" in upgraded.stderr
    after = json.loads(runner.invoke(app, ["current", "--json", "--database-url", store_url]).stdout)
    assert after["state"] == "current" and after["current"] == head_revision()
    stats = runner.invoke(app, ["stats", "--json", "--database-url", store_url])
    assert stats.exit_code == 0 and json.loads(stats.stdout)["gpu_samples"] == 0
    assert "gpu_samples" in runner.invoke(app, ["stats", "--database-url", store_url]).stderr

    declined = runner.invoke(app, ["downgrade", "base", "--database-url", store_url], input="n\n")
    assert declined.exit_code == 1 and "raw_gpu_samples" in _tables(store_url)
    downgraded = runner.invoke(app, ["downgrade", "base", "--yes", "--database-url", store_url])
    assert downgraded.exit_code == 0, downgraded.output
    assert _tables(store_url) == {"alembic_version"}


def test_unknown_revisions_and_bad_urls_fail_with_a_message(store_url: str) -> None:
    unknown = runner.invoke(app, ["upgrade", "nope", "--database-url", store_url])
    assert unknown.exit_code == 1 and "nope" in unknown.stderr
    bad_url = runner.invoke(app, ["current", "--database-url", "postgresql://x@y/z"])
    assert bad_url.exit_code == 1 and "psycopg" in bad_url.stderr


def test_prune_rolls_up_and_deletes_old_raw_samples(store_url: str) -> None:
    runner.invoke(app, ["upgrade", "--database-url", store_url])
    ahead = ["partitions", "--now", "2026-03-02", "--days-ahead", "0"]
    runner.invoke(app, [*ahead, "--database-url", store_url])
    engine = make_engine(store_url)
    with writing(engine) as connection:
        write_samples(connection, [gpu_sample(0, minute) for minute in range(90)] + [engine_sample(0, 5)])
    engine.dispose()
    now = (T0 + timedelta(days=3, minutes=30)).strftime("%Y-%m-%dT%H:%M:%S")
    result = runner.invoke(
        app, ["prune", "--retention-days", "2", "--now", now, "--json", "--database-url", store_url]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["deleted"] == {"gpu_samples": 90, "engine_samples": 1}
    assert summary["rollup_rows"]["gpu_samples_1m"] == 90 and summary["rollup_rows"]["gpu_samples_1h"] == 2
    if store_url.startswith("sqlite"):  # rounded down to the hour: rows are deleted
        assert summary["cutoff"] == (T0 + timedelta(days=1)).isoformat()
        assert summary["dropped_partitions"] == summary["created_partitions"] == []
    else:  # rounded down to the day: the samples' day partition went whole, and the next days' came
        assert summary["cutoff"] == (T0 + timedelta(days=1)).replace(hour=0).isoformat()
        assert summary["dropped_partitions"] == ["raw_gpu_samples_p20260302", "raw_engine_samples_p20260302"]
        assert (
            len(summary["created_partitions"]) == 16
            and "raw_gpu_samples_p20260305" in summary["created_partitions"]
        )
    text = runner.invoke(app, ["prune", "--database-url", store_url])
    assert text.exit_code == 0 and "deleted raw samples before" in text.stderr


def test_partitions_are_created_ahead_and_listed(store_url: str) -> None:
    runner.invoke(app, ["upgrade", "--database-url", store_url, "--days-ahead", "0"])
    args = ["partitions", "--now", "2026-03-02T23:00:00", "--days-ahead", "1", "--database-url", store_url]
    listed = runner.invoke(app, [*args, "--json"])
    assert listed.exit_code == 0, listed.output
    again = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    if store_url.startswith("sqlite"):
        empty = {"created": [], "closed": [], "deferred": [], "partitions": []}
        assert json.loads(listed.stdout) == again == empty
        assert "unpartitioned" in runner.invoke(app, args).stderr
        return
    first = json.loads(listed.stdout)
    names = [f"raw_{kind}_samples_p2026030{day}" for kind in ("gpu", "engine") for day in (2, 3)]
    assert first["created"] == names and again["created"] == []
    gpu = [item for item in again["partitions"] if item["table"] == "raw_gpu_samples"]
    spans = [(item["from"], item["to"]) for item in gpu]
    assert ("2026-03-02T00:00:00+00:00", "2026-03-03T00:00:00+00:00") in spans and spans[-1] == (None, None)
    text = runner.invoke(app, args).stderr
    assert "partitions created: none; closed: none" in text and "raw_gpu_samples_default: DEFAULT" in text
    assert "2026-03-03T00:00:00+00:00), open," in text
    # two days on, Monday and Tuesday are behind the horizon (1 day): closed, and listed as such
    later = ["partitions", "--now", "2026-03-05T01:00:00", "--days-ahead", "0", "--database-url", store_url]
    closed = json.loads(runner.invoke(app, [*later, "--json"]).stdout)
    assert closed["closed"] == [
        f"raw_{kind}_samples_p2026030{day}" for kind in ("gpu", "engine") for day in (2, 3)
    ]
    assert closed["created"] == ["raw_gpu_samples_p20260305", "raw_engine_samples_p20260305"]
    states = {item["name"]: item["open"] for item in closed["partitions"]}
    assert states["raw_gpu_samples_p20260302"] is False and states["raw_gpu_samples_p20260305"] is True
    kept = runner.invoke(app, [*later, "--close-after-days", "9"]).stderr
    assert "closed: none" in kept and "2026-03-03T00:00:00+00:00), closed," in kept
