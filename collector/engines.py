"""Serving-engine ``/metrics`` (vLLM, SGLang, TensorRT-LLM; Dynamo workers pass them through) -> windows.

A scrape becomes an :class:`EngineReading` (cumulative counters, gauges, histogram buckets, role hints);
two consecutive readings of one endpoint become an :class:`EngineDelta`: token counts in the window,
counter resets handled per series (a value that went down, or a changed ``_created`` timestamp, means
the engine restarted and the new value is what it counted since), and latency quantiles from the
window's histogram bucket increments (as PromQL's ``histogram_quantile`` interpolates them).

Metric names, their aliases and the parts that add up (SGLang's waiting queues) come from the table
zero-agent mode queries too (fleet.vocabulary.engines); label names from fleet.labels: SGLang's
``engine_type`` and Dynamo's ``dynamo_component`` as role hints, ``dynamo_namespace`` as the deployment.
Within a part the first alias the exposition holds is read. An endpoint without any token counter yields
no engine sample (a sample of 0 tokens would read as "not serving"). The KV cache the engine holds, in
tokens, is read by the vocabulary's own rule (fleet.vocabulary.engines.KV_CAPACITY_METRICS: factors that
multiply, vLLM's from the labels of its cache_config_info info gauge), the one zero-agent mode applies; so
is the most requests the engine runs at once (fleet.vocabulary.engines.MAX_RUNNING_METRICS).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from pydantic import ValidationError

from collector.engine_ids import EngineIdentity, engine_identity
from collector.promtext import Exposition
from collector.scrape import ScrapeError, scrape
from fleet.clock import Clock
from fleet.contract import LatencyHistogram
from fleet.labels import (
    DYNAMO_COMPONENT_METRIC_LABEL,
    DYNAMO_NAMESPACE_METRIC_LABEL,
    ENGINE_TYPE_LABEL,
    MODEL_NAME_LABELS,
    TP_RANK_LABEL,
)
from fleet.vocabulary.engines import (
    DYNAMO_COMPONENT_METRIC_PREFIX,
    LATENCY_QUANTILES,
    Engine,
    EngineField,
    EngineMetric,
    engine_metric,
    kv_capacity_metric,
    max_running_metric,
    primary_rank,
)

log = logging.getLogger(__name__)

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (logical name, sorted labels)
Rows = dict[str, list[tuple[Mapping[str, str], float]]]  # metric name -> (labels, value) per sample

_COUNTERS = (
    (EngineField.PROMPT_TOKENS, "prompt"),
    (EngineField.GENERATION_TOKENS, "generation"),
    (EngineField.PREEMPTIONS, "preempt"),
)
LATENCY_COLUMNS = tuple(column for quantiles in LATENCY_QUANTILES.values() for column in quantiles)
_HISTOGRAMS = ((EngineField.TTFT, "ttft"), (EngineField.TPOT, "tpot"), (EngineField.E2E, "e2e"))


class EngineParseError(ValueError):
    """The exposition holds no token counter of a known engine."""


@dataclass(frozen=True)
class EngineReading:
    url: str
    engine: str
    model: str | None
    taken_at: float  # monotonic seconds
    ts: datetime
    counters: Mapping[SeriesKey, float]
    created: Mapping[SeriesKey, float]
    running: float | None
    waiting: float | None
    kv_usage: float | None
    # "ttft"/"tpot"/"e2e" -> series -> le -> count
    buckets: Mapping[str, Mapping[SeriesKey, Mapping[float, float]]]
    engine_types: frozenset[str] = frozenset()  # SGLang engine_type label values
    dynamo_components: frozenset[str] = frozenset()  # Dynamo dynamo_component label values
    dynamo_namespaces: frozenset[str] = frozenset()  # Dynamo dynamo_namespace label values (deployment)
    tp_ranks: int | None = None  # distinct tp_rank label values seen; None when no series carries one
    kv_capacity_tokens: int | None = None  # the KV cache the engine reports holding; None: not reported
    max_running_requests: int | None = None  # the most requests it reports running at once; None: not said
    identity: EngineIdentity = field(default_factory=EngineIdentity)  # GPU UUIDs / PIDs it reports


@dataclass(frozen=True)
class EngineDelta:
    reading: EngineReading
    window_s: float
    prompt_tokens: int
    generation_tokens: int
    preemptions: int | None
    restarted: bool
    # The window's latency quantiles, one per column of fleet.vocabulary.engines.LATENCY_QUANTILES.
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p90_s: float | None = None
    tpot_p99_s: float | None = None
    e2e_p90_s: float | None = None
    # The window's histogram increments as the engine buckets them (engine_sample's ``ttft_histogram``, ...);
    # None where the engine exports no such histogram.
    histograms: Mapping[str, LatencyHistogram | None] = field(default_factory=dict)

    def latencies(self) -> dict[str, Any]:
        """The latency quantiles and histograms by their engine_sample field names."""
        quantiles: dict[str, Any] = {column: getattr(self, column) for column in LATENCY_COLUMNS}
        return quantiles | {f"{kind}_histogram": self.histograms.get(kind) for _, kind in _HISTOGRAMS}


def _key(logical: str, labels: Mapping[str, str], drop: tuple[str, ...] = ()) -> SeriesKey:
    return logical, tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _pick_engine(names: set[str]) -> Engine:
    for engine in Engine:
        for token_field in (EngineField.PROMPT_TOKENS, EngineField.GENERATION_TOKENS):
            metric = engine_metric(engine, token_field)
            if metric is not None and any(n in names for n in metric.names):
                return engine
    raise EngineParseError("no vLLM, SGLang or TensorRT-LLM token counter in the exposition")


def _read_names(metric: EngineMetric | None, by_name: Rows, suffix: str = "") -> list[str]:
    """Per part, the first alias the exposition holds (``suffix``: ``_bucket`` for a histogram)."""
    if metric is None:
        return []
    found = (next((n for n in aliases if n + suffix in by_name), None) for aliases in metric.parts)
    return [n for n in found if n is not None]


def _created_name(counter: str) -> str:
    """The ``_created`` sample of a counter (``x_total``) or of the histogram a ``x_sum`` belongs to."""
    return counter.removesuffix("_total").removesuffix("_sum") + "_created"


def _gauge(names: list[str], by_name: Rows, *, total: bool) -> float | None:
    values = [
        v for n in names for labels, v in by_name.get(n, ()) if primary_rank(labels) and math.isfinite(v)
    ]
    if not values:
        return None
    return sum(values) if total else sum(values) / len(values)


def _model(labels: Mapping[str, str]) -> str | None:
    return next((labels[k] for k in MODEL_NAME_LABELS if labels.get(k)), None)


def _counters(engine: Engine, by_name: Rows) -> tuple[dict[SeriesKey, float], dict[SeriesKey, float]]:
    """Cumulative counter values and their ``_created`` timestamps, keyed by logical name and labels."""
    counters: dict[SeriesKey, float] = {}
    created: dict[SeriesKey, float] = {}
    for counter_field, logical in _COUNTERS:
        for name in _read_names(engine_metric(engine, counter_field), by_name):
            for labels, value in by_name[name]:
                counters[_key(logical, labels)] = value
            for labels, value in by_name.get(_created_name(name), ()):
                created[_key(logical, labels)] = value
    return counters, created


def _buckets(engine: Engine, by_name: Rows) -> dict[str, dict[SeriesKey, dict[float, float]]]:
    """Per latency histogram (``ttft``, ``tpot``, ``e2e``): series -> cumulative count per bucket bound."""
    out: dict[str, dict[SeriesKey, dict[float, float]]] = {}
    for histogram_field, kind in _HISTOGRAMS:
        series: dict[SeriesKey, dict[float, float]] = {}
        for base in _read_names(engine_metric(engine, histogram_field), by_name, "_bucket"):
            for labels, value in by_name[base + "_bucket"]:
                le = labels.get("le")
                if le is None:
                    continue
                bound = math.inf if le in ("+Inf", "Inf") else float(le)
                series.setdefault(_key(kind, labels, ("le",)), {})[bound] = value
        out[kind] = series
    return out


def _label_values(rows: list[tuple[Mapping[str, str], float]], label: str) -> frozenset[str]:
    return frozenset(labels[label] for labels, _ in rows if labels.get(label))


def read_engine(exposition: Exposition, url: str, taken_at: float, ts: datetime) -> EngineReading:
    by_name: Rows = {}
    for sample in exposition.samples:
        by_name.setdefault(sample.name, []).append((sample.labels, sample.value))
    engine = _pick_engine(set(by_name))
    counters, created = _counters(engine, by_name)
    running = _read_names(engine_metric(engine, EngineField.REQUESTS_RUNNING), by_name)
    waiting = _read_names(engine_metric(engine, EngineField.REQUESTS_WAITING), by_name)
    kv_usage = _read_names(engine_metric(engine, EngineField.KV_CACHE_USAGE), by_name)
    tokens = [
        n
        for token_field in (EngineField.PROMPT_TOKENS, EngineField.GENERATION_TOKENS)
        for n in _read_names(engine_metric(engine, token_field), by_name)
    ]
    models = Counter(_model(labels) for n in (*tokens, *running) for labels, _ in by_name[n])
    models.pop(None, None)
    engine_types = set(_label_values([row for rows in by_name.values() for row in rows], ENGINE_TYPE_LABEL))
    if engine is Engine.TRTLLM:
        engine_types.discard("trtllm")  # a backend tag there, not a phase role
    dynamo = [
        row
        for name, rows in by_name.items()
        if name.startswith(DYNAMO_COMPONENT_METRIC_PREFIX)
        for row in rows
    ]
    tp_ranks = _label_values([row for n in running for row in by_name[n]], TP_RANK_LABEL)
    capacity = kv_capacity_metric(engine)
    kv_capacity = (
        capacity.tokens((n, labels, v) for n in capacity.names for labels, v in by_name.get(n, ()))
        if capacity is not None
        else None
    )
    cap = max_running_metric(engine)
    max_running = (
        cap.requests((n, labels, v) for n in cap.names for labels, v in by_name.get(n, ()))
        if cap is not None
        else None
    )
    return EngineReading(
        url=url,
        engine=engine.value,
        model=models.most_common(1)[0][0] if models else None,
        taken_at=taken_at,
        ts=ts,
        counters=counters,
        created=created,
        running=_gauge(running, by_name, total=True),
        waiting=_gauge(waiting, by_name, total=True),
        kv_usage=_gauge(kv_usage, by_name, total=False),
        buckets=_buckets(engine, by_name),
        engine_types=frozenset(engine_types),
        dynamo_components=_label_values(dynamo, DYNAMO_COMPONENT_METRIC_LABEL),
        dynamo_namespaces=_label_values(dynamo, DYNAMO_NAMESPACE_METRIC_LABEL),
        tp_ranks=len(tp_ranks) or None,
        kv_capacity_tokens=kv_capacity,
        max_running_requests=max_running,
        identity=engine_identity(exposition),
    )


def _counter_delta(prev: EngineReading, cur: EngineReading, logical: str) -> tuple[int | None, bool]:
    """Sum over series of the increase in the window; (None, False) when the engine has no such counter."""
    total, seen, restarted = 0.0, False, False
    for key, value in cur.counters.items():
        if key[0] != logical:
            continue
        seen = True
        before = prev.counters.get(key)
        created = cur.created.get(key)
        if before is None:
            # a series born in the window (new engine rank, or a restart with new labels) counted since birth
            if created is not None and created >= prev.ts.timestamp():
                total += value
            continue
        recreated = created is not None and key in prev.created and created != prev.created[key]
        if value < before or recreated:
            restarted = True
            total += value
        else:
            total += value - before
    return (round(total) if seen else None), restarted


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """histogram_quantile over cumulative bucket counts {le: count}; None when the histogram is empty."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0 or not math.isinf(bounds[-1]):
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            width = count - below
            return lower + (bound - lower) * ((rank - below) / width if width > 0 else 1.0)
        lower, below = bound, count
    return lower


def _window_buckets(prev: EngineReading, cur: EngineReading, kind: str) -> dict[float, float]:
    out: dict[float, float] = {}
    previous = prev.buckets.get(kind, {})
    for key, series in cur.buckets.get(kind, {}).items():
        before = previous.get(key, {})
        reset = any(series.get(le, 0.0) < count for le, count in before.items())
        for le, count in series.items():
            out[le] = out.get(le, 0.0) + (count if reset else count - before.get(le, 0.0))
    return out


def window_histogram(window: Mapping[float, float]) -> LatencyHistogram | None:
    """A window's bucket increments {le: cumulative count, +Inf included} as the contract carries them;
    None where the engine exported no such histogram, or its increments are not one (a partial scrape)."""
    if not window or not any(math.isinf(le) for le in window):
        return None
    finite = sorted(le for le in window if not math.isinf(le))
    try:
        return LatencyHistogram(
            le=finite, counts=[max(window[le], 0.0) for le in finite], count=max(window[math.inf], 0.0)
        )
    except ValidationError:
        return None


def _quantiles(prev: EngineReading, cur: EngineReading) -> dict[str, float | None]:
    """The contract's latency quantiles (``ttft_p50_s``, ...) of the window's histogram increments."""
    out: dict[str, float | None] = {}
    for histogram_field, kind in _HISTOGRAMS:
        window = _window_buckets(prev, cur, kind)
        for column, q in LATENCY_QUANTILES[histogram_field].items():
            out[column] = quantile(q, window)
    return out


def window_delta(prev: EngineReading, cur: EngineReading) -> EngineDelta:
    prompt, r1 = _counter_delta(prev, cur, "prompt")
    generation, r2 = _counter_delta(prev, cur, "generation")
    preemptions, _ = _counter_delta(prev, cur, "preempt")
    latency = _quantiles(prev, cur)
    histograms = {kind: window_histogram(_window_buckets(prev, cur, kind)) for _, kind in _HISTOGRAMS}
    return EngineDelta(
        reading=cur,
        window_s=max(cur.taken_at - prev.taken_at, 1e-3),
        prompt_tokens=max(prompt or 0, 0),
        generation_tokens=max(generation or 0, 0),
        preemptions=max(preemptions, 0) if preemptions is not None else None,
        restarted=r1 or r2,
        histograms=histograms,
        **latency,
    )


@dataclass
class EngineScraper:
    """Scrapes every engine URL once per window; a failed scrape keeps the last reading, so the next
    successful one covers the gap and no tokens are lost from the counts."""

    urls: list[str]
    client: httpx.Client
    clock: Clock
    timeout_s: float = 3.0
    last: dict[str, EngineReading] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)

    def set_urls(self, urls: list[str]) -> None:
        """Scrape ``urls`` from the next window on (discovered pods come and go); a URL kept keeps its last
        reading, so its next window is counted, and a new one is primed by its first scrape."""
        kept = set(urls)
        for gone in [u for u in self.last if u not in kept]:
            del self.last[gone]
        for gone in [u for u in self.last_error if u not in kept]:
            del self.last_error[gone]
        self.urls = list(urls)

    def _read(self, url: str) -> EngineReading:
        exposition = scrape(self.client, url, self.timeout_s)
        return read_engine(exposition, url, self.clock.monotonic(), self.clock.now())

    def start(self) -> Counter[str]:
        errors: Counter[str] = Counter()
        for url in self.urls:
            try:
                self.last[url] = self._read(url)
            except (ScrapeError, EngineParseError) as exc:
                errors["engine_scrape"] += 1
                self._fail(url, exc)
        return errors

    def collect(self) -> tuple[list[EngineDelta], Counter[str]]:
        deltas: list[EngineDelta] = []
        errors: Counter[str] = Counter()
        for url in self.urls:
            try:
                reading = self._read(url)
            except (ScrapeError, EngineParseError) as exc:
                errors["engine_scrape"] += 1
                self._fail(url, exc)
                continue
            self.last_error.pop(url, None)
            previous = self.last.get(url)
            self.last[url] = reading
            if previous is not None:
                deltas.append(window_delta(previous, reading))
        return deltas, errors

    def _fail(self, url: str, exc: Exception) -> None:
        if self.last_error.get(url) != str(exc):
            log.warning("engine endpoint %s: %s", url, exc)
        self.last_error[url] = str(exc)
