"""Fleet life besides steady traffic: mix drift, idle periods, engine restarts, collector gaps, Xid 79.

Scheduled events (drift, idle periods, listed GPU losses, the restart of each scheduled role change)
come from the scenario. Random events
(restarts, collector gaps) are drawn per simulated day from a generator keyed by (seed, stream, day), so
any window range can be computed on its own and the result does not depend on how time is chunked.
Times are seconds from the scenario start; spans are half-open windows ``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetsim.layout import FleetLayout
from fleetsim.rng import STREAM_GAPS, STREAM_RESTARTS, rng_for
from fleetsim.scenario import PoolSpec, Scenario, ScenarioError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

DAY_S = 86_400.0
WEEK_DAYS = 7.0


def code_share(pool: PoolSpec, t_s: FloatArray) -> FloatArray:
    """The pool's share of "code" requests at times ``t_s``: its base mix, moved by each drift in turn."""
    share = np.full(np.shape(t_s), pool.traffic.code_share, dtype=np.float64)
    for drift in sorted(pool.drift, key=lambda d: d.at_hour):
        start = drift.at_hour * 3600.0
        ramp = max(drift.ramp_hours * 3600.0, 1.0)
        progress = np.clip((t_s - start) / ramp, 0.0, 1.0)
        share = share + (drift.code_share - share) * progress
    return share


def idle_factor(pool: PoolSpec, t_s: FloatArray) -> FloatArray:
    """Multiplier of the pool's request rate: ``factor`` inside its idle periods, 1 elsewhere."""
    factor = np.ones(np.shape(t_s), dtype=np.float64)
    for idle in pool.idle:
        start = idle.at_hour * 3600.0
        inside = (t_s >= start) & (t_s < start + idle.hours * 3600.0)
        factor = np.where(inside, factor * idle.factor, factor)
    return factor


@dataclass(frozen=True)
class DriftEvent:
    pool: str
    start_s: float
    end_s: float
    description: str


def drift_events(scenario: Scenario) -> list[DriftEvent]:
    """Every scheduled mix drift, in time order."""
    events = [
        DriftEvent(p.pool_id, d.at_hour * 3600.0, (d.at_hour + d.ramp_hours) * 3600.0, d.description)
        for p in scenario.pools
        for d in p.drift
    ]
    return sorted(events, key=lambda e: (e.start_s, e.pool))


def _end(at_hour: float, hours: float | None) -> float:
    return float(np.inf) if hours is None else (at_hour + hours) * 3600.0


@dataclass(frozen=True)
class Span:
    item: int  # a worker, node or GPU index
    start_s: float
    end_s: float


class LifeEvents:
    """Restarts, collector gaps and lost GPUs of one fleet and seed, queried per window range."""

    def __init__(self, scenario: Scenario, layout: FleetLayout, seed: int, window_s: float) -> None:
        self._life = scenario.life
        self._layout = layout
        self._seed = seed
        self._window_s = window_s
        self._days: dict[tuple[int, int], list[Span]] = {}
        self._lost: list[Span] = []
        for spec in scenario.life.gpu_lost:
            node = layout.node_index(spec.node)
            gpus = [g for g in layout.gpus if g.node == node and g.local_index == spec.gpu]
            if node is None or not gpus:
                raise ScenarioError(f"life.gpu_lost: no GPU {spec.gpu} on node {spec.node!r}")
            end = (
                np.inf
                if spec.recover_after_hours is None
                else (spec.at_hour + spec.recover_after_hours) * 3600
            )
            self._lost += [Span(g.index, spec.at_hour * 3600.0, float(end)) for g in gpus]
        by_key = layout.worker_by_key()
        self._switching = [  # a role change restarts the engine in its new role
            Span(by_key[c.worker].index, c.at_hour * 3600.0, c.at_hour * 3600.0 + c.restart_minutes * 60.0)
            for c in scenario.changes
        ]
        self._drained = [
            Span(by_key[d.worker].index, d.at_hour * 3600.0, _end(d.at_hour, d.hours))
            for d in scenario.life.drained
            if d.worker in by_key
        ]
        self._degraded: dict[str, list[Span]] = {}
        for deg in scenario.life.degraded:
            node = layout.node_index(deg.node)
            for g in layout.gpus:
                if g.node == node and (deg.gpus is None or g.local_index in deg.gpus):
                    span = Span(g.index, deg.at_hour * 3600.0, _end(deg.at_hour, deg.hours))
                    for name in deg.missing:
                        self._degraded.setdefault(name, []).append(span)
                    self._degraded.setdefault("", []).append(span)

    @property
    def lost_spans(self) -> list[Span]:
        """The scenario's GPU losses (Xid 79), as GPU spans."""
        return list(self._lost)

    def _random_spans(
        self, stream: int, day: int, count: int, per_week: float, minutes: tuple[float, float]
    ) -> list[Span]:
        key = (stream, day)
        cached = self._days.get(key)
        if cached is not None:
            return cached
        rng = rng_for(self._seed, stream, day)
        events = rng.poisson(per_week / WEEK_DAYS, count)
        spans = []
        for item in np.flatnonzero(events):
            for _ in range(int(events[item])):
                start = (day + rng.random()) * DAY_S
                length = rng.uniform(minutes[0], minutes[1]) * 60.0
                spans.append(Span(int(item), start, start + length))
        if len(self._days) > 64:
            self._days.clear()
        self._days[key] = spans
        return spans

    def _spans(self, stream: int, t0: float, t1: float) -> list[Span]:
        if stream == STREAM_RESTARTS:
            count, rate, minutes = (
                len(self._layout.workers),
                self._life.restarts_per_worker_week,
                self._life.restart_minutes,
            )
        else:
            count, rate, minutes = (
                len(self._layout.nodes),
                self._life.collector_gaps_per_node_week,
                self._life.collector_gap_minutes,
            )
        first_day = int(np.floor((t0 - minutes[1] * 60.0) / DAY_S))
        last_day = int(np.floor(t1 / DAY_S))
        out: list[Span] = []
        for day in range(max(first_day, 0), last_day + 1):
            out.extend(
                s
                for s in self._random_spans(stream, day, count, rate, minutes)
                if s.end_s > t0 and s.start_s < t1
            )
        return out

    def _mask(self, spans: Sequence[Span], window_start: FloatArray, width: int) -> BoolArray:
        """(windows, items) true where a span overlaps the window."""
        mask = np.zeros((len(window_start), width), dtype=bool)
        window_end = window_start + self._window_s
        for span in spans:
            mask[:, span.item] |= (window_end > span.start_s) & (window_start < span.end_s)
        return mask

    def restarting(self, window_start: FloatArray) -> BoolArray:
        """(windows, workers): the worker's engine is restarting (down) during the window: a random restart
        or a scheduled role change's."""
        spans = self._spans(STREAM_RESTARTS, float(window_start[0]), float(window_start[-1]) + self._window_s)
        return self._mask([*spans, *self._switching], window_start, len(self._layout.workers))

    def collector_gap(self, window_start: FloatArray) -> BoolArray:
        """(windows, nodes): the node's collector sends nothing for the window."""
        spans = self._spans(STREAM_GAPS, float(window_start[0]), float(window_start[-1]) + self._window_s)
        return self._mask(spans, window_start, len(self._layout.nodes))

    def gpu_lost(self, window_start: FloatArray) -> BoolArray:
        """(windows, GPUs): the GPU has fallen off the bus (Xid 79, NVML GPU_IS_LOST)."""
        return self._mask(self._lost, window_start, len(self._layout.gpus))

    def drained(self, window_start: FloatArray) -> BoolArray:
        """(windows, workers): the router sends the worker nothing (its engine may still be up)."""
        return self._mask(self._drained, window_start, len(self._layout.workers))

    def degraded(self, window_start: FloatArray, field: str = "") -> BoolArray:
        """(windows, GPUs): the collector reports the GPU degraded (``field``: with that field missing)."""
        return self._mask(self._degraded.get(field, []), window_start, len(self._layout.gpus))

    def worker_up(self, window_start: FloatArray) -> BoolArray:
        """(windows, workers): the engine serves (not restarting, none of its GPUs lost)."""
        up = ~self.restarting(window_start)
        lost = self.gpu_lost(window_start)
        if lost.any():
            for worker in self._layout.workers:
                up[:, worker.index] &= ~lost[:, list(worker.gpus)].any(axis=1)
        return up
