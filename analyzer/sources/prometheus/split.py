"""Zero-agent mode's query splitting: keep every ``query_range`` answer under what the store enforces.

:class:`QueryLimits` holds phasefit's side of the stores' limits. A query is cut by time (chunks of the
grid) and by series (shards on one label's values); :func:`merge_series` joins the answers.
Reasoning: docs/analyzer.md#split
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from analyzer.sources.prometheus.series import RangeSeries, TimeGrid

MAX_POINTS_PER_SERIES = 11_000  # Prometheus: "exceeded maximum resolution of 11,000 points per timeseries"
# phasefit's defaults, under every store's defaults (docs/zero-agent.md):
DEFAULT_MAX_POINTS = 10_000  # < 11,000 (Prometheus, Thanos, Mimir) and 30,000 (VictoriaMetrics)
DEFAULT_MAX_SERIES = 10_000  # < VictoriaMetrics' 300,000 unique series; Mimir, Thanos: unlimited by default
DEFAULT_MAX_SAMPLES = 5_000_000  # answer points, < 50,000,000 max-samples (Prometheus, Mimir) with room
DEFAULT_TIMEOUT_S = 60.0
# Mimir stops sharding a query whose regular expression is longer (-query-frontend.query-sharding-max-regexp-
# size-bytes, 4096); VictoriaMetrics refuses queries over 16 KiB (-search.maxQueryLen).
MAX_SHARD_REGEX_BYTES = 3_000


@dataclass(frozen=True)
class QueryLimits:
    """What one query_range may ask: points per series, series per answer, points per answer (series x
    points), the time range it spans (its window included), and how long to wait for an answer."""

    max_points_per_series: int = DEFAULT_MAX_POINTS
    max_series_per_query: int = DEFAULT_MAX_SERIES
    max_samples_per_query: int = DEFAULT_MAX_SAMPLES
    max_query_length_s: float | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_points_per_series", "max_series_per_query", "max_samples_per_query"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_query_length_s is not None and not self.max_query_length_s > 0:
            raise ValueError(f"max_query_length_s must be positive, got {self.max_query_length_s}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")

    def points_for(self, series: int, step: float, range_s: float = 0.0) -> int:
        """The most evaluation times one chunk may hold when its answer has ``series`` series: under the
        points-per-series limit, the answer's points under the samples limit, and the chunk's span plus its
        window (``range_s``) under the query-length limit. At least 1."""
        points = min(self.max_points_per_series, self.max_samples_per_query // max(series, 1))
        if self.max_query_length_s is not None:
            points = min(points, math.floor((self.max_query_length_s - range_s) / step + 1e-9) + 1)
        return max(1, points)


class LimitKind(StrEnum):
    """Why a store refused a query, as its error message says."""

    POINTS = "points per series"
    SAMPLES = "samples"
    SERIES = "series"
    LENGTH = "query length"
    TIMEOUT = "time"


# Substrings of the stores' error messages (lower case), checked in this order.
_REFUSALS: tuple[tuple[LimitKind, tuple[str, ...]], ...] = (
    (
        LimitKind.POINTS,
        (
            "exceeded maximum resolution",  # Prometheus, Thanos, Mimir: 11,000 points
            "maxpointspertimeseries",  # VictoriaMetrics
            "too many points",
        ),
    ),
    (
        LimitKind.SERIES,
        (
            "number of matching timeseries exceeds",  # VictoriaMetrics: -search.maxUniqueTimeseries
            "maxuniquetimeseries",
            "max-series-per-query",  # Mimir: err-mimir-max-series-per-query
            "max-fetched-series",
            "exceeded series limit",  # Thanos: --store.limits.request-series
            "maximum number of series",
        ),
    ),
    (
        LimitKind.SAMPLES,
        (
            "too many samples",  # Prometheus, Mimir: --query.max-samples / -querier.max-samples
            "maxsamplesperquery",  # VictoriaMetrics
            "maxsamplesperseries",
            "max-chunks-per-query",  # Mimir: err-mimir-max-chunks-per-query
            "max-chunks-bytes-per-query",
            "max-fetched-chunk",
            "max-estimated-memory",
            "exceeded chunks limit",  # Thanos: --store.limits.request-samples (as chunks)
            "exceeded samples limit",
            "exceeded bytes limit",
        ),
    ),
    (
        LimitKind.LENGTH,
        (
            "max-query-length",  # Mimir: err-mimir-max-query-length
            "max-total-query-length",
            "max-partial-query-length",
            "query time range exceeds",  # Thanos and Cortex query frontends
        ),
    ),
    (
        LimitKind.TIMEOUT,
        (
            "query timed out",  # Prometheus: --query.timeout
            "maxqueryduration",  # VictoriaMetrics
            "timeout exceeded",
            "context deadline exceeded",
        ),
    ),
)
# A chunk refused for these is halved in time; for these, split by a label's values.
TIME_SPLITTABLE = frozenset({LimitKind.POINTS, LimitKind.SAMPLES, LimitKind.LENGTH, LimitKind.TIMEOUT})
LABEL_SPLITTABLE = frozenset({LimitKind.SERIES, LimitKind.SAMPLES, LimitKind.TIMEOUT})


def limit_kind(message: str) -> LimitKind | None:
    """The limit a store's error message says a query broke; None for any other error."""
    low = message.lower()
    for kind, needles in _REFUSALS:
        if any(needle in low for needle in needles):
            return kind
    return None


def chunks(grid: TimeGrid, max_points: int = MAX_POINTS_PER_SERIES) -> list[TimeGrid]:
    """``grid`` cut into consecutive grids of at most ``max_points`` evaluation times each: together they
    hold every time of ``grid`` exactly once."""
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    return [
        TimeGrid(grid.start + first * grid.step, grid.step, min(max_points, grid.n - first))
        for first in range(0, grid.n, max_points)
    ]


def halves(part: TimeGrid) -> tuple[TimeGrid, TimeGrid]:
    """``part`` (at least two times) cut in two consecutive grids."""
    if part.n < 2:
        raise ValueError("a grid of one time cannot be halved")
    half = part.n // 2
    second = TimeGrid(part.start + half * part.step, part.step, part.n - half)
    return TimeGrid(part.start, part.step, half), second


def aligned_grid(first: float, last: float, step: float) -> TimeGrid | None:
    """The window ends in [first + step, last] at whole multiples of ``step`` (epoch milliseconds): the
    times Thanos's query frontend (--query-range.align-range-with-step, on by default) and VictoriaMetrics
    (for 50 points or more, unless its cache is off) evaluate a range query at, whatever start is asked.
    None where no multiple falls in the range."""
    every = round(step * 1000)
    if every <= 0:
        raise ValueError(f"step must be at least 1 ms, got {step}")
    lo, hi = round((first + step) * 1000), round(last * 1000)
    start = -(-lo // every) * every
    if start > hi:
        return None
    return TimeGrid(start / 1000, every / 1000, (hi - start) // every + 1)


def merge_parts(parts: Sequence[RangeSeries]) -> RangeSeries:
    """One series from the parts its chunks returned: points in time order, each time (to the millisecond)
    once; where two parts both hold a time, the first part's value stays."""
    if not parts:
        raise ValueError("no parts to merge")
    if len(parts) == 1:
        return parts[0]
    ts = np.concatenate([p.ts for p in parts])
    values = np.concatenate([p.values for p in parts])
    order = np.argsort(ts, kind="stable")
    millis = np.rint(ts[order] * 1000.0).astype(np.int64)
    keep = np.ones(order.size, dtype=bool)
    keep[1:] = millis[1:] != millis[:-1]
    return RangeSeries(parts[0].labels, ts[order][keep], values[order][keep])


def merge_series(answers: Iterable[RangeSeries]) -> list[RangeSeries]:
    """The series of every chunk and shard of one query, joined per label set (in order of first sight)."""
    parts: dict[frozenset[tuple[str, str]], list[RangeSeries]] = {}
    for series in answers:
        parts.setdefault(frozenset(series.labels.items()), []).append(series)
    return [merge_parts(found) for found in parts.values()]


@dataclass(frozen=True)
class Shard:
    """A part of one query's series: the label matchers that select it, the labels they match on, and the
    values its last matcher matches ("" for series without that label)."""

    matchers: tuple[str, ...] = ()
    labels: tuple[str, ...] = field(default=())
    values: tuple[str, ...] = field(default=())


def promql_string(text: str) -> str:
    """``text`` as a double-quoted PromQL string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def regex_matcher(label: str, values: Sequence[str]) -> str:
    """``label=~"v1|v2|..."`` matching exactly ``values`` (the empty value: series without the label)."""
    return f"{label}=~{promql_string('|'.join(re.escape(v) for v in values))}"


def group_values(
    values: Iterable[str], groups: int, *, max_bytes: int = MAX_SHARD_REGEX_BYTES
) -> list[tuple[str, ...]]:
    """The label values (sorted, once each) cut into at least ``groups`` consecutive groups of near-equal
    size (as many as there are values at most), each group's escaped alternation at most ``max_bytes`` long
    (a longer value stays alone). The empty value, where given, leads the first group."""
    distinct = set(values)
    ordered = sorted(distinct - {""})
    if not ordered:
        return [("",)] if "" in distinct else []
    size = math.ceil(len(ordered) / max(1, min(groups, len(ordered) + ("" in distinct))))
    out: list[tuple[str, ...]] = []
    for first in range(0, len(ordered), size):
        current: list[str] = []
        length = 0
        for value in ordered[first : first + size]:
            cost = len(re.escape(value).encode()) + 1
            if current and length + cost > max_bytes:
                out.append(tuple(current))
                current, length = [], 0
            current.append(value)
            length += cost
        out.append(tuple(current))
    if "" in distinct:
        out = [("",), *out] if len(out) < groups else [("", *out[0]), *out[1:]]
    return out


def split_shard(shard: Shard, label: str, values: Iterable[str], groups: int) -> list[Shard]:
    """``shard`` split by ``label`` into at least ``groups`` shards (where there are that many values) that
    partition its series: a series whose ``label`` is among ``values`` (or, with "" among them, lacks it)
    falls in exactly one."""
    return [
        Shard((*shard.matchers, regex_matcher(label, group)), (*shard.labels, label), group)
        for group in group_values(values, groups)
    ]


def resplit(shard: Shard, groups: int) -> list[Shard] | None:
    """``shard`` split further by the values of the label it was last split by; None where it matches one
    value only."""
    if len(shard.values) < 2:
        return None
    parent = Shard(shard.matchers[:-1], shard.labels[:-1])
    return split_shard(parent, shard.labels[-1], shard.values, groups)
