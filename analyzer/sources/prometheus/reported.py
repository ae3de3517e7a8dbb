"""What a worker's engine reports of itself, from the series of the KV budget and concurrency cap queries,
by the rule the collector applies (fleet.vocabulary.engines): the last value winning, per number the series
that reported last (of those, the latest born: an info gauge whose labels change at a restart is a new
series). None where the engine reports none. Reasoning: docs/analyzer.md#source
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from analyzer.sources.prometheus.metrics import MetricQuery
from analyzer.sources.prometheus.series import RangeSeries
from fleet.vocabulary.engines import ReportedNumber, Sample, kv_capacity_metric, max_running_metric

Placed = Sequence[tuple[MetricQuery, RangeSeries]]


def _latest(placed: Iterable[tuple[MetricQuery, RangeSeries]]) -> list[Sample]:
    """The samples of the series that reported last, of those the latest born: (name, labels, last value)."""
    points: list[tuple[tuple[float, float], Sample]] = []
    for query, series in placed:
        finite = np.flatnonzero(np.isfinite(series.values))
        if finite.size:
            when = (float(series.ts[finite[-1]]), float(series.ts[finite[0]]))
            points.append((when, (query.name, series.labels, float(series.values[finite[-1]]))))
    last = max((when for when, _ in points), default=None)
    return [sample for when, sample in points if when == last]


def _read(number: ReportedNumber, placed: Placed) -> int | None:
    return number.read(_latest(p for p in placed if p[0].name in number.names))


def kv_capacity_tokens(engine: str, placed: Placed) -> int | None:
    """A worker's KV budget from its reported series; None where its engine reports none."""
    metric = kv_capacity_metric(engine)
    if metric is None:
        return None
    return metric.product([_read(factor, placed) for factor in metric.factors])


def max_running_requests(engine: str, placed: Placed) -> int | None:
    """The most requests a worker's engine reports running at once; None where it reports none."""
    metric = max_running_metric(engine)
    if metric is None:
        return None
    return metric.requests(_latest(p for p in placed if p[0].name in metric.names))
