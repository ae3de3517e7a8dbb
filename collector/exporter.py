"""The collector's Prometheus exporter: a custom collector that builds fresh metric families per scrape.

Names and labels are the ones agreed in the team brief (base units, ratios 0..1, no colons).  The agent
publishes an immutable :class:`ExporterState` after each window; a scrape renders the latest one, so a
scrape never blocks on collection.  A value the source did not provide is absent, never 0.  Cardinality
is bounded: at most ``max_series`` series per family (the rest are dropped and counted in
``phasefit_collector_errors_total{stage="exporter",reason="truncated"}``), label values cut to 128
characters, and every ``reason`` label takes values from a fixed set.

What failed: ``phasefit_collector_errors_total{stage,target,reason}`` counts failures since start, by the
part of the collector (``stage``: ``dcgm_scrape``, ``engine_scrape``, ``nvml``, ``ship``, ...), what it was
talking to (``target``: the URL, socket, file or GPU UUID, bounded by the configuration) and a short class
(``reason``: ``http_401``, ``connect_refused``, ``timeout``, ``parse_error``, ... from
:data:`collector.failures.REASONS`); ``phasefit_collector_target_up{stage,target}`` is 1 when that target's
last attempt succeeded and 0 when it failed (``up`` for each thing the collector reads or ships to).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.failures import REASON_TRUNCATED, STAGE_EXPORTER
from collector.window import DEGRADED_REASONS
from fleet.contract import GpuSample, GpuState

GPU_LABELS = ("node", "gpu", "sku", "worker", "role", "model")
WORKER_LABELS = ("node", "worker", "sku", "role", "model")
MAX_LABEL_CHARS = 128


@dataclass(frozen=True)
class GpuView:
    sample: GpuSample
    sku: str
    worker_id: str | None = None
    role: str = "unknown"
    model: str = ""
    reasons: frozenset[str] = frozenset()


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    role: str
    role_source: str
    model: str
    engine: str
    sku: str
    prompt_tokens_total: float
    generation_tokens_total: float
    kv_cache_usage: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    node: str | None = None  # the worker's node when it is not the collector's (the simulated fleet)


@dataclass(frozen=True)
class ExporterState:
    node: str
    up: bool = False
    gpus: Sequence[GpuView] = ()
    workers: Sequence[WorkerView] = ()
    errors: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (stage, target, reason) -> n
    targets_up: Mapping[tuple[str, str], bool] = field(default_factory=dict)  # (stage, target) -> last ok
    last_collect_unix: float | None = None
    spool_records: int | None = None
    spool_dropped: Mapping[str, int] = field(default_factory=dict)  # reason -> count


class StateHolder:
    """The latest published state; swapped atomically by the agent, read by scrapes."""

    def __init__(self, initial: ExporterState) -> None:
        self._state = initial
        self._lock = threading.Lock()

    def publish(self, state: ExporterState) -> None:
        with self._lock:
            self._state = state

    def current(self) -> ExporterState:
        with self._lock:
            return self._state


def _cut(value: str | None) -> str:
    return (value or "")[:MAX_LABEL_CHARS]


class _Bounded:
    """Adds samples to a family until the per-family bound, counting what it had to leave out."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.truncated = 0
        self._counts: dict[int, int] = {}

    def add(self, family: Any, labels: Sequence[str], value: float) -> None:
        used = self._counts.get(id(family), 0)
        if used >= self.limit:
            self.truncated += 1
            return
        self._counts[id(family)] = used + 1
        family.add_metric([_cut(v) for v in labels], value)


class PhasefitCollector(Collector):
    def __init__(self, holder: StateHolder, max_series: int = 2048) -> None:
        self.holder = holder
        self.max_series = max_series

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the data; describe nothing so registration never collects

    def collect(self) -> Iterator[Metric]:
        state = self.holder.current()
        bound = _Bounded(self.max_series)
        yield from self._gpu_families(state, bound)
        yield from self._worker_families(state, bound)
        yield from self._collector_families(state, bound)

    def _gpu_families(self, state: ExporterState, bound: _Bounded) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "phasefit_gpu_info",
            "A GPU seen by the collector (value 1)",
            labels=["node", "gpu", "gpu_name", "sku", "worker", "role", "model", "source"],
        )
        gauges = {
            "sm_active": GaugeMetricFamily(
                "phasefit_gpu_sm_active_ratio", "Fraction of cycles an SM had a warp", labels=GPU_LABELS
            ),
            "tensor_active": GaugeMetricFamily(
                "phasefit_gpu_tensor_active_ratio", "Fraction of cycles a tensor pipe ran", labels=GPU_LABELS
            ),
            "dram_active": GaugeMetricFamily(
                "phasefit_gpu_dram_active_ratio", "Fraction of peak DRAM bandwidth used", labels=GPU_LABELS
            ),
            "gpu_util": GaugeMetricFamily(
                "phasefit_gpu_utilization_ratio",
                "Fraction of time a kernel was running (not compute pressure)",
                labels=GPU_LABELS,
            ),
            "gr_engine_active": GaugeMetricFamily(
                "phasefit_gpu_graphics_engine_active_ratio",
                "Fraction of time the graphics/compute engine was busy (not compute pressure)",
                labels=GPU_LABELS,
            ),
            "mem_copy_util": GaugeMetricFamily(
                "phasefit_gpu_memory_copy_utilization_ratio",
                "Fraction of time device memory was being read or written (busy time, not bandwidth)",
                labels=GPU_LABELS,
            ),
            "mem_used_bytes": GaugeMetricFamily(
                "phasefit_gpu_memory_used_bytes", "GPU memory in use", labels=GPU_LABELS
            ),
            "power_w": GaugeMetricFamily("phasefit_gpu_power_watts", "GPU power draw", labels=GPU_LABELS),
        }
        lost = GaugeMetricFamily("phasefit_gpu_lost", "1 when the GPU is lost (Xid 79)", labels=GPU_LABELS)
        degraded = GaugeMetricFamily(
            "phasefit_gpu_telemetry_degraded",
            "1 when the GPU's telemetry is incomplete or untrustworthy for this reason",
            labels=[*GPU_LABELS, "reason"],
        )
        for view in state.gpus:
            s = view.sample
            worker = view.worker_id or ""
            labels = [s.node, s.gpu_uuid, view.sku, worker, view.role, view.model]  # the sim spans nodes
            bound.add(info, [*labels[:2], s.gpu_name, *labels[2:], s.source], 1)
            for name, family in gauges.items():
                value = getattr(s, name)
                if value is not None:
                    bound.add(family, labels, float(value))
            bound.add(lost, labels, 1.0 if s.state is GpuState.LOST else 0.0)
            for reason in DEGRADED_REASONS:
                bound.add(degraded, [*labels, reason], 1.0 if reason in view.reasons else 0.0)
        yield info
        yield from gauges.values()
        yield lost
        yield degraded

    def _worker_families(self, state: ExporterState, bound: _Bounded) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "phasefit_worker_info",
            "A serving worker seen by the collector (value 1)",
            labels=["node", "worker", "role", "role_source", "model", "engine", "sku"],
        )
        prompt = CounterMetricFamily(
            "phasefit_worker_prompt_tokens", "Prompt tokens processed", labels=WORKER_LABELS
        )
        generation = CounterMetricFamily(
            "phasefit_worker_generation_tokens",
            "Generation tokens produced since the collector started",
            labels=WORKER_LABELS,
        )
        kv = GaugeMetricFamily("phasefit_worker_kv_cache_usage_ratio", "KV-cache fill", labels=WORKER_LABELS)
        running = GaugeMetricFamily(
            "phasefit_worker_requests_running", "Requests in the running batch", labels=WORKER_LABELS
        )
        waiting = GaugeMetricFamily("phasefit_worker_requests_waiting", "Queued", None, WORKER_LABELS)
        for w in state.workers:
            node = w.node or state.node
            labels = [node, w.worker_id, w.sku, w.role, w.model]
            bound.add(info, [node, w.worker_id, w.role, w.role_source, w.model, w.engine, w.sku], 1)
            bound.add(prompt, labels, w.prompt_tokens_total)
            bound.add(generation, labels, w.generation_tokens_total)
            optional = ((kv, w.kv_cache_usage), (running, w.requests_running), (waiting, w.requests_waiting))
            for family, value in optional:
                if value is not None:
                    bound.add(family, labels, value)
        yield from (info, prompt, generation, kv, running, waiting)

    def _collector_families(self, state: ExporterState, bound: _Bounded) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "phasefit_collector_up", "1 while the last window was collected", value=1.0 if state.up else 0.0
        )
        errors = CounterMetricFamily(
            "phasefit_collector_errors",
            "Collector failures by stage, target (URL, socket, file or GPU) and reason class",
            None,
            ["stage", "target", "reason"],
        )
        for (stage, target, reason), count in sorted(state.errors.items()):
            errors.add_metric([_cut(stage), _cut(target), _cut(reason)], count)
        if bound.truncated:
            errors.add_metric([STAGE_EXPORTER, "", REASON_TRUNCATED], bound.truncated)
        yield errors
        targets = GaugeMetricFamily(
            "phasefit_collector_target_up",
            "1 when the last attempt at this target succeeded, 0 when it failed",
            labels=["stage", "target"],
        )
        for (stage, target), ok in sorted(state.targets_up.items()):
            targets.add_metric([_cut(stage), _cut(target)], 1.0 if ok else 0.0)
        yield targets
        if state.last_collect_unix is not None:
            yield GaugeMetricFamily(
                "phasefit_collector_last_collect_timestamp_seconds",
                "Unix time the last window ended",
                value=state.last_collect_unix,
            )
        if state.spool_records is not None:
            yield GaugeMetricFamily(
                "phasefit_collector_spool_records", "Records waiting in the spool", value=state.spool_records
            )
            dropped = CounterMetricFamily(
                "phasefit_collector_spool_dropped_records", "Records dropped from the spool", None, ["reason"]
            )
            for reason, count in sorted(state.spool_dropped.items()):
                dropped.add_metric([reason], count)
            yield dropped


def build_registry(holder: StateHolder, max_series: int = 2048) -> CollectorRegistry:
    """A fresh registry holding only phasefit's collector (no process/platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PhasefitCollector(holder, max_series))
    return registry


def serve(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Start the /metrics HTTP server on a daemon thread; returns (server, thread)."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry)
    return server, thread
