"""Zero-agent mode's I/O edge: read dcgm-exporter and engine series from Prometheus's HTTP API.

``GET /api/v1/label/__name__/values`` says which of the known metric names exist in the range (so only
those are queried), then ``GET /api/v1/query_range`` runs each query in chunks of at most 11,000 points per
series (Prometheus refuses more; a chunk refused for loading too many samples is halved and retried), and
:func:`analyzer.prometheus_source.map_fleet` turns the series into frames. Failures are
:class:`PrometheusError` subclasses whose message says what to check.

The frames' timestamps are window ends: the first window is [start, start + step], the last ends at or
before ``end``; gauges are averaged and counters rated over ``range_s`` (default max(step, 120 s), enough
for two scrapes at Prometheus's default 1-minute interval) ending at each step. Where no series carries the
cluster label, the server's own ``external_labels`` (``/api/v1/status/config``) may still name it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import httpx
import numpy as np
import yaml

from analyzer.frames import EngineFrame, GpuFrame
from analyzer.prometheus_fleet import PrometheusFleet
from analyzer.prometheus_labels import DEFAULT_CLUSTER_LABEL, DEFAULT_DEPLOYMENT_LABELS, Family
from analyzer.prometheus_metrics import MetricQuery, plan
from analyzer.prometheus_series import PrometheusPayloadError, RangeSeries, TimeGrid, parse_matrix
from analyzer.prometheus_source import map_fleet
from fleet.gpus import GpuCatalog

MAX_POINTS_PER_SERIES = 11_000  # Prometheus: "exceeded maximum resolution of 11,000 points per timeseries"
DEFAULT_MIN_RANGE_S = 120.0
DEFAULT_TIMEOUT_S = 60.0


class PrometheusError(RuntimeError):
    """A zero-agent read failed; the message says what to check."""


class PrometheusUnreachableError(PrometheusError):
    """Nothing answered at the URL (connection refused, DNS, TLS, timeout)."""


class PrometheusResponseError(PrometheusError):
    """Something answered, but not with what Prometheus's API answers (bad status, not JSON, an error)."""


class NoSeriesError(PrometheusError):
    """Prometheus holds no dcgm-exporter series for the range."""


def _decode(content: bytes) -> Any:
    try:
        import orjson
    except ImportError:  # the server extra brings orjson; the standard library parses the same JSON
        return json.loads(content)
    return orjson.loads(content)


def chunks(grid: TimeGrid, max_points: int = MAX_POINTS_PER_SERIES) -> list[TimeGrid]:
    """``grid`` cut into consecutive grids of at most ``max_points`` evaluation times each."""
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    return [
        TimeGrid(grid.start + first * grid.step, grid.step, min(max_points, grid.n - first))
        for first in range(0, grid.n, max_points)
    ]


class PrometheusClient:
    """Prometheus's HTTP API over an injected ``httpx.Client`` (auth, TLS and timeouts are the client's)."""

    def __init__(self, url: str, http: httpx.Client, *, max_points: int = MAX_POINTS_PER_SERIES) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusError(f"{url!r} is not an http(s) URL of a Prometheus server")
        self.url = url.rstrip("/")
        self._http = http
        self._max_points = max_points

    def _get(self, path: str, params: Mapping[str, str], what: str) -> Any:
        try:
            response = self._http.get(self.url + path, params=dict(params))
        except httpx.TimeoutException as exc:
            raise PrometheusUnreachableError(
                f"Prometheus at {self.url} did not answer {what} in time ({type(exc).__name__}): "
                "raise the timeout or narrow the range"
            ) from exc
        except httpx.HTTPError as exc:
            raise PrometheusUnreachableError(
                f"cannot reach Prometheus at {self.url}: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            body = _decode(response.content)
        except ValueError:
            body = None
        if isinstance(body, Mapping) and body.get("status") == "error":
            raise PrometheusResponseError(
                f"Prometheus at {self.url} rejected {what} (HTTP {response.status_code}): "
                f"{body.get('errorType', 'error')}: {body.get('error', '')}"
            )
        if response.status_code in (401, 403):
            raise PrometheusResponseError(
                f"Prometheus at {self.url} refused {what} (HTTP {response.status_code}): it needs credentials"
            )
        if response.status_code == 404:
            raise PrometheusResponseError(
                f"{self.url} has no Prometheus HTTP API at {path} (HTTP 404): pass the server's root URL, "
                "e.g. http://prometheus:9090"
            )
        if response.status_code != 200:
            raise PrometheusResponseError(
                f"Prometheus at {self.url} answered HTTP {response.status_code} to {what}: "
                f"{response.text[:200]}"
            )
        if not isinstance(body, Mapping):
            kind = response.headers.get("content-type", "unknown content")
            raise PrometheusResponseError(
                f"{self.url}{path} answered {kind}, not Prometheus API JSON: is {self.url} a Prometheus "
                "server (not Grafana or a web UI)?"
            )
        return body

    def metric_names(self, start: float, end: float) -> frozenset[str] | None:
        """Metric names with samples in [start, end]; None when the server cannot list them."""
        params = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        try:
            body = self._get("/api/v1/label/__name__/values", params, "the metric-name listing")
        except PrometheusUnreachableError:
            raise
        except PrometheusResponseError:
            return None
        data = body.get("data")
        return frozenset(str(n) for n in data) if isinstance(data, list) else None

    def external_label(self, name: str) -> str | None:
        """The server's ``global.external_labels[name]``; None where it has none or will not say (Thanos and
        Mimir queriers serve no config: their series carry the external labels themselves)."""
        try:
            body = self._get("/api/v1/status/config", {}, "the configuration")
            config = yaml.safe_load(str((body.get("data") or {}).get("yaml") or ""))
        except (PrometheusError, yaml.YAMLError, AttributeError):
            return None
        labels = (config.get("global") or {}).get("external_labels") if isinstance(config, dict) else None
        value = labels.get(name) if isinstance(labels, dict) else None
        return str(value) if value else None

    def query_range(self, promql: str, grid: TimeGrid) -> tuple[list[RangeSeries], list[str]]:
        """The series of ``promql`` on ``grid``, queried chunk by chunk and joined per label set. A chunk
        Prometheus refuses for loading too many samples (--query.max-samples) is halved and retried."""
        merged: dict[frozenset[tuple[str, str]], list[RangeSeries]] = {}
        warnings: list[str] = []
        pending = chunks(grid, self._max_points)
        while pending:
            part = pending.pop(0)
            try:
                series, notes = self._chunk(promql, part)
            except PrometheusResponseError as exc:
                if "too many samples" not in str(exc) or part.n < 2:
                    raise
                half = part.n // 2
                pending[:0] = [
                    TimeGrid(part.start, part.step, half),
                    TimeGrid(part.start + half * part.step, part.step, part.n - half),
                ]
                continue
            warnings.extend(notes)
            for s in series:
                merged.setdefault(frozenset(s.labels.items()), []).append(s)
        return [_join(parts) for parts in merged.values()], warnings

    def _chunk(self, promql: str, part: TimeGrid) -> tuple[list[RangeSeries], list[str]]:
        params = {
            "query": promql,
            "start": f"{part.start:.3f}",
            "end": f"{part.end:.3f}",
            "step": f"{part.step:.3f}",
        }
        body = self._get("/api/v1/query_range", params, f"query {promql!r}")
        try:
            return parse_matrix(body)
        except PrometheusPayloadError as exc:
            raise PrometheusResponseError(f"Prometheus at {self.url}, query {promql!r}: {exc}") from exc


def _join(parts: Sequence[RangeSeries]) -> RangeSeries:
    if len(parts) == 1:
        return parts[0]
    return RangeSeries(
        parts[0].labels, np.concatenate([p.ts for p in parts]), np.concatenate([p.values for p in parts])
    )


def _epoch(value: datetime | float, name: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{name} must carry a time zone (e.g. 2026-01-01T00:00:00Z), got {value}")
        return value.timestamp()
    return float(value)


def read_fleet(
    url: str,
    start: datetime | float,
    end: datetime | float,
    step: timedelta | float,
    *,
    role_label: str | None = None,
    client: httpx.Client | None = None,
    range_s: float | None = None,
    gpu_catalog: GpuCatalog | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cluster_label: str = DEFAULT_CLUSTER_LABEL,
    deployment_labels: Sequence[str] = DEFAULT_DEPLOYMENT_LABELS,
) -> PrometheusFleet:
    """Frames, inventory and notes for [start, end] in windows of ``step`` (seconds or a timedelta).

    ``cluster_label``: the label naming a series' cluster (else the server's external label of that name);
    ``deployment_labels``: the labels naming a worker's deployment, strongest first (see ``map_fleet``)."""
    step_s = round(step.total_seconds() if isinstance(step, timedelta) else float(step), 3)
    first, last = _epoch(start, "start"), _epoch(end, "end")
    if not step_s > 0:
        raise ValueError(f"step must be positive, got {step}")
    if last - first < step_s:
        raise ValueError(f"the range [{start}, {end}] is shorter than one step ({step_s} s)")
    window = max(step_s, DEFAULT_MIN_RANGE_S) if range_s is None else float(range_s)
    grid = TimeGrid.covering(first + step_s, last, step_s)
    http = client if client is not None else httpx.Client(timeout=timeout_s)
    try:
        prometheus = PrometheusClient(url, http)
        available = prometheus.metric_names(grid.start - window, grid.end)
        queries = plan(available)
        _require_gpu_metrics(prometheus.url, queries, available, start, end)
        results: dict[MetricQuery, list[RangeSeries]] = {}
        warnings: list[str] = []
        for query in queries:
            results[query], notes = prometheus.query_range(query.promql(window), grid)
            warnings.extend(notes)
        labelled = any(cluster_label in s.labels for found in results.values() for s in found)
        default_cluster = None if labelled else prometheus.external_label(cluster_label)
    finally:
        if client is None:
            http.close()
    fleet = map_fleet(
        results,
        grid,
        role_label=role_label,
        gpu_catalog=gpu_catalog,
        cluster_label=cluster_label,
        deployment_labels=deployment_labels,
        default_cluster=default_cluster,
    )
    if not any(gpu.windows for gpu in fleet.gpus):
        raise NoSeriesError(
            f"no series found for dcgm-exporter metrics in Prometheus at {prometheus.url} between {start} "
            f"and {end}: is dcgm-exporter scraped?"
        )
    extra = tuple(f"Prometheus warning: {w}" for w in dict.fromkeys(warnings))
    return dataclasses.replace(fleet, notes=fleet.notes + extra) if extra else fleet


def _require_gpu_metrics(
    url: str,
    queries: Sequence[MetricQuery],
    available: frozenset[str] | None,
    start: datetime | float,
    end: datetime | float,
) -> None:
    if available is None or any(q.family is Family.GPU for q in queries):
        return
    engines = sorted({q.family.value for q in queries if q.family.is_engine})
    also = f" (engine metrics are there: {', '.join(engines)})" if engines else ""
    raise NoSeriesError(
        f"no series found for dcgm-exporter metrics (DCGM_FI_*) in Prometheus at {url} between {start} and "
        f"{end}{also}: is dcgm-exporter scraped?"
    )


def load_frames_from_prometheus(
    url: str,
    start: datetime | float,
    end: datetime | float,
    step: timedelta | float,
    *,
    role_label: str | None = None,
    client: httpx.Client | None = None,
    range_s: float | None = None,
) -> tuple[GpuFrame, EngineFrame]:
    """The GPU and engine frames ``phasefit analyze --prometheus URL`` analyses (see :func:`read_fleet`
    for the inventory and notes that come with them)."""
    fleet = read_fleet(url, start, end, step, role_label=role_label, client=client, range_s=range_s)
    return fleet.gpu, fleet.engine
