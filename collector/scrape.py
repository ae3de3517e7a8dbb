"""Fetching and parsing one ``/metrics`` endpoint, with every failure turned into one :class:`ScrapeError`
that names the URL, the HTTP status when there was one, and a reason class (:mod:`collector.failures`)."""

from __future__ import annotations

import re

import httpx

from collector.failures import (
    REASON_NOT_AN_ENGINE,
    REASON_PARSE_ERROR,
    REASON_TOO_LARGE,
    REASONS,
    exception_reason,
    http_reason,
)
from collector.promtext import Exposition, PromParseError, parse

MAX_BODY_BYTES = 32 * 1024 * 1024  # a /metrics body larger than this is not an exporter we understand
_REASON_SUFFIX = re.compile(r"\[reason ([a-z0-9_]+)\]\s*$")


class ScrapeError(Exception):
    """The endpoint is down, slow, answered non-200, or returned something that is not an exposition.

    Its text ends with ``[reason <class>]``, so code that only keeps the text (the engine scraper's
    ``last_error``) can still tell the class: :func:`reason_of`."""

    def __init__(self, url: str, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {detail} [reason {reason}]")
        self.url = url
        self.reason = reason
        self.detail = detail
        self.status = status


def reason_of(message: str) -> str:
    """The reason class at the end of a :class:`ScrapeError`'s text; any other scrape failure the engine
    scraper reports (its ``EngineParseError``) is an exposition without an engine's token counters."""
    match = _REASON_SUFFIX.search(message)
    if match is not None and match.group(1) in REASONS:
        return match.group(1)
    return REASON_NOT_AN_ENGINE


def status_of(message: str) -> int | None:
    match = re.search(r"\bHTTP (\d{3})\b", message)
    return int(match.group(1)) if match else None


def scrape(client: httpx.Client, url: str, timeout_s: float) -> Exposition:
    try:
        response = client.get(url, timeout=timeout_s, headers={"Accept": "text/plain;version=0.0.4"})
    except httpx.HTTPError as exc:
        raise ScrapeError(url, exception_reason(exc), f"{type(exc).__name__}: {exc}") from exc
    status = response.status_code
    if status != 200:
        phrase = f" {response.reason_phrase}" if response.reason_phrase else ""
        raise ScrapeError(url, http_reason(status), f"HTTP {status}{phrase}", status)
    if len(response.content) > MAX_BODY_BYTES:
        size = len(response.content)
        raise ScrapeError(url, REASON_TOO_LARGE, f"body of {size} bytes is too large", status)
    try:
        return parse(response.text)
    except PromParseError as exc:
        raise ScrapeError(url, REASON_PARSE_ERROR, f"not a Prometheus exposition ({exc})", status) from exc
