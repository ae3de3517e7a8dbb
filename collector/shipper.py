"""Ships spooled records to the ingest API (or a JSONL file), acknowledging them in the spool on success.

Ingest contract (team brief): ``POST <url>/v1/ingest``, body ``{"records": [...]}``, gzip, bearer token.
200 -> acknowledged.  429 and 503 -> wait ``Retry-After`` (seconds or an HTTP date), else back off; other
5xx, 408 and network errors -> exponential backoff with jitter, retried forever (reliability.md §1.6: no
give-up timer; the spool bound is the only loss, and it is counted).  413 -> halve the batch; a single
record too large is rejected.  422 -> the records its ``detail`` names are rejected and the rest resent
(nothing was stored); without indexes, the batch is rejected.  401/403 -> retried with backoff and counted
as errors, never dropped: a bad token is a configuration fault, not bad data.  Any other 4xx -> the batch is
rejected and counted.  Sampling never waits on shipping: the shipper runs on its own thread.
"""

from __future__ import annotations

import email.utils
import gzip
import logging
import os
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

import httpx

from collector.clock import Clock
from collector.spool import Spool, SpooledRecord

log = logging.getLogger(__name__)

Outcome = Literal["ok", "retry", "reject", "split", "auth"]
MAX_RETRY_AFTER_S = 600.0


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    detail: str = ""
    retry_after_s: float | None = None
    rejected_indexes: frozenset[int] | None = None  # for 422: which records of the batch are bad


class Sink(Protocol):
    def send(self, payloads: list[bytes]) -> SendResult: ...


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """RFC 9110 Retry-After: delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def _rejected_indexes(response: httpx.Response) -> frozenset[int] | None:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return None
    if not isinstance(detail, list):
        return None
    indexes = {d.get("index") for d in detail if isinstance(d, dict)}
    return frozenset(i for i in indexes if isinstance(i, int)) or None


class HttpSink:
    def __init__(
        self, client: httpx.Client, base_url: str, token: str | None, clock: Clock, *, compress: bool = True
    ) -> None:
        self.client = client
        self.url = base_url.rstrip("/") + "/v1/ingest"
        self.clock = clock
        self.compress = compress
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        if compress:
            self.headers["Content-Encoding"] = "gzip"

    def send(self, payloads: list[bytes]) -> SendResult:
        body = b'{"records":[' + b",".join(payloads) + b"]}"
        if self.compress:
            body = gzip.compress(body, compresslevel=5)
        try:
            response = self.client.post(self.url, content=body, headers=self.headers)
        except httpx.HTTPError as exc:
            return SendResult("retry", f"{type(exc).__name__}: {exc}")
        status = response.status_code
        if 200 <= status < 300:
            return SendResult("ok")
        retry_after = parse_retry_after(response.headers.get("Retry-After"), self.clock.now())
        if status in (429, 503) or status >= 500 or status == 408:
            return SendResult("retry", f"HTTP {status}", retry_after)
        if status in (401, 403):
            return SendResult("auth", f"HTTP {status}: the ingest API refused the token")
        if status == 413:
            return SendResult("split", "HTTP 413: batch too large")
        if status == 422:
            bad = _rejected_indexes(response)
            return SendResult("reject", "HTTP 422: validation failed", rejected_indexes=bad)
        return SendResult("reject", f"HTTP {status}: {response.text[:200]}")


class FileSink:
    """Appends records as JSON lines to a file (fsync'd), for ``phasefit ingest`` or a file-shipping agent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, payloads: list[bytes]) -> SendResult:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as handle:
                handle.write(b"\n".join(payloads) + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            return SendResult("retry", f"cannot write {self.path}: {exc.strerror}")
        return SendResult("ok")


@dataclass
class Shipper:
    spool: Spool
    sink: Sink
    clock: Clock
    rng: random.Random = field(default_factory=random.Random)
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    batch_max_records: int = 2000
    batch_max_bytes: int = 4 * 1024 * 1024
    idle_s: float = 1.0
    next_attempt_at: float = 0.0
    failures: int = 0
    shipped: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    _limit: int = 0

    def __post_init__(self) -> None:
        self._limit = self.batch_max_records

    def step(self) -> bool:
        """One send attempt if one is due; True when it made progress (more may be waiting)."""
        if self.clock.monotonic() < self.next_attempt_at:
            return False
        batch = self.spool.peek(self._limit, self.batch_max_bytes)
        if not batch:
            return False
        result = self.sink.send([r.payload for r in batch])
        return self._settle(batch, result)

    def _settle(self, batch: list[SpooledRecord], result: SendResult) -> bool:
        seqs = [r.seq for r in batch]
        if result.outcome == "ok":
            self.spool.ack(seqs)
            self.shipped += len(seqs)
            self.failures = 0
            self._limit = min(self.batch_max_records, self._limit * 2)
            return True
        if result.outcome == "split":
            if len(batch) == 1:
                size = len(batch[0].payload)
                log.error("a record of %d bytes is too large for the ingest API: dropped", size)
                self.spool.reject(seqs)
            else:
                self._limit = max(1, len(batch) // 2)
            return True
        if result.outcome == "reject":
            bad = result.rejected_indexes
            rejected = [s for i, s in enumerate(seqs) if bad is None or i in bad]
            log.error("ingest rejected %d record(s) for good: %s", len(rejected), result.detail)
            self.spool.reject(rejected)
            self.errors["ship_rejected"] += 1
            return True
        # retry or auth: back off, keep everything
        self.errors["ship_auth" if result.outcome == "auth" else "ship"] += 1
        self.failures += 1
        self.next_attempt_at = self.clock.monotonic() + self._delay(result.retry_after_s)
        if self.failures in (1, 10) or self.failures % 100 == 0:
            log.warning("shipping failed (%d in a row): %s", self.failures, result.detail)
        return False

    def _delay(self, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, MAX_RETRY_AFTER_S) * self.rng.uniform(1.0, 1.1)
        ceiling = min(self.backoff_max_s, self.backoff_min_s * 2.0 ** min(self.failures - 1, 30))
        return ceiling / 2 + self.rng.uniform(0.0, ceiling / 2)  # "equal jitter": never a thundering zero

    def drain(self, max_attempts: int = 1000) -> bool:
        """Ship until the spool is empty (True) or an attempt fails (False), sleeping through backoffs."""
        for _ in range(max_attempts):
            if self.spool.count() == 0:
                return True
            wait = self.next_attempt_at - self.clock.monotonic()
            if wait > 0:
                return False
            if not self.step() and self.spool.count():
                return False
        return self.spool.count() == 0

    def run(self, stop: threading.Event) -> None:
        """The shipping thread: send while there is progress, otherwise wait for the next attempt."""
        while not stop.is_set():
            try:
                progressed = self.step()
            except Exception as exc:  # an unexpected fault must not kill shipping for good
                log.exception("shipper step failed: %s", exc)
                self.errors["ship"] += 1
                progressed = False
            if progressed:
                continue
            wait = self.next_attempt_at - self.clock.monotonic()
            stop.wait(wait if wait > 0 else self.idle_s)
