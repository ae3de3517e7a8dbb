"""What the wire admits (:mod:`phasefit.service.wire`): media types, repeated keys on both of their paths, and
instants whose pattern in the document and whose validation agree."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from phasefit.service.settings import ServiceSettings
from phasefit.service.wire import (
    InstantRange,
    content_type_problem,
    json_integer,
    keys_all_distinct,
    repeated_key,
    rfc3339_pattern,
)


@pytest.mark.parametrize(
    "value", ["application/json", "APPLICATION/JSON", "application/json; charset=utf-8",
              'application/json;charset="UTF-8"', "application/json;"],
)  # fmt: skip
def test_json_media_types_are_accepted(value: str) -> None:
    assert content_type_problem(value) is None


@pytest.mark.parametrize(
    "value", [None, "", "text/plain", "application/x-www-form-urlencoded", "application/json-seq",
              "application/json; charset=latin-1", "application/json; boundary=x",
              "application/json; charset"],
)  # fmt: skip
def test_other_media_types_are_refused_naming_the_accepted_one(value: str | None) -> None:
    problem = content_type_problem(value)
    assert problem is not None and "application/json" in problem


RECORDS = [
    {"kind": "gpu_sample", "ts": f"2026-03-02T12:00:0{i}Z", "node": "n:1", "sm_active": 0.5} for i in range(3)
]


def distinct(records: list[dict[str, Any]]) -> int:
    return 1 + sum(len(record) for record in records)


def test_a_compact_body_is_proven_free_of_repeats_without_parsing() -> None:
    body = orjson.dumps({"records": RECORDS})
    assert keys_all_distinct(body, distinct(RECORDS))
    assert repeated_key(body) is None


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (b'{"records": [{"a": 1, "a": 2}]}', ("records", 0, "a")),  # the proof fails on the count
        (b'{"records": [{"a" : 1, "a": 2}]}', ("records", 0, "a")),  # a spaced colon: not proven, found
        (b'{"records": [{"a": "\\u0022", "a": 2}]}', ("records", 0, "a")),  # an escape: not proven, found
        (b'{"records": [{"k\\u003a": 1, "k:": 2}]}', ("records", 0, "k:")),  # the same key, written twice
        (b'{"records": [], "records": []}', ("records",)),
        (b'{"x": {"y": [{"z": 1}, {"z": 1, "z": 1}]}}', ("x", "y", 1, "z")),
    ],
)
def test_a_repeated_key_is_found_with_its_path(body: bytes, path: tuple[Any, ...]) -> None:
    assert repeated_key(body) == path
    if b"\\" in body or b'" :' in body:
        assert not keys_all_distinct(body, 2)  # never "proven" where the proof does not hold


@pytest.mark.parametrize("body", [b"not json", b'{"a": NaN}', b'{"a": 1e999}', b"[" * 100_000, b"\xff"])
def test_a_body_that_is_not_json_is_left_to_the_validator(body: bytes) -> None:
    assert repeated_key(body) is None


def test_the_instant_pattern_and_the_validation_agree() -> None:
    instants = InstantRange(1970, 2099, numbers=True)
    pattern = re.compile(instants.pattern)
    accepted = ["1970-01-01T00:00:00Z", "2099-12-31t23:59:59.123456789z", "2026-03-02T12:00:00+23:59",
                "1970-01-01T00:00:00+05:00"]  # fmt: skip
    refused = ["1969-12-31T23:59:59Z", "2100-01-01T00:00:00Z", "0001-01-01T00:00:00+05:00",
               "9999-12-31T23:59:59-05:00", "2026-03-02T12:00:00", "2026-03-02 12:00:00Z",
               "2026-03-02T12:00Z", "2026-03-02T12:00:60Z", "٢٠٢٦-03-02T12:00:00Z",
               "2026-03-02T12:00:00+24:00"]  # fmt: skip
    for text in accepted:
        assert pattern.fullmatch(text), text
        assert instants(text).tzinfo is not None
    for text in refused:
        assert not pattern.fullmatch(text), text
        with pytest.raises(ValueError, match="year 1970-2099"):
            instants(text)
    with pytest.raises(ValueError):  # matches the pattern, but February has no 30th
        instants("2026-02-30T00:00:00Z")
    assert instants(0) == instants("0") == datetime(1970, 1, 1, tzinfo=UTC)
    for seconds in (-1, 4102444800, 1e308, float("nan"), True, "1e3x"):
        with pytest.raises(ValueError):
            instants(seconds)
    schema = instants.json_schema()
    assert schema["anyOf"][1] == {"type": "number", "minimum": 0.0, "exclusiveMaximum": 4102444800.0}


def test_alertmanagers_zero_time_is_the_one_time_outside_the_years() -> None:
    still_firing = datetime(1, 1, 1, tzinfo=UTC)
    ends = InstantRange(2000, 2099, numbers=False, extra={"0001-01-01T00:00:00Z": still_firing})
    assert ends("0001-01-01T00:00:00Z") == still_firing
    for text in ("0001-01-01T00:00:00+00:00", "0001-01-01T00:00:00.000Z", "1999-12-31T23:59:59Z"):
        with pytest.raises(ValueError, match="or 0001-01-01T00:00:00Z"):
            ends(text)
    assert ends(datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5)))).year == 2026
    assert rfc3339_pattern(2000, 2099).startswith("^(?:20[0-9][0-9])-")


def test_json_integers_are_numbers_without_a_fraction() -> None:
    count = json_integer(0, 10)
    assert count(5) == count(5.0) == 5
    for value in (True, "5", 5.5, -1, 11, None):
        with pytest.raises(ValueError):
            count(value)


def test_the_ingest_window_defaults_to_the_raw_retention() -> None:
    base: dict[str, Any] = {"database_url": "sqlite:///x.db", "dev": True}
    assert ServiceSettings(**base).ingest_max_age == 14 * 86400
    assert ServiceSettings(**base, raw_retention_days=30).ingest_max_age == 30 * 86400
    assert ServiceSettings(**base, raw_retention_days=30, ingest_max_age_s=3600).ingest_max_age == 3600
    assert ServiceSettings(**base).ingest_max_future_s == 3600
    for bad in ({"ingest_max_age_s": 0}, {"ingest_max_future_s": -1}, {"ingest_max_future_s": 8 * 86400}):
        with pytest.raises(ValidationError):
            ServiceSettings(**base, **bad)
