"""Settings read from the environment (prefix ``PHASEFIT_``), passed in explicitly: no module instance."""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_database_url() -> str:
    """An SQLite file in the per-user data folder: the embedded default for the demo and a laptop."""
    return f"sqlite:///{Path(user_data_dir('phasefit', appauthor=False)) / 'phasefit.db'}"


class Settings(BaseSettings):
    """Store and catalog settings shared by every phasefit process."""

    model_config = SettingsConfigDict(env_prefix="PHASEFIT_", extra="ignore")

    database_url: str = Field(
        default_factory=default_database_url,
        description="SQLAlchemy URL of the store: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB.",
    )
    catalog_path: Path | None = Field(
        default=None,
        description="An operator's catalog file (YAML) merged over the built-in GPU and model catalogs, "
        "e.g. to add a SKU or set hourly prices.",
    )
    raw_retention_days: int = Field(
        default=14,
        ge=1,
        description="Days of raw gpu/engine samples kept; rollups (per minute, per hour) outlive them.",
    )
    rollup_minute_retention_days: int = Field(
        default=35,
        ge=1,
        description="Days of per-minute rollups kept by `phasefit db prune` (expired in bounded batches); "
        "at least PHASEFIT_RAW_RETENTION_DAYS. Older ranges are read from the hourly rollups.",
    )
    rollup_hour_retention_days: int = Field(
        default=400,
        ge=0,
        description="Days of hourly rollups kept by `phasefit db prune`; 0 keeps them forever. At least "
        "PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS unless 0.",
    )
    raw_close_after_days: int = Field(
        default=1,
        ge=0,
        le=366,
        description="PostgreSQL: whole days after which a raw-sample day partition is closed by `phasefit db "
        "partitions` / `prune` (its unique index, a quarter of its size, traded for a BRIN index; later "
        "writes into it stay exactly-once but check stored keys themselves). 1 keeps today and yesterday "
        "open.",
    )

    @model_validator(mode="after")
    def _tiers_nest(self) -> Settings:
        """Each tier outlives the one it is rolled up from: per-minute rollups are written from raw samples
        (and rewritten while raw rows exist), hourly ones are what remains once per-minute ones go."""
        raw, minute, hour = (
            self.raw_retention_days,
            self.rollup_minute_retention_days,
            self.rollup_hour_retention_days,
        )
        check_tiers(raw, minute, hour)
        return self

    @field_validator("database_url")
    @classmethod
    def _known_driver(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql")):
            raise ValueError(
                f"unsupported database URL scheme in {value.split('://', 1)[0]!r}: "
                "use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            )
        if value.startswith("postgresql://") or value.startswith("postgresql+psycopg2://"):
            raise ValueError("PostgreSQL URLs must name the psycopg 3 driver: postgresql+psycopg://...")
        return value


def check_tiers(raw_days: int, minute_days: int, hour_days: int) -> None:
    """Refuse retentions under which a coarser tier would go before a finer one (ValueError naming both)."""
    if minute_days < raw_days:
        raise ValueError(
            f"PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS ({minute_days}) is shorter than "
            f"PHASEFIT_RAW_RETENTION_DAYS ({raw_days}): per-minute rollups would be expired while the raw "
            "samples they are computed from remain; keep them at least as long"
        )
    if hour_days != 0 and hour_days < minute_days:
        raise ValueError(
            f"PHASEFIT_ROLLUP_HOUR_RETENTION_DAYS ({hour_days}) is shorter than "
            f"PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS ({minute_days}): hourly rollups must outlive the "
            "per-minute ones (or be 0: kept forever)"
        )
