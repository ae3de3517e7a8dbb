"""Where a GPU-holding pod serves its engine's /metrics: annotations and named ports, nothing guessed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from collector.discovery import (
    Discovered,
    discovered_urls,
    merged_urls,
    metrics_urls,
    pod_metrics_urls,
)

IP = "10.1.2.3"


@pytest.mark.parametrize(
    ("annotations", "ports", "expected"),
    [
        ({"phasefit.io/metrics-port": "9090", "prometheus.io/port": "8000"}, {}, f"http://{IP}:9090/metrics"),
        ({"prometheus.io/port": "8000"}, {}, f"http://{IP}:8000/metrics"),
        ({"prometheus.io/port": "8000", "prometheus.io/path": "stats"}, {}, f"http://{IP}:8000/stats"),
        ({"prometheus.io/port": "8443", "prometheus.io/scheme": "https"}, {}, f"https://{IP}:8443/metrics"),
        ({}, {"http": 8000, "metrics": 9400}, f"http://{IP}:9400/metrics"),
        ({"phasefit.io/metrics-port": "8081", "phasefit.io/metrics-path": "/m"}, {}, f"http://{IP}:8081/m"),
    ],
)
def test_the_endpoint_comes_from_annotations_then_named_ports(
    annotations: dict[str, str], ports: dict[str, int], expected: str
) -> None:
    assert metrics_urls(annotations, ports, IP) == Discovered((expected,))


@pytest.mark.parametrize(
    ("annotations", "ports", "ip", "why"),
    [
        ({"prometheus.io/scrape": "false", "prometheus.io/port": "8000"}, {}, IP, "'false'"),
        ({"prometheus.io/port": "http"}, {}, IP, "not a port number"),
        ({"prometheus.io/port": "70000"}, {}, IP, "not a port number"),
        ({"prometheus.io/port": "8000", "prometheus.io/scheme": "ftp"}, {}, IP, "neither http nor https"),
        ({}, {"http": 8000}, IP, "no container port named 'metrics'"),
        ({"prometheus.io/port": "8000"}, {}, None, "no IP yet"),
    ],
)
def test_no_endpoint_says_why(
    annotations: dict[str, str], ports: dict[str, int], ip: str | None, why: str
) -> None:
    found = metrics_urls(annotations, ports, ip)
    assert found.urls == () and why in (found.why_none or "")


def test_an_ipv6_pod_address_is_bracketed() -> None:
    assert metrics_urls({"prometheus.io/port": "8000"}, {}, "fd00::7").urls == (
        "http://[fd00::7]:8000/metrics",
    )


def _pod(annotations: dict[str, str] | None, ports: list[tuple[str | None, int]], ip: str | None) -> Any:
    containers = [
        SimpleNamespace(ports=[SimpleNamespace(name=n, container_port=p) for n, p in ports]),
        SimpleNamespace(ports=None),
    ]
    return SimpleNamespace(
        metadata=SimpleNamespace(annotations=annotations),
        spec=SimpleNamespace(containers=containers),
        status=SimpleNamespace(pod_ip=ip),
    )


def test_a_kubernetes_pod_object_is_read_as_the_api_returns_it() -> None:
    assert pod_metrics_urls(_pod(None, [(None, 8000), ("metrics", 9400)], IP)).urls == (
        f"http://{IP}:9400/metrics",
    )
    assert pod_metrics_urls(SimpleNamespace()).why_none == "the pod has no IP yet"


def test_discovered_urls_join_the_configured_ones_once() -> None:
    workers = [
        SimpleNamespace(worker_id="llm/decode-0", metrics=Discovered((f"http://{IP}:8000/metrics",))),
        SimpleNamespace(worker_id="llm/prefill-0", metrics=Discovered(why_none="the pod has no IP yet")),
        SimpleNamespace(worker_id="node:8000", metrics=None),  # not a pod worker: nothing to discover
    ]
    urls, missing = discovered_urls(workers)
    assert urls == [f"http://{IP}:8000/metrics"]
    assert missing == {"llm/prefill-0": "the pod has no IP yet"}
    configured = ["http://127.0.0.1:30000/metrics", f"http://{IP}:8000/metrics"]
    assert merged_urls(configured, urls) == configured
    assert merged_urls([], ["http://b/metrics", "http://a/metrics"]) == [
        "http://a/metrics",
        "http://b/metrics",
    ]
