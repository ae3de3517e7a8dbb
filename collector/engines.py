"""Serving-engine ``/metrics`` (vLLM, SGLang, TensorRT-LLM; Dynamo workers pass them through) -> windows.

A scrape becomes an :class:`EngineReading` (cumulative counters, gauges, histogram buckets, role hints);
two consecutive readings of one endpoint become an :class:`EngineDelta`: token counts in the window,
counter resets handled per series (a value that went down, or a changed ``_created`` timestamp, means
the engine restarted and the new value is what it counted since), and latency quantiles from the
window's histogram bucket increments (as PromQL's ``histogram_quantile`` interpolates them).

Metric names (telemetry.md §3): vLLM V1 ``vllm:*`` (``kv_cache_usage_perc``, older ``gpu_cache_usage_perc``;
``inter_token_latency_seconds``, older ``time_per_output_token_seconds``); SGLang ``sglang:*`` with the
``engine_type`` label as a role hint; TensorRT-LLM ``trtllm_*`` (trtllm-serve); Dynamo's
``dynamo_component`` label as a role hint.  An endpoint without any token counter yields no engine sample
(a sample of 0 tokens would read as "not serving").
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from collector.clock import Clock
from collector.promtext import Exposition
from collector.scrape import ScrapeError, scrape

log = logging.getLogger(__name__)

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (logical name, sorted labels)


@dataclass(frozen=True)
class EngineSpec:
    engine: str
    prefix: str
    prompt: tuple[str, ...]
    generation: tuple[str, ...]
    preemptions: tuple[str, ...]
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...]
    ttft: tuple[str, ...]  # histogram base names
    tpot: tuple[str, ...]


SPECS = (
    EngineSpec(
        engine="vllm",
        prefix="vllm:",
        prompt=("vllm:prompt_tokens_total",),
        generation=("vllm:generation_tokens_total",),
        preemptions=("vllm:num_preemptions_total",),
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        ttft=("vllm:time_to_first_token_seconds",),
        tpot=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ),
    EngineSpec(
        engine="sglang",
        prefix="sglang:",
        prompt=("sglang:prompt_tokens_total",),
        generation=("sglang:generation_tokens_total",),
        preemptions=(),
        running=("sglang:num_running_reqs",),
        # requests not yet running: the scheduler queue plus, under PD disaggregation, the prealloc queues
        waiting=(
            "sglang:num_queue_reqs",
            "sglang:num_prefill_prealloc_queue_reqs",
            "sglang:num_decode_prealloc_queue_reqs",
        ),
        kv_usage=("sglang:token_usage",),
        ttft=("sglang:time_to_first_token_seconds",),
        tpot=("sglang:inter_token_latency_seconds",),
    ),
    EngineSpec(
        engine="trtllm",
        prefix="trtllm_",
        prompt=("trtllm_prompt_tokens_total",),
        generation=("trtllm_generation_tokens_total",),
        preemptions=(),
        running=("trtllm_num_requests_running", "trtllm_num_active_requests"),
        waiting=("trtllm_num_requests_waiting", "trtllm_num_queued_requests"),
        kv_usage=("trtllm_kv_cache_utilization",),
        ttft=("trtllm_time_to_first_token_seconds",),
        tpot=("trtllm_time_per_output_token_seconds",),
    ),
)


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
    buckets: Mapping[str, Mapping[SeriesKey, Mapping[float, float]]]  # "ttft"/"tpot" -> series -> le -> count
    engine_types: frozenset[str] = frozenset()  # SGLang engine_type label values
    dynamo_components: frozenset[str] = frozenset()  # Dynamo dynamo_component label values
    dynamo_namespaces: frozenset[str] = frozenset()  # Dynamo dynamo_namespace label values (deployment)
    tp_ranks: int = 1  # distinct SGLang tp_rank values seen (1 unless all schedulers report)


@dataclass(frozen=True)
class EngineDelta:
    reading: EngineReading
    window_s: float
    prompt_tokens: int
    generation_tokens: int
    preemptions: int | None
    restarted: bool
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p99_s: float | None = None


def _normalise(name: str) -> str:
    return "trtllm_" + name[len("trtllm:") :] if name.startswith("trtllm:") else name


def _key(logical: str, labels: Mapping[str, str], drop: tuple[str, ...] = ()) -> SeriesKey:
    return logical, tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _pick_spec(names: set[str]) -> EngineSpec:
    for spec in SPECS:
        if any(n in names for n in spec.prompt + spec.generation):
            return spec
    raise EngineParseError("no vLLM, SGLang or TensorRT-LLM token counter in the exposition")


def _primary_rank(labels: Mapping[str, str]) -> bool:
    """SGLang reports per scheduler; keep tensor/pipeline rank 0 so a TP group is not counted N times."""
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def read_engine(exposition: Exposition, url: str, taken_at: float, ts: datetime) -> EngineReading:
    by_name: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for sample in exposition.samples:
        by_name.setdefault(_normalise(sample.name), []).append((sample.labels, sample.value))
    spec = _pick_spec(set(by_name))
    counters: dict[SeriesKey, float] = {}
    created: dict[SeriesKey, float] = {}
    logical_counters = (
        ("prompt", spec.prompt),
        ("generation", spec.generation),
        ("preempt", spec.preemptions),
    )
    for logical, names in logical_counters:
        for name in names:
            for labels, value in by_name.get(name, ()):
                counters[_key(logical, labels)] = value
            for labels, value in by_name.get(name.removesuffix("_total") + "_created", ()):
                created[_key(logical, labels)] = value

    def gauge(names: tuple[str, ...], combine: str) -> float | None:
        values = [
            v for n in names for labels, v in by_name.get(n, ()) if _primary_rank(labels) and math.isfinite(v)
        ]
        if not values:
            return None
        return sum(values) if combine == "sum" else sum(values) / len(values)

    kv_names = next((n for n in spec.kv_usage if n in by_name), None)
    buckets: dict[str, dict[SeriesKey, dict[float, float]]] = {}
    for kind, bases in (("ttft", spec.ttft), ("tpot", spec.tpot)):
        base = next((b for b in bases if b + "_bucket" in by_name), None)
        series: dict[SeriesKey, dict[float, float]] = {}
        for labels, value in by_name.get(base + "_bucket", ()) if base else ():
            le = labels.get("le")
            if le is None:
                continue
            bound = math.inf if le in ("+Inf", "Inf") else float(le)
            series.setdefault(_key(kind, labels, ("le",)), {})[bound] = value
        buckets[kind] = series
    models = Counter(
        labels.get("model_name") or labels.get("model")
        for names in (spec.prompt, spec.generation, spec.running)
        for n in names
        for labels, _ in by_name.get(n, ())
    )
    models.pop(None, None)
    engine_types = {
        labels["engine_type"] for rows in by_name.values() for labels, _ in rows if "engine_type" in labels
    }
    if spec.engine == "trtllm":
        engine_types.discard("trtllm")  # a backend tag there, not a phase role
    dynamo_rows = [
        labels for name, rows in by_name.items() if name.startswith("dynamo_component") for labels, _ in rows
    ]
    components = {labels["dynamo_component"] for labels in dynamo_rows if labels.get("dynamo_component")}
    namespaces = {labels["dynamo_namespace"] for labels in dynamo_rows if labels.get("dynamo_namespace")}
    tp_ranks = {
        labels["tp_rank"] for n in spec.running for labels, _ in by_name.get(n, ()) if "tp_rank" in labels
    }
    return EngineReading(
        url=url,
        engine=spec.engine,
        model=models.most_common(1)[0][0] if models else None,
        taken_at=taken_at,
        ts=ts,
        counters=counters,
        created=created,
        running=gauge(spec.running, "sum"),
        waiting=gauge(spec.waiting, "sum"),
        kv_usage=gauge((kv_names,), "mean") if kv_names else None,
        buckets=buckets,
        engine_types=frozenset(engine_types),
        dynamo_components=frozenset(components),
        dynamo_namespaces=frozenset(namespaces),
        tp_ranks=max(1, len(tp_ranks)),
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


def window_delta(prev: EngineReading, cur: EngineReading) -> EngineDelta:
    prompt, r1 = _counter_delta(prev, cur, "prompt")
    generation, r2 = _counter_delta(prev, cur, "generation")
    preemptions, _ = _counter_delta(prev, cur, "preempt")
    ttft = _window_buckets(prev, cur, "ttft")
    tpot = _window_buckets(prev, cur, "tpot")
    return EngineDelta(
        reading=cur,
        window_s=max(cur.taken_at - prev.taken_at, 1e-3),
        prompt_tokens=max(prompt or 0, 0),
        generation_tokens=max(generation or 0, 0),
        preemptions=max(preemptions, 0) if preemptions is not None else None,
        restarted=r1 or r2,
        ttft_p50_s=quantile(0.5, ttft),
        ttft_p99_s=quantile(0.99, ttft),
        tpot_p50_s=quantile(0.5, tpot),
        tpot_p99_s=quantile(0.99, tpot),
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
