"""What one app holds (built by ``create_app``, reached through :mod:`phasefit.service.deps`)."""

from __future__ import annotations

import hashlib
import hmac
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from fleet.clock import Clock
from fleet.store.migrate import SchemaState, SchemaStatus, head_revision, schema_status
from fleet.store.rows import TimeEncoding
from fleet.store.writer import SkuResolver
from phasefit.service.batches import BatchValidator
from phasefit.service.guards import CardinalityGuard, TokenSlots, WriteGate
from phasefit.service.metrics import ServiceMetrics
from phasefit.service.settings import ServiceSettings
from phasefit.service.tokens import TokenRegistry
from phasefit.service.writes import BatchWriter, SeriesCache


class StoreNotReadyError(Exception):
    """The store answers but its schema is not at this phasefit's head revision (or cannot be checked)."""


class SchemaWatch:
    """Whether the store's schema is current, re-checked at most every ``recheck_s`` while it is not."""

    def __init__(self, engine: Engine, clock: Clock, recheck_s: float = 5.0) -> None:
        self.engine = engine
        self.clock = clock
        self.recheck_s = recheck_s
        self.current = False
        self.reason = "the store's schema has not been checked yet"
        self._checked_at = float("-inf")
        self._lock = threading.Lock()

    def check(self) -> SchemaStatus:
        """Check now (raises the store's error when it is unreachable)."""
        self._checked_at = self.clock.monotonic()
        status = schema_status(self.engine)
        self.current = status.state is SchemaState.CURRENT
        self.reason = (
            ""
            if self.current
            else f"the store's schema is {status.state.value} (revision {status.current}, "
            f"this phasefit needs {status.head}): run `phasefit db upgrade`"
        )
        return status

    def require_current(self) -> None:
        """Return if the schema is current, else raise :class:`StoreNotReadyError` (or the store's error)."""
        if self.current:
            return
        with self._lock:
            if not self.current and self.clock.monotonic() - self._checked_at >= self.recheck_s:
                self.check()
        if not self.current:
            raise StoreNotReadyError(self.reason)

    @staticmethod
    def head() -> str:
        return head_revision()


@dataclass(frozen=True)
class BasicCredential:
    username: str
    password_digest: bytes

    def matches(self, username: str, password: str) -> bool:
        user_ok = hmac.compare_digest(username.encode(), self.username.encode())
        password_ok = hmac.compare_digest(hashlib.sha256(password.encode()).digest(), self.password_digest)
        return user_ok & password_ok


@dataclass
class ServiceState:
    settings: ServiceSettings
    engine: Engine
    clock: Clock
    registry: CollectorRegistry
    metrics: ServiceMetrics
    ingest_tokens: TokenRegistry
    read_tokens: TokenRegistry
    alertmanager_tokens: TokenRegistry
    alertmanager_basic: BasicCredential | None
    validator: BatchValidator
    token_slots: TokenSlots
    gate: WriteGate
    cardinality: CardinalityGuard
    schema: SchemaWatch
    sku_resolver: SkuResolver | None
    cache: SeriesCache
    writer: BatchWriter

    @property
    def time_encoding(self) -> TimeEncoding:
        return "epoch_us" if self.engine.dialect.name == "sqlite" else "datetime"

    @property
    def alertmanager_configured(self) -> bool:
        return self.alertmanager_tokens.configured or self.alertmanager_basic is not None

    def is_store_unavailable(self, exc: BaseException) -> bool:
        return store_unavailable(self.engine, exc)


def store_unavailable(engine: Engine, exc: BaseException) -> bool:
    """True for errors that mean "the store cannot be used right now" (answer 503, retry later)."""
    if isinstance(exc, OperationalError | InterfaceError | DisconnectionError | PoolTimeoutError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    dbapi = engine.dialect.loaded_dbapi
    return isinstance(exc, dbapi.OperationalError | dbapi.InterfaceError)
