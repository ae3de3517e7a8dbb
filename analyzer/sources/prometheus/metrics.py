"""What zero-agent mode asks Prometheus for: one query per metric name that feeds a frame column.

Built from the shared vocabulary (fleet.vocabulary), the names the collector parses too.
Reasoning: docs/analyzer.md#metrics
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from analyzer.sources.prometheus.labels import DEFAULT_CLUSTER_LABEL, DEFAULT_DEPLOYMENT_LABELS, Family
from fleet.labels import PP_RANK_LABEL, TP_RANK_LABEL
from fleet.vocabulary.dcgm import (
    DCGM_FIELDS,
    DCGM_NAME_PATTERN,
    XID_COUNT_NAME,
    XID_GPU_FALLEN_OFF_BUS,
    XID_LABEL,
)
from fleet.vocabulary.engines import (
    DYNAMO_COMPONENT_METRIC_PREFIX,
    ENGINE_METRICS,
    KV_CAPACITY_FIELD,
    KV_CAPACITY_METRICS,
    LATENCY_QUANTILES,
    MAX_RUNNING_FIELD,
    MAX_RUNNING_METRICS,
    EngineField,
    EngineMetric,
)
from fleet.vocabulary.units import Kind, Unit

__all__ = [  # the label defaults stay importable from here (analyzer.settings reads them)
    "ALL_QUERIES",
    "DEFAULT_CLUSTER_LABEL",
    "DEFAULT_DEPLOYMENT_LABELS",
    "ENGINE_QUERIES",
    "GPU_COLUMNS",
    "GPU_QUERIES",
    "HISTOGRAM_COLUMNS",
    "HISTOGRAM_QUERIES",
    "KV_CAPACITY_QUERIES",
    "MAX_RUNNING_QUERIES",
    "REPORTED_COLUMNS",
    "MetricQuery",
    "Reduce",
    "format_duration",
    "plan",
]

# The GPU fields zero-agent mode reads (power, clocks and link bytes feed no analysis).
GPU_COLUMNS = (
    "sm_active", "tensor_active", "dram_active", "gpu_util", "mem_copy_util", "gr_engine_active",
    "mem_used_bytes", "xid", "xid_counted", "xid_lost_count",
)  # fmt: skip
PRESENT = "present"  # the column of the label-only queries: 1 where a series exists
# Labels that split one worker's histograms per rank or process: summed before a quantile is taken (vLLM's
# data-parallel ``engine``, SGLang's scheduler ranks).
RANK_LABELS = ("engine", TP_RANK_LABEL, PP_RANK_LABEL, "dp_rank", "moe_ep_rank", "pid")
# The columns of each latency histogram's window increments (engine_sample's ``ttft_histogram``, ...): one
# array per row on the shared grid of bucket bounds (fleet.histograms), so a pool's quantile comes from its
# merged buckets.
HISTOGRAM_COLUMNS: dict[EngineField, str] = {field: f"{field.value}_histogram" for field in LATENCY_QUANTILES}


class Reduce(StrEnum):
    AVG = "avg_over_time"  # gauges: mean over the window
    RATE = "rate"  # counters: per-second rate over the window
    MAX = "max_over_time"  # codes (last Xid): the worst value in the window
    QUANTILE = "histogram_quantile"  # histograms: a quantile of the window's observations
    INCREASE = "increase"  # histograms: each bucket's increase in the window, one series per ``le``
    LAST = "last_over_time"  # what an engine reports of itself: the last value (and labels) in the window
    PRESENT = "group"  # every series whose name matches: its labels, 1 where it exists


@dataclass(frozen=True)
class MetricQuery:
    """One exporter metric that feeds one frame column. Where a column has several ``part``s they add up;
    within a part the lowest ``rank`` (alias preference: 0 = the current name) that reports wins.
    ``name`` is a metric name, or for :attr:`Reduce.PRESENT` a regular expression over names."""

    family: Family
    column: str
    name: str
    unit: Unit
    reduce: Reduce
    rank: int
    part: int = 0
    quantile: float | None = None
    matchers: str = ""  # label matchers, e.g. '{xid="79"}'

    def selector(self, extra: Sequence[str] = ()) -> str:
        """The series selector this query reads, with ``extra`` label matchers (a shard of its series: see
        :mod:`analyzer.sources.prometheus.split`)."""
        if self.reduce is Reduce.PRESENT:
            return "{" + ",".join((f'__name__=~"{self.name}"', *extra)) + "}"
        name = f"{self.name}_bucket" if self.reduce in _BUCKETS else self.name
        inner = [m for m in (self.matchers.strip().removeprefix("{").removesuffix("}"),) if m]
        inner += extra
        return f"{name}{{{','.join(inner)}}}" if inner else name

    def promql(self, range_s: float, extra: Sequence[str] = ()) -> str:
        """The query, over windows of ``range_s``; ``extra`` label matchers select a shard of its series."""
        window = format_duration(range_s)
        selector = self.selector(extra)
        if self.reduce is Reduce.PRESENT:
            return f"group without (__name__) ({selector})"
        if self.reduce is Reduce.QUANTILE:
            return (
                f"histogram_quantile({self.quantile}, sum without ({', '.join(RANK_LABELS)}) "
                f"(rate({selector}[{window}])))"
            )
        if self.reduce is Reduce.INCREASE:
            return f"sum without ({', '.join(RANK_LABELS)}) (increase({selector}[{window}]))"
        return f"{self.reduce.value}({selector}[{window}])"

    def reads(self, names: Collection[str]) -> bool:
        """Whether a metric this query reads is among ``names`` (Prometheus's metric-name listing)."""
        if self.reduce is Reduce.PRESENT:
            pattern = re.compile(self.name)
            return any(pattern.fullmatch(n) for n in names)
        return (f"{self.name}_bucket" if self.reduce in _BUCKETS else self.name) in names


_BUCKETS = frozenset({Reduce.QUANTILE, Reduce.INCREASE})  # the reductions that read a histogram's buckets


def format_duration(seconds: float) -> str:
    """A PromQL duration: whole seconds where exact, else milliseconds."""
    millis = round(seconds * 1000.0)
    if millis <= 0:
        raise ValueError(f"a PromQL range must be positive, got {seconds}s")
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def _gpu_queries() -> tuple[MetricQuery, ...]:
    out = []
    for dcgm in DCGM_FIELDS:
        if dcgm.field not in GPU_COLUMNS:
            continue
        for rank, (name, unit) in enumerate(dcgm.names):
            reduce = Reduce.MAX if unit is Unit.CODE else Reduce.AVG
            out.append(MetricQuery(Family.GPU, dcgm.field, name, unit, reduce, rank))
    # The exporter's windowed Xid count: whether it counts at all, and the Xid 79 errors in the window.
    out.append(MetricQuery(Family.GPU, "xid_counted", XID_COUNT_NAME, Unit.COUNT, Reduce.MAX, 0))
    lost = f'{{{XID_LABEL}="{XID_GPU_FALLEN_OFF_BUS}"}}'
    out.append(
        MetricQuery(Family.GPU, "xid_lost_count", XID_COUNT_NAME, Unit.COUNT, Reduce.MAX, 0, matchers=lost)
    )
    return tuple(out)


_REDUCE = {Kind.COUNTER: Reduce.RATE, Kind.GAUGE: Reduce.AVG}


def _engine_queries(metric: EngineMetric) -> tuple[MetricQuery, ...]:
    family = Family(metric.engine.value)
    out = []
    for part, aliases in enumerate(metric.parts):
        for rank, name in enumerate(aliases):
            if metric.kind is Kind.HISTOGRAM:
                out += [
                    MetricQuery(family, column, name, metric.unit, Reduce.QUANTILE, rank, part, q)
                    for column, q in LATENCY_QUANTILES[metric.field].items()
                ]
            else:
                reduce = _REDUCE[metric.kind]
                out.append(MetricQuery(family, metric.field.value, name, metric.unit, reduce, rank, part))
    return tuple(out)


GPU_QUERIES: tuple[MetricQuery, ...] = _gpu_queries()
ENGINE_QUERIES: tuple[MetricQuery, ...] = tuple(q for m in ENGINE_METRICS for q in _engine_queries(m))
# The latency histograms' buckets themselves, per window: one more query per histogram name (the quantile
# queries' names, aliases and parts), asked only where the server holds its ``_bucket`` series (plan).
HISTOGRAM_QUERIES: tuple[MetricQuery, ...] = tuple(
    MetricQuery(Family(m.engine.value), HISTOGRAM_COLUMNS[m.field], name, m.unit, Reduce.INCREASE, rank, part)
    for m in ENGINE_METRICS
    if m.field in HISTOGRAM_COLUMNS
    for part, aliases in enumerate(m.parts)
    for rank, name in enumerate(aliases)
)
GPU_PRESENCE = MetricQuery(Family.GPU, PRESENT, DCGM_NAME_PATTERN.pattern, Unit.COUNT, Reduce.PRESENT, 0)
DYNAMO_LABELS = MetricQuery(
    Family.DYNAMO, PRESENT, f"{DYNAMO_COMPONENT_METRIC_PREFIX}.+", Unit.COUNT, Reduce.PRESENT, 0
)
# One query per name a KV budget factor reads (vLLM's two factors are labels of one series); the series are
# matched to their factors by name (prometheus_source), not placed in frame columns.
KV_CAPACITY_QUERIES: tuple[MetricQuery, ...] = tuple(
    MetricQuery(Family(m.engine.value), KV_CAPACITY_FIELD, name, Unit.COUNT, Reduce.LAST, 0)
    for m in KV_CAPACITY_METRICS
    for name in m.names
)
# The concurrency cap's names, each queried once: one the KV queries read already (vLLM's cache_config_info)
# is not asked again, since the series are matched to what reads them by name, whichever query fetched them.
MAX_RUNNING_QUERIES: tuple[MetricQuery, ...] = tuple(
    MetricQuery(Family(m.engine.value), MAX_RUNNING_FIELD, name, Unit.COUNT, Reduce.LAST, 0)
    for m in MAX_RUNNING_METRICS
    for name in m.names
    if name not in {q.name for q in KV_CAPACITY_QUERIES}
)
# The columns of the queries above: what an engine reports of itself, never a frame column.
REPORTED_COLUMNS = frozenset({KV_CAPACITY_FIELD, MAX_RUNNING_FIELD})
ALL_QUERIES: tuple[MetricQuery, ...] = (
    *GPU_QUERIES, GPU_PRESENCE, *ENGINE_QUERIES, *HISTOGRAM_QUERIES, *KV_CAPACITY_QUERIES,
    *MAX_RUNNING_QUERIES, DYNAMO_LABELS,
)  # fmt: skip


def plan(available: Collection[str] | None) -> tuple[MetricQuery, ...]:
    """The queries worth running: those whose metric exists (``available`` from Prometheus's label-values
    API), or every one when the server cannot list its metric names."""
    if available is None:
        return ALL_QUERIES
    return tuple(q for q in ALL_QUERIES if q.reads(available))
