"""Ships spooled records to the ingest API (or a JSONL file), acknowledging them in the spool on success.

Ingest contract (team brief): ``POST <url>/v1/ingest``, body ``{"records": [...]}``, gzip, bearer token.
200 -> acknowledged.  429 and 503 -> wait ``Retry-After`` (seconds or an HTTP date), else back off; other
5xx, 408 and network errors -> exponential backoff with jitter, retried forever (reliability.md §1.6: no
give-up timer; the spool bound is the only loss, and it is counted).  413 -> halve the batch; a single
record too large is rejected.  422 (invalid) and 409 (a sample key stored with other content) -> the records
its ``detail`` names are rejected and the rest resent (nothing was stored); without indexes, the batch is
rejected.  401/403 -> retried with backoff and counted
as errors, never dropped: a bad token is a configuration fault, not bad data.  Any other 4xx -> the batch is
rejected and counted.  Sampling never waits on shipping: the shipper runs on its own thread.  Every failed
send is kept in ``failures`` with the sink's target (the ingest URL or the file), the HTTP status and a reason
class (``http_401``, ``connect_refused``, ``rejected``, ...).
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

from collector.failures import (
    REASON_EXCEPTION,
    REASON_IO_ERROR,
    REASON_REJECTED,
    REASON_TOO_LARGE,
    STAGE_SHIP,
    Failure,
    FailureLog,
    exception_reason,
    http_reason,
)
from collector.spool import Spool, SpooledRecord
from fleet.clock import Clock

log = logging.getLogger(__name__)

Outcome = Literal["ok", "retry", "reject", "split", "auth"]
MAX_RETRY_AFTER_S = 600.0


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    detail: str = ""
    retry_after_s: float | None = None
    rejected_indexes: frozenset[int] | None = None  # for 422: which records of the batch are bad
    reason: str = ""  # the failure's class (collector.failures.REASONS); "" when it succeeded
    status: int | None = None  # the HTTP status, when there was a response


class Sink(Protocol):
    target: str  # where records go: the ingest URL or the file, named in failures

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
        self.target = self.url
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
            return SendResult("retry", f"{type(exc).__name__}: {exc}", reason=exception_reason(exc))
        status = response.status_code
        if 200 <= status < 300:
            return SendResult("ok", status=status)
        reason = http_reason(status)
        retry_after = parse_retry_after(response.headers.get("Retry-After"), self.clock.now())
        if status in (429, 503) or status >= 500 or status == 408:
            return SendResult("retry", f"HTTP {status}", retry_after, reason=reason, status=status)
        if status in (401, 403):
            detail = f"HTTP {status}: the ingest API refused the token"
            return SendResult("auth", detail, reason=reason, status=status)
        if status == 413:
            return SendResult("split", "HTTP 413: batch too large", reason=reason, status=status)
        if status in (409, 422):  # 409: a re-sent key with other content; both name the records
            bad = _rejected_indexes(response)
            detail = f"HTTP {status}: " + (
                "validation failed" if status == 422 else "conflicts with stored samples"
            )
            return SendResult("reject", detail, rejected_indexes=bad, reason=reason, status=status)
        return SendResult("reject", f"HTTP {status}: {response.text[:200]}", reason=reason, status=status)


class FileSink:
    """Appends records as JSON lines to a file (fsync'd), for ``phasefit ingest`` or a file-shipping agent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = str(path)

    def send(self, payloads: list[bytes]) -> SendResult:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as handle:
                handle.write(b"\n".join(payloads) + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            return SendResult("retry", f"cannot write {self.path}: {exc.strerror}", reason=REASON_IO_ERROR)
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
    failed_sends: int = 0  # in a row
    shipped: int = 0
    failures: FailureLog = field(default_factory=FailureLog)
    _limit: int = 0

    @property
    def errors(self) -> Counter[str]:
        """Failed sends by stage (all ``ship``; the reasons are in ``failures``)."""
        return self.failures.by_stage()

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
        target = self.sink.target
        if result.outcome == "ok":
            self.spool.ack(seqs)
            self.shipped += len(seqs)
            self.failed_sends = 0
            self.failures.ok(STAGE_SHIP, target)
            self._limit = min(self.batch_max_records, self._limit * 2)
            return True
        if result.outcome == "split":
            if len(batch) == 1:
                size = len(batch[0].payload)
                detail = f"a record of {size} bytes is too large for the ingest API: dropped"
                log.error("%s", detail)
                self.failures.fail(Failure(STAGE_SHIP, target, REASON_TOO_LARGE, detail, result.status))
                self.spool.reject(seqs)
            else:
                self._limit = max(1, len(batch) // 2)
            return True
        if result.outcome == "reject":
            bad = result.rejected_indexes
            rejected = [s for i, s in enumerate(seqs) if bad is None or i in bad]
            detail = f"ingest rejected {len(rejected)} record(s) for good: {result.detail}"
            log.error("%s", detail)
            self.spool.reject(rejected)
            self.failures.fail(Failure(STAGE_SHIP, target, REASON_REJECTED, detail, result.status))
            return True
        # retry or auth: back off, keep everything
        reason = result.reason or REASON_IO_ERROR
        self.failures.fail(Failure(STAGE_SHIP, target, reason, result.detail, result.status))
        self.failed_sends += 1
        self.next_attempt_at = self.clock.monotonic() + self._delay(result.retry_after_s)
        if self.failed_sends in (1, 10) or self.failed_sends % 100 == 0:
            log.warning("shipping to %s failed (%d in a row): %s", target, self.failed_sends, result.detail)
        return False

    def _delay(self, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, MAX_RETRY_AFTER_S) * self.rng.uniform(1.0, 1.1)
        ceiling = min(self.backoff_max_s, self.backoff_min_s * 2.0 ** min(self.failed_sends - 1, 30))
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
                detail = f"{type(exc).__name__}: {exc}"
                self.failures.fail(Failure(STAGE_SHIP, self.sink.target, REASON_EXCEPTION, detail))
                progressed = False
            if progressed:
                continue
            wait = self.next_attempt_at - self.clock.monotonic()
            stop.wait(wait if wait > 0 else self.idle_s)
