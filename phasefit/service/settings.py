"""Service settings (environment prefix ``PHASEFIT_``), validated at start so an unsafe setup never runs.

Refused outside development mode (``--dev``, the demo): no ingest token at all, read access guarded by
tokens that do not exist, a token file that does not parse. Tokens are kept only as SHA-256 digests
(:mod:`phasefit.service.tokens`); the values of secret settings are never logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from fleet.settings import Settings
from phasefit.service.tokens import TokenFormatError, parse_tokens, read_token_file

MiB = 1024 * 1024


class ServiceSettings(Settings):
    """What ``phasefit serve`` needs on top of the store settings; every field is ``PHASEFIT_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PHASEFIT_", extra="ignore", populate_by_name=True)

    dev: bool = Field(
        default=False,
        description="Development mode (the demo): starts without tokens, with open reads and an open "
        "Alertmanager receiver. Refused on a non-loopback address.",
    )
    ingest_tokens_file: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("PHASEFIT_INGEST_TOKENS_FILE", "PHASEFIT_SERVICE_TOKENS_FILE"),
        description="File of collector tokens, one per line: NAME:SHA256HEX[:NODE-PATTERNS] or a plain "
        "token (hashed when read). Re-read when it changes, so a removed line revokes that collector.",
    )
    ingest_tokens: SecretStr | None = Field(
        default=None,
        description="Collector tokens in the token-file format, separated by spaces or newlines (a secret).",
    )
    read_access: Literal["open", "token"] = Field(
        default="open",
        description="'open': the query API and /metrics need no token (bind to loopback or a private "
        "network); 'token': they need a read token.",
    )
    read_tokens_file: Path | None = Field(
        default=None, description="File of read tokens (dashboard, analyzer, Prometheus), token-file format."
    )
    read_tokens: SecretStr | None = Field(default=None, description="Read tokens, token-file format.")
    alertmanager_tokens_file: Path | None = Field(
        default=None,
        description="File of bearer tokens Alertmanager may send (http_config.authorization), token-file "
        "format. Without any Alertmanager credential the receiver refuses every delivery (401) unless --dev.",
    )
    alertmanager_tokens: SecretStr | None = Field(
        default=None, description="Alertmanager bearer tokens, token-file format."
    )
    alertmanager_username: str | None = Field(
        default=None, description="User name Alertmanager sends with http_config.basic_auth."
    )
    alertmanager_password: SecretStr | None = Field(
        default=None, description="Password for alertmanager_username (basic auth)."
    )
    alertmanager_password_file: Path | None = Field(
        default=None, description="File holding the basic-auth password (read at start)."
    )
    max_body_bytes: int = Field(
        default=8 * MiB, ge=1024, description="Largest request body on the wire (413 beyond it)."
    )
    max_decompressed_bytes: int = Field(
        default=32 * MiB, ge=1024, description="Largest gzip-decoded ingest body (413 beyond it: gzip bombs)."
    )
    max_records_per_batch: int = Field(
        default=10_000, ge=1, description="Most records in one ingest request (413 beyond it)."
    )
    max_string_length: int = Field(
        default=253,
        ge=8,
        le=253,
        description="Longest node, GPU, worker, model or engine name accepted (422 beyond it).",
    )
    max_new_series_per_token_per_hour: int = Field(
        default=10_000,
        ge=1,
        description="Cardinality guard: most GPUs plus workers new to the store that one token may create "
        "in a sliding hour (429 with Retry-After beyond it). Counted per service process.",
    )
    write_concurrency: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Writer threads; each commits the batches queued meanwhile in one transaction "
        "(SQLite: 1). One is fastest next to a local PostgreSQL: more threads contend with the event "
        "loop for the interpreter lock; consider 2-4 when PostgreSQL is a slow network hop away.",
    )
    max_pending_ingests: int = Field(
        default=256,
        ge=1,
        description="Ingest requests admitted at once (reading, validating, waiting or writing); more get "
        "429 with Retry-After before their body is read.",
    )
    write_wait_s: float = Field(
        default=5.0, gt=0, description="Longest a validated batch waits for a writer before 429."
    )
    dimension_refresh_s: float = Field(
        default=60.0,
        ge=0,
        description="How stale the last_seen of GPUs, workers and nodes may get before a batch rewrites it "
        "(changed attributes are always written at once).",
    )
    retry_after_s: int = Field(default=2, ge=1, description="Retry-After of a 429 (overload).")
    store_retry_after_s: int = Field(default=5, ge=1, description="Retry-After of a 503 (store unavailable).")
    alert_max_body_bytes: int = Field(
        default=1 * MiB, ge=1024, description="Largest Alertmanager notification body (413 beyond it)."
    )
    max_page_size: int = Field(
        default=1000, ge=1, description="Largest page a paginated read serves (a larger 'limit' is capped)."
    )
    max_raw_range_s: float = Field(
        default=6 * 3600.0,
        gt=0,
        description="Longest time range of raw samples one request may read; longer ranges need 'step'.",
    )
    max_points: int = Field(
        default=10_000, ge=10, description="Most time buckets a series request may ask for ((to-from)/step)."
    )
    db_connect_timeout_s: int = Field(
        default=5, ge=1, description="PostgreSQL connect timeout, so an outage answers 503 quickly."
    )
    sqlite_busy_timeout_ms: int = Field(
        default=5000, ge=0, description="How long a write waits for SQLite's lock before answering 503."
    )
    create_schema: bool = Field(
        default=True,
        description="Create the schema in an EMPTY store at start (a store at another revision is never "
        "migrated: run `phasefit db upgrade`).",
    )

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Self:
        try:
            ingest = self._count_tokens(self.ingest_tokens_file, self.ingest_tokens, "ingest")
            read = self._count_tokens(self.read_tokens_file, self.read_tokens, "read")
            self._count_tokens(self.alertmanager_tokens_file, self.alertmanager_tokens, "alertmanager")
        except TokenFormatError as exc:
            raise ValueError(str(exc)) from None
        if self.alertmanager_password_file is not None and not self.alertmanager_password_file.is_file():
            raise ValueError(
                f"PHASEFIT_ALERTMANAGER_PASSWORD_FILE {self.alertmanager_password_file} is not a file"
            )
        has_password = self.alertmanager_password is not None or self.alertmanager_password_file is not None
        if has_password != (self.alertmanager_username is not None):
            raise ValueError("set both PHASEFIT_ALERTMANAGER_USERNAME and a password (or neither)")
        if self.max_decompressed_bytes < self.max_body_bytes:
            raise ValueError("max_decompressed_bytes must be at least max_body_bytes")
        if self.dev:
            return self
        if ingest == 0:
            raise ValueError(
                "no ingest token configured: set PHASEFIT_INGEST_TOKENS_FILE (one NAME:SHA256HEX or plain "
                "token per line) or PHASEFIT_INGEST_TOKENS, or run with --dev for a local demo"
            )
        if self.read_access == "token" and read == 0:
            raise ValueError(
                "PHASEFIT_READ_ACCESS=token but no read token is configured: set PHASEFIT_READ_TOKENS_FILE "
                "or PHASEFIT_READ_TOKENS, or PHASEFIT_READ_ACCESS=open"
            )
        return self

    @staticmethod
    def _count_tokens(path: Path | None, secret: SecretStr | None, what: str) -> int:
        count = 0
        if path is not None:
            count += len(read_token_file(path))
        if secret is not None:
            count += len(
                parse_tokens(secret.get_secret_value(), source=f"{what} tokens variable", split_spaces=True)
            )
        return count

    def alertmanager_password_value(self) -> str | None:
        if self.alertmanager_password is not None:
            return self.alertmanager_password.get_secret_value()
        if self.alertmanager_password_file is not None:
            return self.alertmanager_password_file.read_text(encoding="utf-8").strip()
        return None
