"""Zero-agent mode's I/O edge: read dcgm-exporter and engine series from a Prometheus HTTP API.

Each query is split under :class:`QueryLimits` (:mod:`analyzer.sources.prometheus.split`). Failures are
:class:`PrometheusError` subclasses that say what to check. Reasoning: docs/analyzer.md#client
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import httpx
import yaml

from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.labels import DEFAULT_CLUSTER_LABEL, DEFAULT_DEPLOYMENT_LABELS, Family
from analyzer.sources.prometheus.metrics import RANK_LABELS, MetricQuery, Reduce, plan
from analyzer.sources.prometheus.series import PrometheusPayloadError, RangeSeries, TimeGrid, parse_matrix
from analyzer.sources.prometheus.source import map_fleet
from analyzer.sources.prometheus.split import (
    DEFAULT_TIMEOUT_S,
    LABEL_SPLITTABLE,
    MAX_POINTS_PER_SERIES,
    TIME_SPLITTABLE,
    LimitKind,
    QueryLimits,
    Shard,
    aligned_grid,
    chunks,
    halves,
    limit_kind,
    merge_series,
    resplit,
    split_shard,
)
from analyzer.telemetry.frames import EngineFrame, GpuFrame
from fleet.gpus import GpuCatalog

__all__ = [
    "DEFAULT_MIN_RANGE_S",
    "DEFAULT_TIMEOUT_S",
    "MAX_POINTS_PER_SERIES",
    "NoSeriesError",
    "PrometheusClient",
    "PrometheusError",
    "PrometheusResponseError",
    "PrometheusUnreachableError",
    "QueryLimits",
    "chunks",
    "load_frames_from_prometheus",
    "read_fleet",
    "split_labels",
]

DEFAULT_MIN_RANGE_S = 120.0
# Labels a query's series are split by, after the cluster label: the pool's namespace, then the node and the
# scrape target (dcgm-exporter's node names, an engine's pod). Never a label the queries aggregate away.
SPLIT_LABELS = ("namespace", "node", "Hostname", "hostname", "instance", "pod", "UUID", "uuid")
# Refusals that hold for any query on the store (points per series, time range), unlike samples and time.
STORE_WIDE = frozenset({LimitKind.POINTS, LimitKind.LENGTH})


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


class PrometheusClient:
    """Prometheus's HTTP API over an injected ``httpx.Client`` (auth, TLS and timeouts are the client's).

    ``limits`` bound each query (default: chunks of ``max_points`` evaluation times, nothing else);
    ``split_labels``: the labels a query holding too many series is split by, in order of preference."""

    def __init__(
        self,
        url: str,
        http: httpx.Client,
        *,
        max_points: int = MAX_POINTS_PER_SERIES,
        limits: QueryLimits | None = None,
        split_labels: Sequence[str] = SPLIT_LABELS,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusError(f"{url!r} is not an http(s) URL of a Prometheus server")
        self.url = url.rstrip("/")
        self._http = http
        self.limits = limits if limits is not None else QueryLimits(max_points_per_series=max_points)
        self.split_labels = tuple(dict.fromkeys(split_labels))
        # Evaluation times per query the store accepts, learned from its refusals for points or length (its
        # limits hold for every query: later ones need not be refused again).
        self.points_cap = self.limits.max_points_per_series

    def _get(self, path: str, params: Mapping[str, str], what: str) -> Any:
        try:
            response = self._http.get(self.url + path, params=dict(params))
        except httpx.TimeoutException as exc:
            raise PrometheusUnreachableError(
                f"Prometheus at {self.url} did not answer {what} in time ({type(exc).__name__}): raise the "
                "timeout (PHASEFIT_ANALYZER_PROMETHEUS_TIMEOUT_S), lower the points per query "
                "(PHASEFIT_ANALYZER_PROMETHEUS_MAX_SAMPLES_PER_QUERY) or narrow the range"
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

    def label_values(self, label: str, selector: str, start: float, end: float) -> list[str] | None:
        """The values ``label`` takes on the series of ``selector`` in [start, end]. Where the store refuses
        the match for a limit (VictoriaMetrics counts its series against -search.maxUniqueTimeseries), the
        values the label takes on any series: more than needed, never fewer. None where the server will not
        list them."""
        window = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        path = f"/api/v1/label/{label}/values"
        what = f"the values of label {label!r}"
        try:
            body = self._get(path, {"match[]": selector, **window}, what)
        except PrometheusResponseError as exc:
            if limit_kind(str(exc)) is None:
                return None
            try:
                body = self._get(path, window, what)
            except PrometheusResponseError:
                return None
        data = body.get("data")
        return [str(v) for v in data] if isinstance(data, list) else None

    def external_label(self, name: str) -> tuple[str | None, str | None]:
        """The server's ``global.external_labels[name]`` (None where it has none), and why it cannot be
        known where the server serves no configuration: Thanos and Mimir serve none (their series carry the
        external labels themselves), VictoriaMetrics its -promscrape.config, empty without one."""
        try:
            body = self._get("/api/v1/status/config", {}, "the configuration")
            text = str((body.get("data") or {}).get("yaml") or "")
            config = yaml.safe_load(text)
        except PrometheusError as exc:
            return None, f"serves no configuration at /api/v1/status/config ({_first_line(exc)})"
        except (yaml.YAMLError, AttributeError):
            return None, "serves a configuration (/api/v1/status/config) that is not YAML"
        if not text.strip():
            return None, (
                "serves an empty configuration at /api/v1/status/config (VictoriaMetrics without "
                "-promscrape.config)"
            )
        labels = (config.get("global") or {}).get("external_labels") if isinstance(config, dict) else None
        value = labels.get(name) if isinstance(labels, dict) else None
        return (str(value) if value else None), None

    def query_range(self, promql: str, grid: TimeGrid) -> tuple[list[RangeSeries], list[str]]:
        """The series of ``promql`` on ``grid``, queried in chunks of at most the points-per-series limit
        and joined per label set. A chunk the store refuses for its points, samples, length or time (e.g.
        Prometheus's --query.max-samples) is halved and retried."""
        answers: list[RangeSeries] = []
        warnings: list[str] = []
        pending = deque(chunks(grid, self.points_cap))
        while pending:
            part = pending.popleft()
            try:
                series, notes = self.chunk(promql, part)
            except PrometheusResponseError as exc:
                kind = limit_kind(str(exc))
                if kind not in TIME_SPLITTABLE or part.n < 2:
                    raise
                first, second = halves(part)
                if kind in STORE_WIDE:
                    self.points_cap = min(self.points_cap, first.n)
                pending.extendleft((second, first))
                continue
            warnings.extend(notes)
            answers.extend(series)
        return merge_series(answers), warnings

    def query_metric(
        self, query: MetricQuery, range_s: float, grid: TimeGrid
    ) -> tuple[list[RangeSeries], list[str]]:
        """The series of ``query`` (windows of ``range_s``) on ``grid``, split by time and by label values
        so that every answer stays under :attr:`limits` (see :class:`_SplitRead`)."""
        return _SplitRead(self, query, range_s, grid).run()

    def chunk(self, promql: str, part: TimeGrid) -> tuple[list[RangeSeries], list[str]]:
        """One query_range request: the series of ``promql`` on ``part`` and the server's warnings."""
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


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


class _SplitRead:
    """One query read chunk by chunk, shard by shard.

    Each answer's series count sizes the chunks after it; a refusal halves the chunk or splits the shard.
    The answers merge per label set. Reasoning: docs/analyzer.md#client
    """

    def __init__(self, client: PrometheusClient, query: MetricQuery, range_s: float, grid: TimeGrid) -> None:
        self.client, self.query, self.range_s, self.grid = client, query, range_s, grid
        self.limits = client.limits
        self.shards: list[Shard] = [Shard()]  # what each later chunk asks
        self.sizes: dict[Shard, int] = {}  # series in a shard's latest answer (estimated for a new shard)
        self.children: dict[Shard, list[Shard] | None] = {}  # a shard's split, once made (None: none can)
        self.cap = client.points_cap  # lowered where the store refuses a chunk for its samples or time
        self.span = (grid.start - range_s, grid.end)  # the time the query's windows read

    def run(self) -> tuple[list[RangeSeries], list[str]]:
        answers: list[RangeSeries] = []
        warnings: list[str] = []
        tasks: deque[tuple[Shard, TimeGrid]] = deque()
        done = 0  # grid times handed out
        while tasks or done < self.grid.n:
            if not tasks:
                n = min(self._points(), self.grid.n - done)
                part = TimeGrid(self.grid.start + done * self.grid.step, self.grid.step, n)
                done += n
                tasks.extend((shard, part) for shard in self.shards)
                continue
            shard, part = tasks.popleft()
            try:
                series, notes = self.client.chunk(self.query.promql(self.range_s, shard.matchers), part)
            except PrometheusResponseError as exc:
                tasks.extendleft(reversed(self._retry(exc, shard, part)))
                continue
            answers.extend(series)
            warnings.extend(notes)
            self.sizes[shard] = len(series)
            if len(series) > self.limits.max_series_per_query and done < self.grid.n:
                self._replace(shard, self._split(shard, -(-len(series) // self.limits.max_series_per_query)))
        return merge_series(answers), warnings

    def _points(self) -> int:
        """Evaluation times per chunk, for the largest shard's series (before its first answer: the limit)."""
        largest = max(self.sizes.get(s, self.limits.max_series_per_query) for s in self.shards)
        cap = min(self.cap, self.client.points_cap)
        return min(cap, self.limits.points_for(largest, self.grid.step, self.range_s))

    def _retry(
        self, exc: PrometheusResponseError, shard: Shard, part: TimeGrid
    ) -> list[tuple[Shard, TimeGrid]]:
        """What to ask instead of ``part`` of ``shard`` after the store refused it; raises where nothing
        smaller can be asked."""
        kind = limit_kind(str(exc))
        if kind is None:
            raise exc
        if kind in TIME_SPLITTABLE and part.n >= 2:
            first, second = halves(part)
            if kind in STORE_WIDE:
                self.client.points_cap = min(self.client.points_cap, first.n)
            else:
                self.cap = min(self.cap, first.n)
            return [(shard, first), (shard, second)]
        if kind in LABEL_SPLITTABLE:
            groups = max(2, -(-self.sizes.get(shard, 0) // self.limits.max_series_per_query))
            children = self._split(shard, groups)
            if children:
                self._replace(shard, children)
                return [(child, part) for child in children]
        split = f"by {', '.join(shard.labels)}" if shard.labels else "by no label (none splits its series)"
        raise PrometheusResponseError(
            f"{exc} [phasefit split this query down to {part.n} point(s) and {split}: raise the store's "
            f"limit on {kind.value} or narrow the range; docs/zero-agent.md]"
        ) from exc

    def _split(self, shard: Shard, groups: int) -> list[Shard] | None:
        """``shard`` split into about ``groups`` shards: by the values of the label it was last split by,
        where it matches more than one; else by the first other label with at least ``groups`` values on its
        series (or the one with the most, at least two). None where nothing splits it."""
        if shard in self.children:
            return self.children[shard]
        children = resplit(shard, groups)
        if children is None:
            selector = self.query.selector(shard.matchers)
            best: tuple[str, set[str]] | None = None
            for label in self._labels():
                if label in shard.labels:
                    continue
                values = set(self.client.label_values(label, selector, *self.span) or ()) - {""}
                if len(values) >= 2 and (best is None or len(values) > len(best[1])):
                    best = (label, values)
                if len(values) >= groups:
                    break
            # "" among the values: the first shard also takes the series without the label.
            children = split_shard(shard, best[0], {"", *best[1]}, groups) if best else None
        if children:
            share = -(-self.sizes.get(shard, self.limits.max_series_per_query) // len(children))
            self.sizes.update(dict.fromkeys(children, share))
        self.children[shard] = children
        return children

    def _labels(self) -> tuple[str, ...]:
        """The labels this query may be split by. A label listing (``group without (__name__)``) may also be
        split by metric name: its shards answer the same label sets, which merge into one."""
        if self.query.reduce is Reduce.PRESENT:
            return (*self.client.split_labels, "__name__")
        return self.client.split_labels

    def _replace(self, shard: Shard, children: list[Shard] | None) -> None:
        """Later chunks ask ``children`` instead of ``shard``."""
        if children and shard in self.shards:
            at = self.shards.index(shard)
            self.shards[at : at + 1] = children


def split_labels(cluster_label: str) -> tuple[str, ...]:
    """The labels a query is split by, in order: the pool's (the cluster label, namespace) first; never one
    the histogram queries sum away (a shard must hold all of a worker's ranks and buckets)."""
    summed = {*RANK_LABELS, "le"}
    return tuple(label for label in dict.fromkeys((cluster_label, *SPLIT_LABELS)) if label not in summed)


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
    timeout_s: float | None = None,
    cluster_label: str = DEFAULT_CLUSTER_LABEL,
    deployment_labels: Sequence[str] = DEFAULT_DEPLOYMENT_LABELS,
    limits: QueryLimits | None = None,
) -> PrometheusFleet:
    """Frames, inventory and notes for [start, end] in windows of ``step`` (seconds or a timedelta).

    ``cluster_label``: the label naming a series' cluster (else the server's external label of that name);
    ``deployment_labels``: the labels naming a worker's deployment, strongest first (see ``map_fleet``).
    ``limits``: what one query may ask of the store (default: :class:`QueryLimits`' defaults; the CLI passes
    the zero-agent settings, ``PHASEFIT_ANALYZER_PROMETHEUS_*``); ``timeout_s`` (default: the limits') is
    a client's made here."""
    step_s = round(step.total_seconds() if isinstance(step, timedelta) else float(step), 3)
    first, last = _epoch(start, "start"), _epoch(end, "end")
    if not step_s > 0:
        raise ValueError(f"step must be positive, got {step}")
    if last - first < step_s:
        raise ValueError(f"the range [{start}, {end}] is shorter than one step ({step_s} s)")
    if limits is None:
        limits = QueryLimits()
    window = max(step_s, DEFAULT_MIN_RANGE_S) if range_s is None else float(range_s)
    # Window ends on multiples of the step, where stores that align a query to its step evaluate it; a range
    # too short to hold one such window keeps its own start.
    grid = aligned_grid(first, last, step_s) or TimeGrid.covering(first + step_s, last, step_s)
    http = client if client is not None else httpx.Client(timeout=timeout_s or limits.timeout_s)
    try:
        prometheus = PrometheusClient(url, http, limits=limits, split_labels=split_labels(cluster_label))
        available = prometheus.metric_names(grid.start - window, grid.end)
        queries = plan(available)
        _require_gpu_metrics(prometheus.url, queries, available, start, end)
        results: dict[MetricQuery, list[RangeSeries]] = {}
        warnings: list[str] = []
        for query in queries:
            results[query], notes = prometheus.query_metric(query, window, grid)
            warnings.extend(notes)
        labelled = any(cluster_label in s.labels for found in results.values() for s in found)
        default_cluster, unknown = (None, None) if labelled else prometheus.external_label(cluster_label)
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
        range_s=window,
    )
    if not any(gpu.windows for gpu in fleet.gpus):
        raise NoSeriesError(
            f"no series found for dcgm-exporter metrics in Prometheus at {prometheus.url} between {start} "
            f"and {end}: is dcgm-exporter scraped?"
        )
    extra = [f"Prometheus warning: {w}" for w in dict.fromkeys(warnings)]
    if unknown is not None and fleet.workers:
        extra.append(
            f"no series carries the {cluster_label!r} label and {prometheus.url} {unknown}, so its external "
            f"labels are unknown: put a {cluster_label!r} label on the series (remote write and vmagent add "
            "the sender's external labels to every series), or name the label that carries the cluster "
            "(PHASEFIT_ANALYZER_CLUSTER_LABEL); docs/zero-agent.md"
        )
    return dataclasses.replace(fleet, notes=fleet.notes + tuple(extra)) if extra else fleet


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
