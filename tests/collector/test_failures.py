"""The failure vocabulary: reason classes from real transport errors, and the log of what is failing now."""

from __future__ import annotations

import socket
import ssl

import httpx
import pytest

from collector.failures import REASONS, Failure, FailureLog, exception_reason, http_reason
from collector.scrape import ScrapeError, reason_of, scrape, status_of


@pytest.mark.parametrize(
    ("status", "reason"),
    [(401, "http_401"), (403, "http_403"), (500, "http_500"), (503, "http_503"), (418, "http_4xx"),
     (507, "http_5xx"), (302, "http_3xx")],
)  # fmt: skip
def test_http_reasons_are_a_fixed_set(status: int, reason: str) -> None:
    assert http_reason(status) == reason and reason in REASONS


def test_reasons_of_real_transport_errors() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.ConnectError) as refused:
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2.0)
    assert exception_reason(refused.value) == "connect_refused"
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        with pytest.raises(ScrapeError) as slow:
            scrape(httpx.Client(), f"http://127.0.0.1:{silent.getsockname()[1]}/metrics", 0.2)
    assert slow.value.reason == "timeout" and slow.value.status is None
    wrapped = httpx.ConnectError("handshake failed")
    wrapped.__cause__ = ssl.SSLError("certificate verify failed")
    assert exception_reason(wrapped) == "tls"
    unresolved = httpx.ConnectError("lookup failed")
    unresolved.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert exception_reason(unresolved) == "dns"
    assert exception_reason(httpx.ReadError("reset")) == "read_error"
    assert exception_reason(ValueError("bug")) == "exception"


def test_a_scrape_error_keeps_its_class_in_its_text() -> None:
    error = ScrapeError("http://h:1/metrics", "http_401", "HTTP 401 Unauthorized", 401)
    assert str(error) == "http://h:1/metrics: HTTP 401 Unauthorized [reason http_401]"
    assert reason_of(str(error)) == "http_401" and status_of(str(error)) == 401
    # the engine scraper's other error, an exposition without an engine's token counters
    assert reason_of("no vLLM, SGLang or TensorRT-LLM token counter in the exposition") == "not_an_engine"


def test_failure_labels_stay_bounded() -> None:
    odd = Failure("engine_scrape", "http://h/" + "x" * 500, "something free-form")
    assert odd.reason == "exception" and len(odd.target) == 200
    assert Failure("ship", "http://i/v1/ingest", "http_401", "refused", 401).describe() == (
        "ship http://i/v1/ingest: refused (HTTP 401) [reason http_401]"
    )


def test_the_log_counts_and_knows_what_is_failing_now() -> None:
    log = FailureLog()
    first = Failure("dcgm_scrape", "http://d/metrics", "http_500", "HTTP 500", 500)
    log.fail(first)
    log.fail(first)
    log.fail(Failure("engine_scrape", "http://e/metrics", "connect_refused"))
    assert log.counts() == {
        ("dcgm_scrape", "http://d/metrics", "http_500"): 2,
        ("engine_scrape", "http://e/metrics", "connect_refused"): 1,
    }
    assert log.by_stage() == {"dcgm_scrape": 2, "engine_scrape": 1}
    log.ok("dcgm_scrape", "http://d/metrics")
    assert [f.target for f in log.current()] == ["http://e/metrics"]
    assert log.up() == {
        ("dcgm_scrape", "http://d/metrics"): True,
        ("engine_scrape", "http://e/metrics"): False,
    }
    assert first in log.last_failures()  # what failed, even though it answers again
