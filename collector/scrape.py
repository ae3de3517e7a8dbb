"""Fetching and parsing one ``/metrics`` endpoint, with every failure turned into one :class:`ScrapeError`."""

from __future__ import annotations

import httpx

from collector.promtext import Exposition, PromParseError, parse

MAX_BODY_BYTES = 32 * 1024 * 1024  # a /metrics body larger than this is not an exporter we understand


class ScrapeError(Exception):
    """The endpoint is down, slow, answered non-200, or returned something that is not an exposition."""


def scrape(client: httpx.Client, url: str, timeout_s: float) -> Exposition:
    try:
        response = client.get(url, timeout=timeout_s, headers={"Accept": "text/plain;version=0.0.4"})
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {response.status_code}")
    if len(response.content) > MAX_BODY_BYTES:
        raise ScrapeError(f"{url}: body of {len(response.content)} bytes is too large")
    try:
        return parse(response.text)
    except PromParseError as exc:
        raise ScrapeError(f"{url}: not a Prometheus exposition ({exc})") from exc
