"""What the service admits on the wire before any model sees it: the media type of a JSON body, objects
that repeat a key, and instants (RFC 3339 strings or POSIX seconds) within a stated range of years.

Every rule here is one the OpenAPI document states in its own terms (a media type, a ``pattern``, a
``minimum``), so that what the document calls valid the service accepts and the reverse:

- A JSON body is sent as ``application/json``, optionally with ``charset=utf-8`` (the only encoding JSON
  has); anything else is refused with 415 naming the accepted type.
- An object that repeats a key is refused (422 naming the key): a JSON parser keeps one of the values
  (pydantic the last), so whoever reads the body elsewhere may see another record than the store did.
- An instant's year is the one written in it: a string matches :func:`rfc3339_pattern` (``[0-9]``, never the
  wider ``\\d`` of Python and Rust regexes), a number lies in the POSIX seconds of the same years. The range
  keeps every later conversion (to UTC, minus a default span, to epoch microseconds) clear of the calendar's
  edges, where Python's datetime overflows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import PlainSerializer, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

JSON_MEDIA_TYPE = "application/json"
ACCEPTED_CONTENT_TYPE = "application/json (optionally with charset=utf-8)"


def content_type_problem(value: str | None) -> str | None:
    """Why a ``Content-Type`` header is not a JSON body's, or None when it is."""
    if value is None or not value.strip():
        return f"no Content-Type: send Content-Type: {ACCEPTED_CONTENT_TYPE}"
    media, *parameters = value.split(";")
    refused = f"Content-Type {value.strip()[:100]!r} is not accepted: send {ACCEPTED_CONTENT_TYPE}"
    if media.strip().lower() != JSON_MEDIA_TYPE:
        return refused
    for parameter in parameters:
        name, equals, given = parameter.partition("=")
        if not parameter.strip():
            continue  # "application/json;" is still application/json
        if name.strip().lower() != "charset" or not equals or given.strip().strip('"').lower() != "utf-8":
            return refused
    return None


class _RepeatedKeyError(Exception):
    pass


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _RepeatedKeyError
    return result


class _Pairs(list[tuple[str, Any]]):
    """An object as its key-value pairs, repeats kept (only to find where a repeat is)."""


def repeated_key(body: bytes) -> tuple[str | int, ...] | None:
    """The path to the first key an object of ``body`` repeats (the path ends with that key), or None.

    Ingest calls it only when :func:`keys_all_distinct` cannot prove a body free of repeats; the Alertmanager
    receiver always. Fast path (about 0.1 ms per 100 records): every colon of a JSON text outside its strings
    follows a key, and a body without a backslash (no escapes) writes its strings' colons literally, so the
    body repeats no key exactly when it holds as many colons as orjson's re-serialisation of what it parsed
    (where a repeated key survives once). Otherwise (escapes, or a body orjson refuses), Python's json parser
    looks at every object's pairs, about twice as slowly. A body that is not JSON at all (or nests beyond
    Python's recursion limit, or holds an integer of more digits than Python converts) is left to the
    validator that follows, which refuses it in its own words."""
    if body.find(b"\\") < 0:  # one byte: memchr
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if orjson.dumps(parsed).count(b":") == body.count(b":"):
                return None
    try:
        json.loads(body, object_pairs_hook=_refuse_repeats)
    except _RepeatedKeyError:
        return _first_repeat(json.loads(body, object_pairs_hook=_Pairs), ())
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return None


_LOOSE = re.compile(rb'"[ \t\r\n]')  # a string followed by whitespace: maybe a key before a spaced colon


def keys_all_distinct(body: bytes, distinct_keys: int) -> bool:
    """A cheap proof that ``body``, which a parser read as ``distinct_keys`` distinct keys, repeats none: with
    no backslash a JSON string holds no quote, so every ``":`` ends a key, and with no string followed by
    whitespace no key stands apart from its colon; then the body holds exactly as many keys as ``":`` pairs.
    About 0.06 ms per 100 records and nothing allocated; False means "not proven" (:func:`repeated_key`
    decides)."""
    return body.find(b"\\") < 0 and _LOOSE.search(body) is None and body.count(b'":') == distinct_keys


def _first_repeat(node: Any, path: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
    if isinstance(node, _Pairs):
        seen: set[str] = set()
        for key, _ in node:
            if key in seen:
                return (*path, key)
            seen.add(key)
        children: list[tuple[str | int, Any]] = list(node)
    elif isinstance(node, list):
        children = list(enumerate(node))
    else:
        return None
    for step, value in children:
        found = _first_repeat(value, (*path, step))
        if found is not None:
            return found
    return None


def rfc3339_pattern(first_year: int, last_year: int) -> str:
    """An RFC 3339 date-time (``T``/``Z`` in either case, any fraction, an offset within a day) whose written
    year lies in [first_year, last_year] (four-digit years); ``[0-9]`` throughout, never ``\\d``, which
    Python and Rust read as any Unicode digit and JSON Schema's ECMA 262 regexes as ASCII ones."""
    years = _year_alternatives(first_year, last_year)
    return (
        rf"^(?:{years})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:"
        r"[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
    )


def _year_alternatives(first: int, last: int) -> str:
    """``19[7-9][0-9]|20[0-9][0-9]`` for 1970..2099: whole decades per century where the range allows."""
    if not 1000 <= first <= last <= 9999:
        raise ValueError(f"years {first}..{last} are not four-digit")
    parts = []
    for century in range(first // 100, last // 100 + 1):
        low, high = max(first, century * 100), min(last, century * 100 + 99)
        if low % 10 == 0 and high % 10 == 9:
            parts.append(f"{century}[{low // 10 % 10}-{high // 10 % 10}][0-9]")
        else:
            parts.extend(f"{year:04d}" for year in range(low, high + 1))
    return "|".join(parts)


_AWARE: TypeAdapter[datetime] = TypeAdapter(datetime)
# Serialises a field validated by an InstantRange as pydantic serialises any datetime (a PlainValidator alone
# would run the datetime serializer twice and warn).
AS_DATETIME = PlainSerializer(
    lambda value: _AWARE.dump_python(value, mode="json"), return_type=str, when_used="json"
)
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class InstantRange:
    """Instants whose written year lies in [first_year, last_year]: RFC 3339 strings, and POSIX seconds
    (numbers, or their decimal text in a query) from the first year's start to the last year's end.

    ``extra`` maps strings accepted exactly as written to the instant each stands for (Alertmanager's zero
    time, outside the years)."""

    def __init__(
        self, first_year: int, last_year: int, *, numbers: bool, extra: dict[str, datetime] | None = None
    ) -> None:
        self.first_year, self.last_year, self.numbers = first_year, last_year, numbers
        self.pattern = rfc3339_pattern(first_year, last_year)
        self.extra = dict(extra or {})
        self._regex = re.compile(self.pattern)
        self.earliest = datetime(first_year, 1, 1, tzinfo=UTC)
        self.latest = datetime(last_year + 1, 1, 1, tzinfo=UTC)  # exclusive
        self.min_seconds = self.earliest.timestamp()
        self.max_seconds = self.latest.timestamp()

    def describe(self) -> str:
        words = f"an RFC 3339 date-time with a time zone, year {self.first_year}-{self.last_year}"
        for text in sorted(self.extra):
            words += f", or {text}"
        if self.numbers:
            words += f", or POSIX seconds in [{self.min_seconds:.0f}, {self.max_seconds:.0f})"
        return words

    def json_schema(self) -> dict[str, Any]:
        text: dict[str, Any] = {"type": "string", "format": "date-time", "pattern": self.pattern}
        if self.extra:
            text = {"anyOf": [text, {"type": "string", "enum": sorted(self.extra)}]}
        if not self.numbers:
            return text
        number = {"type": "number", "minimum": self.min_seconds, "exclusiveMaximum": self.max_seconds}
        return {"anyOf": [*text.get("anyOf", [text]), number]}

    def __call__(self, value: object) -> datetime:
        """The instant ``value`` stands for (aware, in the offset it was written in), or a validation error
        naming what is accepted."""
        if isinstance(value, datetime):  # from Python callers
            if value.tzinfo is not None and self.first_year <= value.year <= self.last_year:
                return value
            raise self._error(value)
        if isinstance(value, str):
            if value in self.extra:
                return self.extra[value]
            if self._regex.fullmatch(value):
                try:
                    return _AWARE.validate_python(value)
                except ValidationError:
                    raise self._error(value) from None  # a day the month does not have
            if self.numbers and _JSON_NUMBER.fullmatch(value):
                return self._from_seconds(float(value), value)
            raise self._error(value)
        if self.numbers and isinstance(value, int | float) and not isinstance(value, bool):
            return self._from_seconds(float(value), value)
        raise self._error(value)

    def _from_seconds(self, seconds: float, given: object) -> datetime:
        if not (math.isfinite(seconds) and self.min_seconds <= seconds < self.max_seconds):
            raise self._error(given)
        return datetime.fromtimestamp(seconds, UTC)

    def _error(self, value: object) -> PydanticCustomError:
        shown = repr(value) if not isinstance(value, datetime) else value.isoformat()
        return PydanticCustomError(
            "instant", "{given} is not {accepted}", {"given": shown[:80], "accepted": self.describe()}
        )


def json_integer(minimum: int, maximum: int) -> Callable[[object], int]:
    """A validator of what JSON Schema calls an integer in [minimum, maximum]: a number with no fractional
    part, written ``5`` or ``5.0`` alike (Alertmanager's counts); never a boolean or a string."""

    def validate(value: object) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise PydanticCustomError("int_type", "Input should be a valid integer")
        if not minimum <= value <= maximum:
            bounds = {"minimum": minimum, "maximum": maximum}
            raise PydanticCustomError("int_range", "Input should be from {minimum} to {maximum}", bounds)
        return value

    return validate
