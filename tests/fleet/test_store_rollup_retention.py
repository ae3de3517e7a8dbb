"""Rollup tiers with their own retention: per-minute and hourly rows expired in bounded batches."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from pydantic import ValidationError
from sqlalchemy import Engine, select

from fleet.contract import EngineSample, GpuSample
from fleet.settings import Settings
from fleet.store.engine import writing
from fleet.store.queries import table_counts
from fleet.store.retention import apply_retention, refresh_rollups
from fleet.store.rollup_retention import TIERS, RollupRetention, expire_rollups, rollup_cutoffs
from fleet.store.writer import write_samples
from tests.fleet.store_factories import T0, engine_sample, gpu_sample

DAY, HOUR, MINUTE = timedelta(days=1), timedelta(hours=1), timedelta(minutes=1)
# Minutes after T0 with a GPU and an engine sample: ten on day 0, the minute before day 1 and its first,
# and ten on day 3.
MINUTES = [*range(10), 24 * 60 - 1, 24 * 60, *range(3 * 24 * 60, 3 * 24 * 60 + 10)]


def _fill(engine: Engine) -> None:
    records: list[GpuSample | EngineSample] = []
    for minute in MINUTES:
        records += [gpu_sample(0, minute), engine_sample(0, minute)]
    with writing(engine) as connection:
        write_samples(connection, records)
        refresh_rollups(connection, T0, T0 + 3 * DAY + HOUR)


def _buckets(engine: Engine, tier: str) -> dict[str, list[datetime]]:
    with engine.connect() as connection:
        return {
            t.name: list(connection.execute(select(t.c.bucket).order_by(t.c.bucket)).scalars())
            for t in TIERS[tier]
        }


def test_expiry_deletes_exactly_the_rows_before_each_cutoff_in_batches(store_engine: Engine) -> None:
    _fill(store_engine)
    now = T0 + 3 * DAY + timedelta(minutes=30)  # 2 days: cutoff T0 + 1 day (rounded down to the hour)
    hourly_before = _buckets(store_engine, "1h")
    minute_only = expire_rollups(store_engine, now=now, retention=RollupRetention(2, 0), batch_rows=3)
    assert minute_only.cutoffs == {"1m": T0 + DAY, "1h": None}
    assert minute_only.deleted == {
        "gpu_samples_1m": 11, "engine_samples_1m": 11, "gpu_samples_1h": 0, "engine_samples_1h": 0,
    }  # fmt: skip
    assert minute_only.per_tier() == {"1m": 22, "1h": 0}
    assert minute_only.batches == 2 * 4  # 3 + 3 + 3 + 2 per table; the hourly tier is kept forever
    kept = [T0 + m * MINUTE for m in MINUTES if T0 + m * MINUTE >= T0 + DAY]
    assert _buckets(store_engine, "1m") == {"gpu_samples_1m": kept, "engine_samples_1m": kept}
    assert _buckets(store_engine, "1h") == hourly_before  # the other tier untouched

    both = expire_rollups(store_engine, now=now, retention=RollupRetention(2, 2))
    assert both.cutoffs == {"1m": T0 + DAY, "1h": T0 + DAY}
    assert both.per_tier() == {"1m": 0, "1h": 4}  # T0 and T0 + 23 h, of both tables
    hours = [T0 + DAY, T0 + 3 * DAY]
    assert _buckets(store_engine, "1h") == {"gpu_samples_1h": hours, "engine_samples_1h": hours}
    assert _buckets(store_engine, "1m")["gpu_samples_1m"] == kept


def test_a_tier_never_goes_past_the_finer_one() -> None:
    now = T0 + 100 * DAY + timedelta(minutes=5)
    assert rollup_cutoffs(now, RollupRetention(35, 400)) == {"1m": T0 + 65 * DAY, "1h": T0 - 300 * DAY}
    raw_cutoff = T0 + 60 * DAY  # raw samples still kept from here: per-minute rollups stay too
    assert rollup_cutoffs(now, RollupRetention(35, 35), raw_cutoff) == {"1m": raw_cutoff, "1h": raw_cutoff}


def test_prune_expires_the_tiers_after_the_raw_samples(store_engine: Engine) -> None:
    _fill(store_engine)
    now = T0 + 3 * DAY + timedelta(minutes=30)
    result = apply_retention(store_engine, now=now, retention_days=1, rollup_retention=RollupRetention(2, 0))
    assert result.rollups_expired is not None
    assert result.rollups_expired.per_tier() == {"1m": 22, "1h": 0}
    with store_engine.connect() as connection:
        counts = table_counts(connection)
    assert (counts["gpu_samples_1m"], counts["gpu_samples_1h"]) == (11, 4)
    assert apply_retention(store_engine, now=now, retention_days=1).rollups_expired is None
    with pytest.raises(ValueError, match="per-minute rollups kept 2 days but raw samples 3"):
        apply_retention(store_engine, now=now, retention_days=3, rollup_retention=RollupRetention(2, 0))


def test_unsafe_retentions_are_refused_naming_both_settings() -> None:
    with pytest.raises(ValueError, match="ROLLUP_HOUR_RETENTION_DAYS \\(10\\) is shorter than"):
        RollupRetention(35, 10)
    with pytest.raises(ValueError, match="at least 1 day"):
        RollupRetention(0, 0)
    with pytest.raises(ValueError, match="0 \\(forever\\) or more"):
        RollupRetention(35, -1)
    assert RollupRetention(35, 0).hour_days == 0  # forever


def test_settings_keep_the_tiers_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAW", "ROLLUP_MINUTE", "ROLLUP_HOUR"):
        monkeypatch.delenv(f"PHASEFIT_{name}_RETENTION_DAYS", raising=False)
    defaults = Settings()
    assert (defaults.rollup_minute_retention_days, defaults.rollup_hour_retention_days) == (35, 400)
    monkeypatch.setenv("PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS", "0")
    assert Settings().rollup_hour_retention_days == 0
    with pytest.raises(ValidationError) as raw:
        Settings(raw_retention_days=40)
    assert (
        "PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS (35) is shorter than PHASEFIT_RAW_RETENTION_DAYS (40)"
        in str(raw.value)
    )
    monkeypatch.setenv("PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS", "30")
    with pytest.raises(ValidationError) as hour:
        Settings()
    assert (
        "PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS (30) is shorter than PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS (35)"
        in str(hour.value)
    )
