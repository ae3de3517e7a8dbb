"""Where a GPU-holding pod serves its engine's ``/metrics``, from the pod object itself.

On Kubernetes the collector knows which pods hold this node's GPUs (kubelet PodResources); discovery turns
each of them into the metrics URL(s) to scrape, so a DaemonSet needs no per-engine configuration. In order:

1. ``phasefit.io/metrics-port`` (and ``phasefit.io/metrics-path``, ``phasefit.io/metrics-scheme``): the
   operator names the endpoint for phasefit alone;
2. the de-facto Prometheus annotations ``prometheus.io/scrape``, ``prometheus.io/port``,
   ``prometheus.io/path``, ``prometheus.io/scheme`` (``scrape: "false"`` opts the pod out);
3. a container port named ``metrics`` or ``http-metrics`` (path ``/metrics``).

Nothing else is guessed: a pod with none of these is reported with the reason, and its engine can still be
given by URL (``PHASEFIT_COLLECTOR_ENGINE_URLS``) or the mapping file. vLLM and SGLang serve ``/metrics`` on
their API port, so annotating that port is the usual way; Dynamo workers serve theirs on the system port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PHASEFIT_PREFIX = "phasefit.io/metrics-"
PROMETHEUS_PREFIX = "prometheus.io/"
METRICS_PORT_NAMES = ("metrics", "http-metrics")
DEFAULT_PATH = "/metrics"


@dataclass(frozen=True)
class Discovered:
    """The metrics URLs of one pod, or why there are none."""

    urls: tuple[str, ...] = ()
    why_none: str | None = None


NOT_LOOKED_UP = Discovered(why_none="the pod was not looked up in the Kubernetes API")


def _url(scheme: str, ip: str, port: str | int, path: str) -> str:
    host = f"[{ip}]" if ":" in ip else ip  # IPv6 pod addresses
    return f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"


def _port(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    return text if text.isdigit() and 0 < int(text) < 65536 else None


def metrics_urls(
    annotations: Mapping[str, str], named_ports: Mapping[str, int], pod_ip: str | None
) -> Discovered:
    """The pod's metrics URL(s) by the rules in the module docstring."""
    if not pod_ip:
        return Discovered(why_none="the pod has no IP yet")
    for prefix, scrape_key in ((PHASEFIT_PREFIX, None), (PROMETHEUS_PREFIX, "prometheus.io/scrape")):
        port_key = f"{prefix}port"
        if port_key not in annotations:
            continue
        if scrape_key is not None and annotations.get(scrape_key, "true").strip().lower() == "false":
            return Discovered(why_none=f"{scrape_key} is 'false'")
        port = _port(annotations[port_key])
        if port is None:
            return Discovered(why_none=f"{port_key} {annotations[port_key]!r} is not a port number")
        scheme = annotations.get(f"{prefix}scheme", "http").strip().lower()
        if scheme not in ("http", "https"):
            return Discovered(why_none=f"{prefix}scheme {scheme!r} is neither http nor https")
        path = annotations.get(f"{prefix}path", DEFAULT_PATH).strip() or DEFAULT_PATH
        return Discovered((_url(scheme, pod_ip, port, path),))
    ports = [named_ports[name] for name in METRICS_PORT_NAMES if name in named_ports]
    if ports:
        return Discovered(tuple(_url("http", pod_ip, port, DEFAULT_PATH) for port in ports))
    return Discovered(
        why_none=(
            "no phasefit.io/metrics-port or prometheus.io/port annotation and no container port named "
            + " or ".join(repr(n) for n in METRICS_PORT_NAMES)
        )
    )


def pod_metrics_urls(pod: Any) -> Discovered:
    """:func:`metrics_urls` of a Kubernetes ``V1Pod`` (the client's object, or anything shaped like it)."""
    metadata = getattr(pod, "metadata", None)
    annotations = dict(getattr(metadata, "annotations", None) or {})
    named: dict[str, int] = {}
    spec = getattr(pod, "spec", None)
    for container in list(getattr(spec, "containers", None) or []):
        for port in list(getattr(container, "ports", None) or []):
            name, number = getattr(port, "name", None), getattr(port, "container_port", None)
            if name and isinstance(number, int):
                named.setdefault(str(name), number)
    status = getattr(pod, "status", None)
    return metrics_urls(annotations, named, getattr(status, "pod_ip", None))


def merged_urls(configured: Sequence[str], discovered: Sequence[str]) -> list[str]:
    """Configured URLs first, then discovered ones not already configured, each once, in a stable order."""
    seen: set[str] = set()
    out: list[str] = []
    for url in (*configured, *sorted(discovered)):
        if url not in seen:
            seen.add(url)
            out.append(url)
    return out


def discovered_urls(workers: Sequence[Any]) -> tuple[list[str], dict[str, str]]:
    """The metrics URLs of attributed pod workers (anything with ``worker_id`` and ``metrics``), and for each
    pod worker without one, why (to log and export)."""
    urls: list[str] = []
    missing: dict[str, str] = {}
    for worker in workers:
        found: Discovered | None = getattr(worker, "metrics", None)
        if found is None:
            continue
        urls.extend(found.urls)
        if not found.urls:
            missing[str(worker.worker_id)] = found.why_none or "no metrics endpoint"
    return urls, missing
