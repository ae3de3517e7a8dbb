"""What the read routers share: store access off the event loop, pagination links, documented errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import PlainValidator, WithJsonSchema
from sqlalchemy import Connection

from phasefit.service.models import ErrorMessage
from phasefit.service.series import STEP_PATTERN
from phasefit.service.state import ServiceState
from phasefit.service.wire import InstantRange

T = TypeVar("T")

READ_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {
        "model": ErrorMessage,
        "description": "Read access is token-guarded and the token is missing or wrong.",
    },
    403: {"model": ErrorMessage, "description": "The token may not read (an ingest token)."},
    503: {"model": ErrorMessage, "description": "The store is unavailable or not migrated; retry later."},
}

Limit = Annotated[
    int, Query(ge=1, le=100_000, description="Page size; capped at the service's max_page_size.")
]
Offset = Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip.")]
# Instants of the years 1970-2099 as written (RFC 3339 with a time zone), or POSIX seconds of those years:
# every conversion after (to UTC, a default span back, epoch microseconds) stays clear of the calendar's
# edges.
INSTANT = InstantRange(1970, 2099, numbers=True)
Instant = Annotated[
    datetime, PlainValidator(INSTANT), WithJsonSchema(INSTANT.json_schema(), mode="validation")
]
From = Annotated[Instant | None, Query(alias="from", description="Range start (RFC 3339 with a time zone, or "
                                        "POSIX seconds; years 1970-2099); inclusive.")]  # fmt: skip
To = Annotated[Instant | None, Query(alias="to", description="Range end; exclusive. Default: now.")]
Step = Annotated[str | None, Query(pattern=STEP_PATTERN, max_length=32,
                                   description="Bucket width from one second to about three centuries: 60, "
                                   "30s, 5m, 1h, 1d or 1500ms.")]  # fmt: skip
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL


def text_query(max_length: int, description: str) -> Any:
    """A free-text query parameter: bounded, and without NUL (which the store cannot compare)."""
    return Query(max_length=max_length, pattern=NO_NUL, description=description)


async def read_store(state: ServiceState, fn: Callable[[Connection], T]) -> T:
    """Run ``fn`` on a connection in a worker thread, once the store's schema is known to be current."""
    return await anyio.to_thread.run_sync(partial(_read, state, fn))


def _read(state: ServiceState, fn: Callable[[Connection], T]) -> T:
    state.schema.require_current()
    with state.engine.connect() as connection:
        return fn(connection)


def invalid(name: str, message: str, value: object = None, where: str = "query") -> RequestValidationError:
    """A 422 in FastAPI's own format (the documented HTTPValidationError) for a check FastAPI cannot make."""
    return RequestValidationError(
        [{"type": "value_error", "loc": (where, name), "msg": message, "input": value}]
    )


async def no_nul_characters(request: Request) -> None:
    """Refuse (422) NUL characters in the path or query: PostgreSQL text cannot hold them."""
    for name, value in (*request.path_params.items(), *request.query_params.multi_items()):
        if "\x00" in str(value) or "\x00" in name:
            where = "path" if name in request.path_params else "query"
            raise invalid(name, "must not contain NUL characters", where=where)


def page_limit(state: ServiceState, limit: int) -> int:
    """The page size actually served: ``limit`` capped at the service's max_page_size (the answer says)."""
    return min(limit, state.settings.max_page_size)


def next_link(request: Request, *, offset: int, limit: int, more: bool) -> str | None:
    if not more:
        return None
    return str(request.url.include_query_params(offset=offset + limit, limit=limit))


def time_range(
    state: ServiceState, start: datetime | None, end: datetime | None, default_span: timedelta
) -> tuple[datetime, datetime]:
    end = end or state.clock.now()
    start = start or end - default_span
    if start >= end:
        raise invalid(
            "from", f"'from' ({start.isoformat()}) must be before 'to' ({end.isoformat()})", start.isoformat()
        )
    return start, end
