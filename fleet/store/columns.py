"""How timestamps are stored: UTC everywhere, one representation per dialect.

- PostgreSQL: ``TIMESTAMP WITH TIME ZONE`` (an instant; shown in the session's time zone, read back as UTC).
- SQLite: ``BIGINT`` microseconds since the Unix epoch, UTC. Integers sort and compare exactly, take 8 bytes
  instead of 26 for ISO text, bind without formatting on the ingest path, and make rollup buckets plain
  integer arithmetic. To read them by hand: ``datetime(ts / 1000000, 'unixepoch')`` in the sqlite3 shell.

Both come back from the ORM and the read helpers as timezone-aware ``datetime`` in UTC; a naive datetime is
refused on the way in rather than guessed. A stored value beyond Python's calendar (years 1-9999, in UTC)
reads as the calendar's first or last instant, so one such row cannot fail a whole read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_epoch_us(value: datetime) -> int:
    """Exact microseconds since the epoch (no float rounding) of an aware datetime."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()} has no time zone; phasefit stores UTC instants")
    return (value - EPOCH) // _MICROSECOND


_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)
_FIRST_US = (_FIRST - EPOCH) // _MICROSECOND
_LAST_US = (_LAST - EPOCH) // _MICROSECOND


def from_epoch_us(value: int) -> datetime:
    """The instant ``value`` microseconds after the epoch; a value beyond Python's calendar (years 1-9999)
    reads as the calendar's first or last instant instead of failing the whole read. The store held such
    values before the service bounded the times it accepts (``0001-01-01T00:00:00+05:00`` is 5 h before the
    calendar starts); the row itself is left as it is."""
    if value < _FIRST_US:
        return _FIRST
    if value > _LAST_US:
        return _LAST
    return EPOCH + timedelta(microseconds=value)


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC instant: TIMESTAMPTZ on PostgreSQL, integer microseconds on SQLite (module docstring)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return to_epoch_us(value)
        if value.tzinfo is None:
            raise ValueError(
                f"naive datetime {value.isoformat()} has no time zone; phasefit stores UTC instants"
            )
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError(f"{value.isoformat()} lies outside the calendar in UTC (years 1-9999)") from None

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return from_epoch_us(int(value))
        assert isinstance(value, datetime)
        try:
            return value.astimezone(UTC)
        except OverflowError:  # within a day of the calendar's edge, read in a session's other time zone
            return _FIRST if value.year == 1 else _LAST
