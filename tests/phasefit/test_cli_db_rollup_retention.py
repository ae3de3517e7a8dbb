"""`phasefit db prune` expires per-minute and hourly rollups past their own retention."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from fleet.store.engine import make_engine, writing
from fleet.store.writer import write_samples
from phasefit.cli.db import app
from tests.fleet.store_factories import T0, engine_sample, gpu_sample

runner = CliRunner()
DAY = timedelta(days=1)


def test_prune_reports_the_rollups_it_expired_per_tier(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHASEFIT_RAW_RETENTION_DAYS", "1")
    monkeypatch.setenv("PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS", "2")
    monkeypatch.setenv("PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS", "3")
    runner.invoke(app, ["upgrade", "--database-url", store_url])
    engine = make_engine(store_url)
    with writing(engine) as connection:  # day 0 (90 minutes) and day 3 (one minute)
        records = [gpu_sample(0, m) for m in range(90)] + [engine_sample(0, 5), gpu_sample(0, 3 * 24 * 60)]
        write_samples(connection, records)
    engine.dispose()
    first = (T0 + 3 * DAY + timedelta(minutes=90)).strftime("%Y-%m-%dT%H:%M:%S")
    args = ["prune", "--database-url", store_url, "--days-ahead", "0"]
    result = runner.invoke(app, [*args, "--now", first, "--json"])
    assert result.exit_code == 0, result.output
    expired = json.loads(result.stdout)["rollups_expired"]
    assert expired["tiers"] == {
        "1m": {"cutoff": (T0 + DAY + timedelta(hours=1)).isoformat(), "rows": 91},
        "1h": {"cutoff": (T0 + timedelta(hours=1)).isoformat(), "rows": 2},  # GPU 0's and worker 0's T0
    }
    assert expired["tables"]["gpu_samples_1m"] == 90 and expired["tables"]["engine_samples_1m"] == 1
    later = (T0 + 4 * DAY + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
    text = runner.invoke(app, [*args, "--now", later])
    assert text.exit_code == 0, text.output
    assert "rollups expired: 0 1m rows before 2026-03-04 14:00 UTC; 1 1h rows before 2026-03-03 14:00" in (
        text.stderr
    )


def test_prune_refuses_raw_kept_longer_than_per_minute_rollups(store_url: str) -> None:
    refused = runner.invoke(app, ["prune", "--database-url", store_url, "--retention-days", "40"])
    assert refused.exit_code == 1
    assert "--retention-days 40 is longer than PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS (35)" in refused.stderr
