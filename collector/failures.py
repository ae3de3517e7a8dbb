"""What failed, where and why: one vocabulary for the log, the exporter and ``phasefit collect --once``.

A :class:`Failure` names its stage (which part of the collector), its target (the URL, socket path or GPU it
was talking to) and a short reason class from a fixed set, so the exporter's labels stay bounded; the free
text (``detail``) goes to the log and stderr only, never into a label.  A :class:`FailureLog` counts failures
per (stage, target, reason) and remembers, per (stage, target), whether the last attempt succeeded.
"""

from __future__ import annotations

import errno
import logging
import ssl
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

log = logging.getLogger(__name__)

# Stages: the part of the collector that failed.
STAGE_DCGM = "dcgm_scrape"  # reading dcgm-exporter's /metrics
STAGE_ENGINE = "engine_scrape"  # reading a serving engine's /metrics
STAGE_NVML = "nvml"  # an NVML call (target: the GPU UUID, or "nvml" for the library)
STAGE_SOURCE = "source"  # a GPU source raised (target: the source name)
STAGE_POD_RESOURCES = "pod_resources"  # the kubelet pod-resources socket
STAGE_SHIP = "ship"  # sending records to the ingest API or the output file
STAGE_SPOOL = "spool"  # committing records to the local spool
STAGE_WINDOW = "window"  # a whole window failed (a bug; the loop goes on)
STAGE_EXPORTER = "exporter"  # series left out of /metrics by the cardinality bound
STAGE_DISCOVERY = "engine_discovery"  # a GPU-holding pod that declares no /metrics endpoint (target: pod)

# Reasons: a fixed set of short classes (the exporter's ``reason`` label).
_HTTP_NAMED = frozenset({400, 401, 403, 404, 405, 406, 408, 410, 413, 415, 422, 429, 500, 502, 503, 504})
REASON_CONNECT_REFUSED = "connect_refused"
REASON_CONNECT_ERROR = "connect_error"  # unreachable host, reset during connect, other OSError
REASON_DNS = "dns"  # the host name does not resolve
REASON_TLS = "tls"  # the TLS handshake failed (certificate, protocol)
REASON_TIMEOUT = "timeout"
REASON_READ_ERROR = "read_error"  # the connection broke after it was made (reset, protocol error)
REASON_PARSE_ERROR = "parse_error"  # the body is not a Prometheus exposition
REASON_TOO_LARGE = "too_large"  # the body is larger than any exporter we understand
REASON_NOT_AN_ENGINE = "not_an_engine"  # an exposition without any vLLM / SGLang / TensorRT-LLM token counter
REASON_NO_GPU_SERIES = "no_gpu_series"  # dcgm-exporter answered with no per-GPU series
REASON_NO_GPUS = "no_gpus"  # NVML lists no GPU
REASON_NVML_ERROR = "nvml_error"
REASON_CALL_TIMEOUT = "call_timeout"  # an NVML call ran past its deadline
REASON_DRIVER_UNRESPONSIVE = "driver_unresponsive"  # blocked NVML calls piled up
REASON_REJECTED = "rejected"  # the ingest API rejected records for good (they are dropped and counted)
REASON_IO_ERROR = "io_error"  # a file or database could not be written
REASON_TRUNCATED = "truncated"  # the exporter's cardinality bound left series out
REASON_NO_METRICS_ENDPOINT = "no_metrics_endpoint"  # a pod without a metrics annotation or named port
REASON_EXCEPTION = "exception"  # anything else (a bug): the log has the traceback

REASONS: frozenset[str] = frozenset(
    {f"http_{code}" for code in _HTTP_NAMED}
    | {"http_1xx", "http_3xx", "http_4xx", "http_5xx"}
    | {
        REASON_CONNECT_REFUSED, REASON_CONNECT_ERROR, REASON_DNS, REASON_TLS, REASON_TIMEOUT,
        REASON_READ_ERROR, REASON_PARSE_ERROR, REASON_TOO_LARGE, REASON_NOT_AN_ENGINE,
        REASON_NO_GPU_SERIES, REASON_NO_GPUS, REASON_NVML_ERROR, REASON_CALL_TIMEOUT,
        REASON_DRIVER_UNRESPONSIVE, REASON_REJECTED, REASON_IO_ERROR, REASON_TRUNCATED, REASON_EXCEPTION,
        REASON_NO_METRICS_ENDPOINT,
    }
)  # fmt: skip

MAX_TARGET_CHARS = 200


def http_reason(status: int) -> str:
    """``401`` -> ``http_401``; a status outside the named set -> its class (``http_4xx``)."""
    if status in _HTTP_NAMED:
        return f"http_{status}"
    if 100 <= status < 600:
        return f"http_{status // 100}xx"
    return "http_5xx"


def _causes(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def exception_reason(exc: BaseException) -> str:
    """The reason class of a transport failure (httpx exceptions and the OS errors beneath them)."""
    if isinstance(exc, httpx.TimeoutException):
        return REASON_TIMEOUT
    for cause in _causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return REASON_CONNECT_REFUSED
        if isinstance(cause, ssl.SSLError):
            return REASON_TLS
        if isinstance(cause, TimeoutError):
            return REASON_TIMEOUT
        if isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED:
            return REASON_CONNECT_REFUSED
        if type(cause).__name__ == "gaierror":  # socket.gaierror: the name does not resolve
            return REASON_DNS
    text = str(exc).lower()
    if "connection refused" in text or "errno 111" in text:
        return REASON_CONNECT_REFUSED  # httpcore flattens the OSError into its message
    if "name or service not known" in text or "nodename nor servname" in text or "name resolution" in text:
        return REASON_DNS
    if "certificate" in text or "ssl" in text:
        return REASON_TLS
    if isinstance(exc, httpx.ConnectError):
        return REASON_CONNECT_ERROR
    if isinstance(exc, httpx.TransportError):
        return REASON_READ_ERROR
    if isinstance(exc, OSError):
        return REASON_IO_ERROR
    return REASON_EXCEPTION


@dataclass(frozen=True)
class Failure:
    """One failed attempt: ``stage`` and ``target`` say where, ``reason`` (from :data:`REASONS`) says what
    kind, ``detail`` says it in words.  ``partial``: the target still yielded something (one GPU's NVML call
    failed, the others' did not), as opposed to yielding nothing this window."""

    stage: str
    target: str
    reason: str
    detail: str = ""
    status: int | None = None  # the HTTP status, when there was a response
    partial: bool = False

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            object.__setattr__(self, "reason", REASON_EXCEPTION)
        object.__setattr__(self, "target", self.target[:MAX_TARGET_CHARS])

    @property
    def key(self) -> tuple[str, str]:
        return self.stage, self.target

    def describe(self) -> str:
        """One line for a person: where, what, and the reason class."""
        where = f"{self.stage} {self.target}" if self.target else self.stage
        shown = self.status is not None and str(self.status) not in self.detail
        status = f" (HTTP {self.status})" if shown else ""
        return f"{where}: {self.detail or self.reason}{status} [reason {self.reason}]"


class FailureLog:
    """Failures counted by (stage, target, reason), and the state of each target's last attempt.

    Thread-safe: the shipper thread and the collection loop each keep one, the exporter reads copies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._current: dict[tuple[str, str], Failure] = {}
        self._last: dict[tuple[str, str], Failure] = {}
        self._up: dict[tuple[str, str], bool] = {}

    def fail(self, failure: Failure) -> None:
        with self._lock:
            self._counts[(failure.stage, failure.target, failure.reason)] += 1
            previous = self._current.get(failure.key)
            self._current[failure.key] = failure
            self._last[failure.key] = failure
            self._up[failure.key] = False
        if previous is None or previous.reason != failure.reason:
            log.warning("%s", failure.describe())  # once per change, not every window

    def ok(self, stage: str, target: str) -> None:
        key = (stage, target[:MAX_TARGET_CHARS])
        with self._lock:
            previous = self._current.pop(key, None)
            self._up[key] = True
        if previous is not None:
            log.info("%s %s answers again", stage, target)

    def counts(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._counts)

    def current(self) -> list[Failure]:
        """Targets whose last attempt failed, with that failure."""
        with self._lock:
            return list(self._current.values())

    def last_failures(self) -> list[Failure]:
        """The last failure of every target that ever failed, whether or not it answered since."""
        with self._lock:
            return list(self._last.values())

    def up(self) -> dict[tuple[str, str], bool]:
        with self._lock:
            return dict(self._up)

    def by_stage(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (stage, _, _), count in self.counts().items():
            out[stage] += count
        return out
