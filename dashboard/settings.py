"""Dashboard settings (environment prefix ``PHASEFIT_DASHBOARD_``), read once per script run, never at import.

The store URL and the operator's catalog file are the shared ``PHASEFIT_DATABASE_URL`` and
``PHASEFIT_CATALOG_PATH`` (:class:`fleet.settings.Settings`); only what is the dashboard's own lives here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DashboardSettings(BaseSettings):
    """Where the dashboard reads from and how long it keeps what it read."""

    model_config = SettingsConfigDict(env_prefix="PHASEFIT_DASHBOARD_", extra="ignore")

    source: Literal["store", "api"] = Field(
        default="store",
        description="'store': read the store (PHASEFIT_DATABASE_URL) directly; 'api': read the phasefit "
        "service's query API at api_url (pages the API does not serve say so).",
    )
    api_url: str = Field(
        default="http://127.0.0.1:8000",
        description="Base URL of the phasefit service when source is 'api'.",
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="Read token sent as 'Authorization: Bearer' to the service (when it guards reads).",
    )
    api_timeout_s: float = Field(default=10.0, gt=0, description="Timeout of one API request, in seconds.")
    cache_ttl_s: int = Field(
        default=60,
        ge=0,
        le=86_400,
        description="Seconds a query result is reused before the store or API is read again.",
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address 'phasefit dashboard' binds to (loopback by default: the dashboard has no "
        "login).",
    )
    port: int = Field(default=8501, ge=1, le=65_535, description="Port 'phasefit dashboard' listens on.")

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"api_url must start with http:// or https://, not {value!r}")
        return value.rstrip("/")
