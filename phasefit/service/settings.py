"""Service settings (environment prefix ``PHASEFIT_``), validated at start so an unsafe setup never runs.

Refused outside development mode (``--dev``, the demo): no ingest token at all, read access guarded by
tokens that do not exist, open reads on a non-loopback address unless explicitly accepted, a token file that
does not parse, a per-token ingest limit that would let one token take every admission slot, several
service processes on an SQLite store. Development mode itself is refused on a non-loopback address. Tokens
are kept only as SHA-256 digests (:mod:`phasefit.service.tokens`); the values of secret settings are never
logged.

Read access is closed by default wherever the service is reachable from the network: unset, it is
``token`` unless ``bind_host`` (``PHASEFIT_SERVICE_BIND_HOST``, the address given to ``phasefit serve
--host``) is a loopback address or unknown.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal, Self

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from fleet.settings import Settings
from phasefit.service.tokens import TokenFormatError, parse_tokens, read_token_file

MiB = 1024 * 1024
ReadMode = Literal["open", "token"]
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class MultiprocessStoreError(ValueError):
    """More than one service process on a store that has one writer (SQLite)."""


def multiprocess_store_problem(workers: int, database_url: str) -> str | None:
    """Why ``workers`` service processes cannot share ``database_url``, or None when they can."""
    if workers <= 1 or not database_url.startswith("sqlite"):
        return None
    return (
        f"{workers} service processes (--workers / PHASEFIT_SERVICE_WORKERS) need PostgreSQL: SQLite has one "
        "writer in at a time, so the processes would wait on each other's lock and answer 503 past "
        "PHASEFIT_SQLITE_BUSY_TIMEOUT_MS. Set "
        "PHASEFIT_DATABASE_URL (or --database-url) to a postgresql+psycopg:// URL, or run one process"
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``, IPv6 possibly in brackets) serves this machine only."""
    if host.strip().lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # any other name may resolve to a routable address


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
    bind_host: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PHASEFIT_SERVICE_BIND_HOST"),
        description="The address the service listens on: the --host given to `phasefit serve` (or to "
        "uvicorn). Any address but loopback makes token reads the default and refuses open reads and "
        "development mode. Unset, it is taken for loopback (serve's default): set it wherever the service "
        "listens on the network (the container image and the Kubernetes Deployment do).",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        validation_alias=AliasChoices("PHASEFIT_SERVICE_WORKERS"),
        description="Service processes `phasefit serve` runs on its one port (uvicorn workers; --workers "
        "overrides it), each a whole service sharing the store: more than one needs PostgreSQL. /metrics "
        "adds up every process's counters (prometheus-client's multiprocess mode, in "
        "PROMETHEUS_MULTIPROC_DIR or a private temporary folder); admission, per-token and cardinality "
        "limits, the writer threads and the connection pool are per process (docs/deploy.md).",
    )
    read_access: ReadMode | None = Field(
        default=None,
        description="'token': the query API, /metrics, /docs, /redoc and /openapi.json need a read token; "
        "'open': they need none. Unset: 'token' on any non-loopback bind_host, 'open' on loopback. 'open' "
        "on a non-loopback address is refused unless PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK=true.",
    )
    allow_open_reads_on_network: bool = Field(
        default=False,
        validation_alias=AliasChoices("PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK"),
        description="Accept PHASEFIT_READ_ACCESS=open on a non-loopback address (anyone who reaches the "
        "port reads the fleet, the findings, /metrics and the API document). Only behind a network "
        "boundary you trust.",
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
    ingest_max_age_s: float | None = Field(
        default=None,
        gt=0,
        le=100 * 365 * 86400.0,
        description="Oldest record ingest accepts, in seconds before the service's clock (422 naming the "
        "record's ts beyond it). Collectors spool through outages and send their backlog afterwards, and the "
        "spool is bounded by bytes, not age, so this must cover the longest outage you ride out. Unset: the "
        "raw retention (PHASEFIT_RAW_RETENTION_DAYS, 14 days), beyond which `phasefit db prune` deletes "
        "raw samples anyway.",
    )
    ingest_max_future_s: float = Field(
        default=3600.0,
        ge=0,
        le=7 * 86400.0,
        description="How far ahead of the service's clock a record's ts may lie (422 beyond it): room for "
        "clock skew between nodes and the service, not for records from the future.",
    )
    max_new_series_per_token_per_hour: int = Field(
        default=10_000,
        ge=1,
        description="Cardinality guard: most GPUs plus workers new to the store that one token may create "
        "in a sliding hour (429 with Retry-After beyond it). Counted per service process: with N processes "
        "and R replicas one token may create up to N x R times this.",
    )
    write_concurrency: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Writer threads per service process; each commits the batches queued meanwhile in one "
        "transaction (SQLite: 1). One is fastest next to a local PostgreSQL: more threads contend with the "
        "event loop for the interpreter lock; consider 2-4 when PostgreSQL is a slow network hop away.",
    )
    max_pending_ingests: int = Field(
        default=256,
        ge=1,
        description="Ingest requests one service process admits at the same time, each once its body has "
        "arrived whole (validating, waiting or writing); more get 429 with Retry-After. A body still "
        "arriving holds no admission slot.",
    )
    max_pending_ingests_per_token: int | None = Field(
        default=None,
        ge=1,
        description="Ingest requests one token may have in progress at once in one service process, its "
        "body still arriving included (429 with Retry-After beyond it), so one holder cannot take every "
        "slot. Unset: a quarter of max_pending_ingests (64 by default). A DaemonSet's shared token sends one "
        "request per node at a time.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Longest time to receive a whole ingest or Alertmanager request body, from the end of "
        "its headers (408 and the connection closed beyond it).",
    )
    write_wait_s: float = Field(
        default=5.0, gt=0, description="Longest a validated batch waits for a writer before 429."
    )
    dimension_refresh_s: float = Field(
        default=60.0,
        ge=0,
        description="How stale the last_seen of GPUs, workers and nodes may get before a batch rewrites it "
        "(changed attributes are written at once; each service process remembers only its own writes, so "
        "with several processes an attribute that changes and changes back may wait this long).",
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
        problem = multiprocess_store_problem(self.workers, self.database_url)
        if problem is not None:
            raise MultiprocessStoreError(problem)
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
        per_token = self.max_pending_ingests_per_token
        if per_token is not None and per_token > self.max_pending_ingests:
            raise ValueError(
                f"PHASEFIT_MAX_PENDING_INGESTS_PER_TOKEN={per_token} exceeds PHASEFIT_MAX_PENDING_INGESTS="
                f"{self.max_pending_ingests}: one token could take every admission slot"
            )
        if self.dev:
            if self.on_network:
                raise ValueError(
                    f"PHASEFIT_DEV serves without credentials and is refused on {self.bind_host} "
                    "(PHASEFIT_SERVICE_BIND_HOST): bind 127.0.0.1, or configure tokens and drop --dev"
                )
            return self
        if ingest == 0:
            raise ValueError(
                "no ingest token configured: set PHASEFIT_INGEST_TOKENS_FILE (one NAME:SHA256HEX or plain "
                "token per line) or PHASEFIT_INGEST_TOKENS, or run with --dev for a local demo"
            )
        if self.read_mode == "token" and read == 0:
            raise ValueError(self._no_read_token_message())
        if self.read_mode == "open" and self.on_network and not self.allow_open_reads_on_network:
            raise ValueError(
                f"PHASEFIT_READ_ACCESS=open is refused on the non-loopback address {self.bind_host}: anyone "
                "who reaches it would read the fleet, the findings, /metrics and the API document. Set "
                "PHASEFIT_READ_ACCESS=token with PHASEFIT_READ_TOKENS_FILE, or bind 127.0.0.1, or set "
                "PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK=true to accept open reads on this network"
            )
        return self

    @property
    def on_network(self) -> bool:
        """Whether the service is known to listen on a non-loopback address."""
        return self.bind_host is not None and not is_loopback(self.bind_host)

    @property
    def read_mode(self) -> ReadMode:
        """The read access in force: the explicit setting, else ``token`` on a non-loopback address."""
        if self.read_access is not None:
            return self.read_access
        return "token" if self.on_network else "open"

    @property
    def ingest_max_age(self) -> float:
        """Seconds before the service's clock of the oldest record ingest accepts."""
        if self.ingest_max_age_s is not None:
            return self.ingest_max_age_s
        return self.raw_retention_days * 86400.0

    @property
    def ingest_limit_per_token(self) -> int:
        """Ingest requests one token may have in progress: the setting, else a quarter of the admissions."""
        if self.max_pending_ingests_per_token is not None:
            return self.max_pending_ingests_per_token
        return max(1, self.max_pending_ingests // 4)

    def _no_read_token_message(self) -> str:
        how = "set PHASEFIT_READ_TOKENS_FILE (NAME:SHA256HEX per line) or PHASEFIT_READ_TOKENS"
        if self.read_access == "token":
            return f"PHASEFIT_READ_ACCESS=token but no read token is configured: {how}"
        return (
            f"read access defaults to 'token' on the non-loopback address {self.bind_host} "
            f"(PHASEFIT_SERVICE_BIND_HOST) but no read token is configured: {how} (the dashboard, the "
            "analyzer and Prometheus send one as 'Authorization: Bearer'), or bind 127.0.0.1"
        )

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
