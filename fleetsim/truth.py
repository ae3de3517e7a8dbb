"""Ground truth by re-simulation: the best placements of the same GPUs for the same traffic, and the gain.

Method. For each pool and each time segment (segments split at the scenario's mix drifts and at its
scheduled role changes: a segment's current placement is the roles its workers run then), the same
traffic (same seed, same restarts and lost GPUs) is run through this simulator with the pool's
prefill/decode roles re-assigned. A candidate keeps every worker on its GPUs and chooses, per SKU, how
many of that SKU's workers run prefill (``fleetsim.placement``). Candidates are screened on the
simulator's per-window worker capacities, then the leaders and the current placement are re-simulated
in saturated mode (the pool always has work, as published benchmarks run).

Noise and equivalence. Nothing here is a tuned tolerance: the noise of a re-simulated throughput is
measured from the simulation. The current and the best placement are re-simulated again under
``NOISE_SEEDS`` independent seeds (other restarts, lost-GPU timing, traffic draws), and the segment's
own windows are cut into ``BATCHES`` batch means. ``noise_tokens_per_s`` is twice the largest standard
deviation among: the seed-to-seed spread of either placement and the standard error of either one's
batch means. Every re-simulated placement within that noise of the highest is an equivalent best,
listed, never ranked. If the current placement is among them, nothing in that pool and segment is
misplaced and nothing is lost.

Lost capacity = the highest of the equivalent set minus the current (saturated), in prompt + output
tokens/s, output tokens/s and requests/s. ``demand_limited``: the current placement's queues were empty
in most windows of the segment (it served what arrived); its loss is then idle capacity.

Kinds, from what limits the worker in the simulation (never from the catalog's datasheet figures), per
(SKU, from_role, to_role) count of an equivalent best: decode -> prefill on a SKU while a SKU whose workers
the simulation measured delivering more decode tokens/s each decodes in that best split:
``decode-on-low-bandwidth``, or ``capacity-on-small-memory`` for the moved workers whose decode batch
was limited by KV memory (KV-bound and full) in most of the windows they were up while a SKU holding
more KV per worker decodes in that split; prefill -> decode on a SKU while a SKU with a lower measured
decode rate decodes now and gains prefill in that split: ``prefill-on-high-bandwidth``; any other change
re-balances the pool: ``pool-ratio-drift``. A segment shows ratio drift when every
equivalent best needs such a re-balance.

Schema (JSON), per segment: ``pool``, ``start``, ``end``, ``current_placement`` ({sku: {role: n}}),
``best_placements`` (the equivalent set, highest throughput first), ``best_placements_tokens_per_s``,
``misplaced_counts`` (one list per equivalent best that needs moves, of {"sku", "from_role", "to_role",
"kind", "count"}; ``[[]]`` when the current placement is equivalent), ``current_is_best``,
``equivalence_complete`` (false when every re-simulated candidate was within the noise),
``noise_tokens_per_s``, ``current_/best_/lost_tokens_per_s``, ``current_/lost_output_tokens_per_s``,
``current_/lost_requests_per_s``, ``demand_limited``, ``saturated_share``, ``offered_``/``delivered_``/
``best_delivered_``/``undelivered_tokens_per_s``, ``utilisation``, ``code_share``, mean lengths, and for
older readers ``best_placement`` and ``misplaced_workers`` (the highest-throughput equivalent, with the
workers the group order moves: an arbitrary pick within each SKU). Top level: time-weighted sums over
pools of the lost and noise figures, ``lost_is``, ``misplaced_workers``, ``ratio_drift``,
``pools`` ({pool: {"name", "workers": {id: {"sku", "role"}}, "saturated_hourly": [share of each hour's
windows from ``start`` with work queued]}}, the role at the start), ``drift_events``,
``gpu_lost``, and ``changes``: what each carried-out role change realized (``fleetsim.truth_changes``
has the method), one entry per (pool, change time) inside the run, in time order: ``pool``, ``at``,
``window_start`` (the first window of the new placement), ``workers`` ([{"worker_id", "key", "sku",
"from_role", "to_role", "restart_minutes"}]), ``before_placement``/``after_placement`` ({sku: {role:
n}}), ``by_traffic`` ({"before": ..., "after": ...}: both placements re-simulated saturated on the
traffic of the segment just before the change and of the one just after, each with ``segment``,
``start``, ``end``, ``before_``/``after_``/``gain_`` x ``tokens_per_s``/``output_tokens_per_s``/
``requests_per_s`` (gain = after minus before), ``noise_tokens_per_s``, ``best_tokens_per_s`` and
``after_among_best``), ``primary`` ("after": the traffic the ``realized_*`` figures are taken on),
``realized_gain_tokens_per_s``, ``realized_gain_output_tokens_per_s``, ``realized_gain_requests_per_s``,
``noise_tokens_per_s``, ``beyond_noise`` (|gain| > noise), ``before_was_best`` and ``after_is_best``
(each placement among its own segment's equivalent best).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from fleet.catalog import Catalog
from fleet.contract import FindingKind, Role
from fleetsim.fleet_sim import FleetSimulation, PoolChunk, rfc3339
from fleetsim.life import drift_events
from fleetsim.physics_choice import Physics
from fleetsim.placement import Groups, screen
from fleetsim.pool import DECODE, MIXED, PREFILL, PoolModel, QueueState
from fleetsim.scenario import Scenario
from fleetsim.truth_changes import PlanRuns, change_events, change_report
from fleetsim.ttft_goodput import ttft_bounded

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")

NOISE_SEEDS = 2  # extra independent seeds the current and best placements are re-simulated under
BATCHES = 10  # batch means per segment
CHOICES = 3  # other picks of which workers of each SKU take the best counts' roles
_SEARCH_WINDOWS = 720  # windows per segment the screening uses (evenly spaced)
_ROLE_NAME = {PREFILL: Role.PREFILL, DECODE: Role.DECODE, MIXED: Role.MIXED}
_SERIES = ("tokens", "requests", "output")


def _slice(value: T, sl: slice) -> T:
    """A dataclass of arrays (nested) restricted to windows ``sl`` (axis 0)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _slice(getattr(value, f.name), sl) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return value[sl]  # type: ignore[return-value]
    return value


@dataclass
class _Segment:
    pool: int
    first: int  # window range [first, last)
    last: int
    current: IntArray  # role codes per pool worker
    groups: Groups | None  # the search's groups from the current roles (None: colocated)
    sample_prefill: list[FloatArray] = field(default_factory=list)  # (K,) per sampled window
    sample_decode: list[FloatArray] = field(default_factory=list)
    sample_mean: list[tuple[float, float]] = field(default_factory=list)
    starved: FloatArray | None = None  # windows KV-bound and full, per worker
    up: FloatArray | None = None  # windows up, per worker
    saturated_windows: int = 0  # windows with work queued somewhere in the pool
    offered: float = 0.0
    delivered: float = 0.0
    share: float = 0.0
    prompt: float = 0.0
    output: float = 0.0
    candidates: list[IntArray] = field(default_factory=list)  # role codes per worker
    counts: list[IntArray] = field(default_factory=list)  # prefill per SKU group (disaggregated)
    means: FloatArray | None = None  # (candidates, 3): tokens, requests, output tokens per s
    now: int = 0  # index of the current placement among the candidates
    top: int = 0  # index of the highest
    noise: float = 0.0
    equivalent: list[int] = field(default_factory=list)
    best_delivered: float = 0.0
    extra: PlanRuns = field(default_factory=PlanRuns)  # placements around role changes

    @property
    def windows(self) -> int:
        return self.last - self.first


def hourly_shares(flags: npt.NDArray[np.bool_], window_s: float) -> list[float]:
    """Per hour from the first window's start, the share of the windows starting in it whose flag is set;
    an hour no window starts in takes the flag of the window covering it."""
    n = len(flags)
    if n == 0:
        return []
    starts = np.arange(n) * window_s
    hours = int(np.ceil(n * window_s / 3600.0))
    index = (starts // 3600.0).astype(np.int64)
    counts = np.bincount(index, minlength=hours).astype(np.float64)
    sums = np.bincount(index, weights=flags.astype(np.float64), minlength=hours)
    covering = np.minimum((np.arange(hours) * 3600.0 // window_s).astype(np.int64), n - 1)
    shares = np.where(counts > 0, sums / np.maximum(counts, 1.0), flags[covering].astype(np.float64))
    return [round(float(v), 3) for v in shares]


class _Truth:
    def __init__(
        self,
        scenario: Scenario,
        *,
        catalog: Catalog,
        seed: int,
        days: float,
        window_s: float | None,
        start: datetime | None,
        physics: Physics,
    ) -> None:
        self.catalog = catalog
        self.start = start
        self.physics = physics
        self.sim = FleetSimulation(scenario, catalog, seed, window_s=window_s, start=start, physics=physics)
        self.scenario = scenario
        self.seed = seed
        self.days = days
        self.n = self.sim.windows_in(days)
        self.segments = self._segments()
        self.events = change_events(self.sim.schedule, self.segments)
        # Per pool and window: work queued somewhere in the pool (the current placement, actual traffic).
        self.saturated = [np.zeros(self.n, dtype=bool) for _ in self.sim.models]

    def _hourly(self, flags: npt.NDArray[np.bool_]) -> list[float]:
        """Share of each hour's windows (from ``start``; a window counts in the hour it starts in) with work
        queued: demand-limited hour by hour. An hour no window starts in (windows longer than an hour)
        takes the share of the window that covers it."""
        return hourly_shares(flags, self.sim.window_s)

    def _segments(self) -> list[_Segment]:
        out = []
        for p, model in enumerate(self.sim.models):
            cuts = {0, self.n}
            for drift in model.pool.spec.drift:
                for hours in (drift.at_hour, drift.at_hour + drift.ramp_hours):
                    cuts.add(round(hours * 3600.0 / self.sim.window_s))
            cuts.update(self.sim.schedule.cuts(p))
            edges = sorted(w for w in cuts if 0 <= w <= self.n)
            for a, b in itertools.pairwise(edges):
                current = self.sim.schedule.roles_at(p, a)
                out.append(_Segment(p, a, b, current, None if model.colocated else Groups(model, current)))
        return out

    def _pieces(self, sim: FleetSimulation) -> Iterator[tuple[int, list[PoolChunk]]]:
        for index in range(-(-self.n // sim.chunk_windows)):
            first = index * sim.chunk_windows
            count = min(sim.chunk_windows, self.n - first)
            up = sim.life.worker_up(sim.window_start(first, count))
            yield first, [sim.pool_chunk(p, index, first, count, up) for p in range(len(sim.models))]

    def _overlaps(self, pool: int, first: int, count: int) -> Iterator[tuple[_Segment, slice]]:
        for seg in self.segments:
            if seg.pool == pool and seg.first < first + count and seg.last > first:
                yield seg, slice(max(seg.first, first) - first, min(seg.last, first + count) - first)

    def observe(self) -> None:
        """Pass 1: the current placement under the actual traffic; screening samples."""
        states = [QueueState() for _ in self.sim.models]
        window = self.sim.window_s
        for first, pieces in self._pieces(self.sim):
            for p, (model, pc) in enumerate(zip(self.sim.models, pieces, strict=True)):
                flow = model.flow(
                    pc.traffic, pc.capacities, pc.up, states[p], window_s=window, roles=pc.roles
                )
                screened = ttft_bounded(model, pc.traffic, pc.capacities)  # candidates by their goodput
                mix = pc.traffic.mix
                self.saturated[p][first : first + len(pc.up)] = flow.saturated.any(axis=1)
                for seg, sl in self._overlaps(p, first, len(pc.up)):
                    starved = (flow.kv_bound & flow.saturated & flow.up)[sl].sum(axis=0).astype(float)
                    up = flow.up[sl].sum(axis=0).astype(float)
                    seg.starved = starved if seg.starved is None else seg.starved + starved
                    seg.up = up if seg.up is None else seg.up + up
                    seg.saturated_windows += int(flow.saturated[sl].any(axis=1).sum())
                    seg.offered += float(flow.offered_tokens[sl].sum())
                    seg.delivered += float(flow.delivered_tokens[sl].sum())
                    seg.share += float(pc.traffic.share[sl].sum())
                    seg.prompt += float(mix.mean_prompt[sl].sum())
                    seg.output += float(mix.mean_output[sl].sum())
                    stride = max(1, seg.windows // _SEARCH_WINDOWS)
                    rows = np.arange(sl.start, sl.stop)
                    rows = rows[(first + rows - seg.first) % stride == 0]
                    seg.sample_prefill += list(screened.prefill[rows] * pc.up[rows])
                    seg.sample_decode += list(pc.capacities.decode[rows] * pc.up[rows])
                    seg.sample_mean += list(
                        zip(mix.mean_prompt[rows].tolist(), mix.mean_output[rows].tolist(), strict=True)
                    )

    def _saturated(self, sim: FleetSimulation, plans: list[list[IntArray]]) -> list[list[FloatArray]]:
        """Saturated re-simulation of role plans per segment: (windows, 3) series of tokens, requests
        and output tokens per s, per plan."""
        states = [[QueueState() for _ in plan] for plan in plans]
        out: list[list[list[FloatArray]]] = [[[] for _ in plan] for plan in plans]
        index = {id(seg): i for i, seg in enumerate(self.segments)}
        for first, pieces in self._pieces(sim):
            for p, (model, pc) in enumerate(zip(sim.models, pieces, strict=True)):
                for seg, sl in self._overlaps(p, first, len(pc.up)):
                    piece = _slice(pc, sl)
                    i = index[id(seg)]
                    caps = ttft_bounded(model, piece.traffic, piece.capacities)  # goodput under a TTFT target
                    for c, roles in enumerate(plans[i]):
                        flow = model.flow(
                            piece.traffic,
                            caps,
                            piece.up,
                            states[i][c],
                            window_s=sim.window_s,
                            saturated=True,
                            roles=roles,
                        )
                        requests = flow.delivered_requests
                        out[i][c].append(
                            np.stack(
                                [flow.delivered_tokens, requests, requests * piece.traffic.mix.mean_output],
                                axis=1,
                            )
                        )
        return [[np.concatenate(parts) for parts in plan] for plan in out]

    def resimulate(self) -> None:
        """Pass 2: saturated re-simulation of each segment's candidates; pass 3: the noise, the
        equivalent set."""
        plans = []
        for seg in self.segments:
            groups = seg.groups
            if groups is None:
                seg.candidates = [seg.current.copy()]
            else:
                seg.counts = screen(
                    np.array(seg.sample_prefill),
                    np.array(seg.sample_decode),
                    np.array(seg.sample_mean),
                    groups,
                )
                seg.candidates = [groups.roles(c) for c in seg.counts]
                seg.now = next(c for c, k in enumerate(seg.counts) if np.array_equal(k, groups.current))
            plans.append(seg.candidates + seg.extra.plans)
        series = []
        for seg, runs in zip(self.segments, self._saturated(self.sim, plans), strict=True):
            k = len(seg.candidates)
            series.append(runs[:k])
            seg.extra.runs, seg.extra.seeds = runs[k:], [[] for _ in seg.extra.plans]
            seg.means = np.array([r.mean(axis=0) for r in runs[:k]])
            seg.top = int(np.argmax(seg.means[:, 0]))
        choices = [self._choices(i, seg) for i, seg in enumerate(self.segments)]
        chosen = [[float(r[:, 0].mean()) for r in runs] for runs in self._saturated(self.sim, choices)]
        pair = [[seg.candidates[seg.now], seg.candidates[seg.top], *seg.extra.plans] for seg in self.segments]
        spread: list[list[list[float]]] = [[[], []] for _ in self.segments]
        for k in range(1, NOISE_SEEDS + 1):
            sim = FleetSimulation(
                self.scenario,
                self.catalog,
                self.seed + k,
                window_s=self.sim.window_s,
                start=self.start,
                physics=self.physics,
            )
            for i, runs in enumerate(self._saturated(sim, pair)):
                for j, r in enumerate(runs[:2]):
                    spread[i][j].append(float(r[:, 0].mean()))
                for j, r in enumerate(runs[2:]):
                    self.segments[i].extra.seeds[j].append(float(r[:, 0].mean()))
        for i, (seg, runs) in enumerate(zip(self.segments, series, strict=True)):
            assert seg.means is not None
            sigmas = [0.0]
            for j, c in enumerate((seg.now, seg.top)):
                values = [*spread[i][j], float(seg.means[c, 0])]
                sigmas.append(float(np.std(values, ddof=1)))
                batches = [b.mean() for b in np.array_split(runs[c][:, 0], min(BATCHES, len(runs[c])))]
                if len(batches) > 1:
                    sigmas.append(float(np.std(batches, ddof=1) / np.sqrt(len(batches))))
            if chosen[i]:
                sigmas.append(float(np.std([*chosen[i], float(seg.means[seg.top, 0])], ddof=1)))
            seg.noise = 2.0 * max(sigmas)
            best = float(seg.means[seg.top, 0])
            order = np.argsort(-seg.means[:, 0], kind="stable")
            seg.equivalent = [int(c) for c in order if seg.means[c, 0] >= best - seg.noise]

    def _choices(self, i: int, seg: _Segment) -> list[IntArray]:
        """The highest candidate's counts per SKU on ``CHOICES`` other random picks of the workers."""
        groups = seg.groups
        if groups is None:
            return []
        rng = np.random.default_rng([self.seed, 104_729, i])
        out = []
        for _ in range(CHOICES):
            roles = np.full(groups.width, DECODE, dtype=np.int64)
            for order, k in zip(groups.order, seg.counts[seg.top], strict=True):
                roles[rng.permutation(order)[:k]] = PREFILL
            out.append(roles)
        return out

    def best_under_traffic(self) -> None:
        """Pass 4: the actual traffic on the highest equivalent plan, queues carried across segments."""
        states = [QueueState() for _ in self.sim.models]
        window = self.sim.window_s
        for first, pieces in self._pieces(self.sim):
            for p, (model, pc) in enumerate(zip(self.sim.models, pieces, strict=True)):
                for seg, sl in self._overlaps(p, first, len(pc.up)):
                    piece = _slice(pc, sl)
                    roles = seg.candidates[self._shown(seg)]
                    flow = model.flow(
                        piece.traffic, piece.capacities, piece.up, states[p], window_s=window, roles=roles
                    )
                    seg.best_delivered += float(flow.delivered_tokens.sum())

    def _shown(self, seg: _Segment) -> int:
        """The placement older readers see as "best": the current one if equivalent, else the equivalent
        with the fewest re-balancing moves (moves the SKUs' physics does not explain), then the highest."""
        if seg.now in seg.equivalent:
            return seg.now
        drift = FindingKind.POOL_RATIO_DRIFT
        return min(seg.equivalent, key=lambda c: sum(kind is drift for _, kind in self._moves(seg, c)))

    # --- report -------------------------------------------------------------------------------------

    def _time(self, window: int) -> str:
        return rfc3339(self.sim.epoch0 + window * self.sim.window_s)

    def _placement(self, model: PoolModel, roles: IntArray) -> dict[str, dict[str, int]]:
        """Workers per SKU and role (every role the pool's serving mode has, zeros included)."""
        kinds = [Role.MIXED] if model.colocated else [Role.PREFILL, Role.DECODE]
        out: dict[str, dict[str, int]] = {}
        for worker, role in zip(model.workers, roles.tolist(), strict=True):
            per = out.setdefault(worker.sku.key, {kind.value: 0 for kind in kinds})
            per[_ROLE_NAME[role].value] += 1
        return dict(sorted(out.items()))

    def _decode_per_worker(self, seg: _Segment, groups: Groups) -> list[float]:
        """Each SKU group's decode capacity per worker, as the simulation measured it over the segment's
        sampled windows (output tokens/s of an up worker: what its physics delivers, not its datasheet)."""
        samples = np.array(seg.sample_decode) if seg.sample_decode else np.zeros((1, groups.width))
        up = samples > 0
        out = []
        for order in groups.order:
            part, live = samples[:, order], up[:, order]
            out.append(float(part[live].mean()) if live.any() else 0.0)
        return out

    def _moves(self, seg: _Segment, c: int) -> list[tuple[int, FindingKind]]:
        """(pool worker index, kind) of every role change from the current placement to candidate c.

        The kind is what limits the worker in the re-simulation, not a rule on the catalog: a worker that
        leaves decode was held by its KV cache (KV-bound while work was queued, most of its up windows)
        where a group that decodes in candidate c holds more KV per worker (``capacity-on-small-memory``),
        or another group that decodes in c delivers more decode tokens/s per worker than its own group
        (``decode-on-low-bandwidth``); a worker that joins decode does so in place of workers of a group
        whose measured decode is lower and that gains prefill (``prefill-on-high-bandwidth``). Anything
        else re-balances the pool (``pool-ratio-drift``).
        """
        groups = seg.groups
        if groups is None or c == seg.now:
            return []
        model = self.sim.models[seg.pool]
        target, now = seg.counts[c], groups.current
        decode_after = groups.sizes - target
        rate = self._decode_per_worker(seg, groups)
        kv = [float(model.step.kv_capacity_tokens[o[0]]) for o in groups.order]
        starved = seg.starved if seg.starved is not None else np.zeros(len(model.workers))
        up = seg.up if seg.up is not None else np.ones(len(model.workers))
        span = range(len(groups.order))
        out: list[tuple[int, FindingKind]] = []
        for g, order in enumerate(groups.order):
            delta = int(target[g] - now[g])
            if delta > 0:  # decode -> prefill
                bigger = any(kv[h] > kv[g] and decode_after[h] > 0 for h in span if h != g)
                faster = any(rate[h] > rate[g] and decode_after[h] > 0 for h in span if h != g)
                for k in order[now[g] : now[g] + delta]:
                    if bigger and starved[k] > 0.5 * up[k]:
                        out.append((k, FindingKind.CAPACITY_ON_SMALL_MEMORY))
                    elif faster:
                        out.append((k, FindingKind.DECODE_ON_LOW_BANDWIDTH))
                    else:
                        out.append((k, FindingKind.POOL_RATIO_DRIFT))
            elif delta < 0:  # prefill -> decode
                swap = any(
                    rate[h] < rate[g] and groups.sizes[h] > now[h] and target[h] > now[h]
                    for h in span
                    if h != g
                )
                kind = FindingKind.PREFILL_ON_HIGH_BANDWIDTH if swap else FindingKind.POOL_RATIO_DRIFT
                out += [(k, kind) for k in order[now[g] + delta : now[g]]]
        return out

    def _counts(self, seg: _Segment, c: int) -> list[dict[str, Any]]:
        model = self.sim.models[seg.pool]
        tally: dict[tuple[str, str, str, str], int] = {}
        for k, kind in self._moves(seg, c):
            now, to = int(seg.current[k]), int(seg.candidates[c][k])
            key = (model.workers[k].sku.key, _ROLE_NAME[now].value, _ROLE_NAME[to].value, kind.value)
            tally[key] = tally.get(key, 0) + 1
        return [
            {"sku": s, "from_role": a, "to_role": b, "kind": kind, "count": n}
            for (s, a, b, kind), n in sorted(tally.items())
        ]

    def _workers(self, seg: _Segment, c: int) -> list[dict[str, Any]]:
        model = self.sim.models[seg.pool]
        return [
            {
                "worker_id": self.sim.schedule.worker_id_in(
                    model.workers[k].index, seg.first, model.workers[k].worker_id
                ),
                "pool": model.pool.spec.pool_id,
                "kind": kind.value,
                "role": _ROLE_NAME[int(seg.current[k])].value,
                "sku": model.workers[k].sku.key,
                "recommended_role": _ROLE_NAME[int(seg.candidates[c][k])].value,
                "action": "swap-roles-in-place",
            }
            for k, kind in sorted(self._moves(seg, c), key=lambda m: model.workers[m[0]].worker_id)
        ]

    def _segment(self, seg: _Segment) -> dict[str, Any]:
        model = self.sim.models[seg.pool]
        assert seg.means is not None
        n = max(seg.windows, 1)
        current_is_best = seg.now in seg.equivalent
        lost = np.zeros(3) if current_is_best else np.maximum(seg.means[seg.top] - seg.means[seg.now], 0.0)
        delivered, offered = seg.delivered / n, seg.offered / n
        current = float(seg.means[seg.now, 0])
        shown = self._shown(seg)
        options = [[]] if current_is_best else [self._counts(seg, c) for c in seg.equivalent]
        return {
            "pool": model.pool.spec.pool_id,
            "start": self._time(seg.first),
            "end": self._time(seg.last),
            "current_placement": self._placement(model, seg.current),
            "best_placements": [self._placement(model, seg.candidates[c]) for c in seg.equivalent],
            "best_placements_tokens_per_s": [round(float(seg.means[c, 0]), 1) for c in seg.equivalent],
            "misplaced_counts": options,
            "current_is_best": current_is_best,
            "equivalence_complete": len(seg.equivalent) < len(seg.candidates) or len(seg.candidates) == 1,
            "noise_tokens_per_s": round(seg.noise, 1),
            "current_tokens_per_s": round(current, 1),
            "current_output_tokens_per_s": round(float(seg.means[seg.now, 2]), 1),
            "current_requests_per_s": round(float(seg.means[seg.now, 1]), 3),
            "best_tokens_per_s": round(float(seg.means[seg.top, 0]), 1),
            "lost_tokens_per_s": round(float(lost[0]), 1),
            "lost_output_tokens_per_s": round(float(lost[2]), 1),
            "lost_requests_per_s": round(float(lost[1]), 3),
            "offered_tokens_per_s": round(offered, 1),
            "delivered_tokens_per_s": round(delivered, 1),
            "best_delivered_tokens_per_s": round(seg.best_delivered / n, 1),
            "undelivered_tokens_per_s": round(max(seg.best_delivered / n - delivered, 0.0), 1),
            "saturated_share": round(seg.saturated_windows / n, 4),
            "demand_limited": seg.saturated_windows < 0.5 * n,
            "utilisation": round(delivered / current, 4) if current > 0 else 0.0,
            "code_share": round(seg.share / n, 4),
            "mean_prompt_tokens": round(seg.prompt / n, 1),
            "mean_output_tokens": round(seg.output / n, 1),
            "best_placement": self._placement(model, seg.candidates[shown]),
            "misplaced_workers": self._workers(seg, shown),
        }

    def report(self) -> dict[str, Any]:
        segments = [self._segment(seg) for seg in self.segments]
        totals = dict.fromkeys(
            (
                "lost_tokens_per_s",
                "lost_output_tokens_per_s",
                "lost_requests_per_s",
                "noise_tokens_per_s",
                "current_tokens_per_s",
                "best_tokens_per_s",
                "undelivered_tokens_per_s",
            ),
            0.0,
        )
        placed: dict[tuple[str, str], dict[str, Any]] = {}
        ratio_drift = []
        for i, (seg, entry) in enumerate(zip(self.segments, segments, strict=True)):
            share = seg.windows / self.n
            for key in totals:
                totals[key] += float(entry[key]) * share
            for m in entry["misplaced_workers"]:
                if m["kind"] == FindingKind.POOL_RATIO_DRIFT.value:
                    continue
                agg = placed.setdefault(
                    (m["worker_id"], m["kind"]), {**m, "segments": [], "fraction_of_time": 0.0}
                )
                agg["segments"].append(i)
                agg["fraction_of_time"] += share
            drift = FindingKind.POOL_RATIO_DRIFT.value
            if not entry["current_is_best"] and all(
                any(row["kind"] == drift for row in option) for option in entry["misplaced_counts"]
            ):
                best = seg.candidates[self._shown(seg)]
                ratio_drift.append(
                    {
                        "pool": entry["pool"],
                        "segment": i,
                        "start": entry["start"],
                        "end": entry["end"],
                        "prefill_workers_now": int((seg.current == PREFILL).sum()),
                        "prefill_workers_best": int((best == PREFILL).sum()),
                    }
                )
        layout = self.sim.layout
        window = self.sim.window_s
        horizon = self.n * window
        lost_gpus = [
            {
                "node": layout.nodes[layout.gpus[span.item].node],
                "gpu_uuid": layout.gpus[span.item].uuid,
                "worker_id": (
                    layout.workers[layout.gpus[span.item].worker].worker_id
                    if layout.gpus[span.item].worker >= 0
                    else None
                ),
                "start": rfc3339(self.sim.epoch0 + span.start_s),
                "end": None if not np.isfinite(span.end_s) else rfc3339(self.sim.epoch0 + span.end_s),
            }
            for span in self.sim.life.lost_spans
            if span.start_s < horizon
        ]
        return {
            "scenario": self.scenario.name,
            "seed": self.seed,
            "days": self.days,
            "window_s": window,
            "start": self._time(0),
            "end": self._time(self.n),
            "method": "re-simulation of the same traffic on the best placements of the same GPUs (saturated)",
            "physics": self.physics.describe(),
            "noise": f"2 x the largest std. dev. over {NOISE_SEEDS} extra seeds and {BATCHES} batch means",
            "tokens": "prompt + generated tokens of completed requests, per second",
            "lost_is": "the highest of the equivalent best placements minus the current one",
            **{key: round(value, 3 if "requests" in key else 1) for key, value in totals.items()},
            "demand_limited": all(s["demand_limited"] for s in segments),
            "segments": segments,
            "misplaced_workers": [
                {**m, "fraction_of_time": round(m["fraction_of_time"], 4)}
                for m in sorted(placed.values(), key=lambda m: (m["pool"], m["worker_id"]))
            ],
            "ratio_drift": ratio_drift,
            "pools": {
                m.pool.spec.pool_id: {
                    "name": m.pool.spec.name,
                    "workers": {w.worker_id: {"sku": w.sku.key, "role": w.role.value} for w in m.workers},
                    "saturated_hourly": self._hourly(self.saturated[p]),
                }
                for p, m in enumerate(self.sim.models)
            },
            "drift_events": [
                {
                    "pool": e.pool,
                    "start": rfc3339(self.sim.epoch0 + e.start_s),
                    "end": rfc3339(self.sim.epoch0 + e.end_s),
                    "description": e.description,
                }
                for e in drift_events(self.scenario)
                if e.start_s < horizon
            ],
            "gpu_lost": lost_gpus,
            "changes": change_report(
                self.events,
                self.segments,
                layout,
                restart_minutes=[c.restart_minutes for c in self.scenario.changes],
                placement=lambda p, roles: self._placement(self.sim.models[p], roles),
                time=self._time,
                at=lambda at_s: rfc3339(self.sim.epoch0 + at_s),
                batches=BATCHES,
            ),
        }


def compute_truth(
    scenario: Scenario,
    catalog: Catalog,
    seed: int = 0,
    days: float | None = None,
    *,
    window_s: float | None = None,
    start: datetime | None = None,
    physics: Physics | None = None,
) -> dict[str, Any]:
    """The ground truth of a scenario run (the module docstring describes the method and the schema),
    under ``physics`` (default: the model formulas), which the truth names."""
    horizon = scenario.days if days is None else days
    truth = _Truth(
        scenario,
        catalog=catalog,
        seed=seed,
        days=horizon,
        window_s=window_s,
        start=start,
        physics=physics or Physics(),
    )
    truth.observe()
    truth.resimulate()
    truth.best_under_traffic()
    return truth.report()
