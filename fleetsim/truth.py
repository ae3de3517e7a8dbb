"""Ground truth by re-simulation: the best placement of the same GPUs for the same traffic, and its gain.

Method. For each pool and each time segment (segments split at the scenario's mix drifts), the same
traffic (same seed, same arrivals, same restarts and lost GPUs) is run through this simulator with the
pool's prefill/decode roles re-assigned. A candidate placement keeps every worker on its GPUs (same TP
groups, same SKU counts) and chooses, per SKU, how many of that SKU's workers run prefill. Candidates
are screened on the simulator's own per-window worker capacities (every combination, or a local search
on very large fleets), then the leaders are re-simulated in saturated mode ("unlimited request rate":
the pool always has work, as the published benchmarks run) and the best is taken. If the current
placement sustains within ``TOLERANCE`` (1%) of the best, it is the best: nothing is misplaced unless
moving it matters. Placements within ``TIE`` (0.25%) of each other sustain the same throughput; among
them the one with the most spare stage capacity wins (decode on the higher-bandwidth GPUs even where
prefill is the binding stage), then the one with the fewest role changes. Colocated pools keep their
"mixed" roles.

Throughput is tokens/s of completed requests (prompt + generated tokens). Lost tokens/s = best -
current, both saturated. When the pool is demand-limited (the current placement serves what arrives)
that loss is idle capacity, not undelivered tokens: ``demand_limited`` says so, and
``undelivered_tokens_per_s`` (actual traffic re-simulated on both placements) is then about zero.

Schema (JSON)::

    {"scenario", "seed", "days", "window_s", "start", "end", "method", "tolerance",
     "tokens": "prompt + generated tokens of completed requests, per second",
     "lost_tokens_per_s": time-weighted over the horizon, summed over pools,
     "undelivered_tokens_per_s": likewise, under the actual traffic,
     "demand_limited": true when every segment is,
     "segments": [{"pool", "start", "end", "current_tokens_per_s", "best_tokens_per_s",
                   "lost_tokens_per_s", "offered_tokens_per_s", "delivered_tokens_per_s",
                   "best_delivered_tokens_per_s", "undelivered_tokens_per_s", "demand_limited",
                   "utilisation", "code_share", "mean_prompt_tokens", "mean_output_tokens",
                   "current_placement": {sku: {role: n_workers}}, "best_placement": {...},
                   "misplaced_workers": [worker entries, below]}],
     "misplaced_workers": [{"worker_id", "pool", "kind", "role", "sku", "recommended_role",
                            "action", "segments": [indices], "fraction_of_time"}]
                          (kinds other than pool-ratio-drift, over all segments),
     "ratio_drift": [{"pool", "segment", "start", "prefill_workers_now", "prefill_workers_best"}],
     "drift_events": [{"pool", "start", "end", "description"}],
     "gpu_lost": [{"node", "gpu_uuid", "worker_id", "start", "end"}]}

Worker entry kinds (fleet.contract.FindingKind): decode -> prefill on a SKU whose higher-bandwidth
peers decode in the best plan: ``decode-on-low-bandwidth``, or ``capacity-on-small-memory`` when the
worker was KV-bound and saturated in at least a quarter of the segment; prefill -> decode on a SKU
while lower-bandwidth GPUs decode now and prefill in the best plan: ``prefill-on-high-bandwidth``;
any other role change only re-balances the pool: ``pool-ratio-drift``.
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

from fleetsim.fleet_sim import FleetSimulation, PoolChunk, rfc3339
from fleetsim.life import drift_events
from fleetsim.placement import TIE, Groups, screen
from fleetsim.pool import DECODE, MIXED, PREFILL, PoolModel, QueueState
from fleetsim.scenario import Scenario
from fleet.catalog import Catalog
from fleet.contract import FindingKind, Role

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")

TOLERANCE = 0.01
CAPACITY_KIND_SHARE = 0.25
_SEARCH_WINDOWS = 720  # windows per segment the screening uses (evenly spaced)
_ROLE_NAME = {PREFILL: Role.PREFILL, DECODE: Role.DECODE, MIXED: Role.MIXED}


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
    # Filled by the passes:
    sample_windows: list[int] = field(default_factory=list)
    sample_prefill: list[FloatArray] = field(default_factory=list)  # (K,) per sampled window
    sample_decode: list[FloatArray] = field(default_factory=list)
    sample_mean: list[tuple[float, float]] = field(default_factory=list)
    starved: FloatArray | None = None  # windows KV-bound and saturated, per worker
    offered: float = 0.0
    delivered: float = 0.0
    share: float = 0.0
    prompt: float = 0.0
    output: float = 0.0
    candidates: list[IntArray] = field(default_factory=list)
    saturated: dict[int, float] = field(default_factory=dict)  # candidate index -> tokens summed
    headroom: dict[int, float] = field(default_factory=dict)  # candidate -> stage capacities summed
    current_saturated: float = 0.0
    best_saturated: float = 0.0
    best: IntArray | None = None
    best_delivered: float = 0.0

    @property
    def windows(self) -> int:
        return self.last - self.first


def _headroom(piece: PoolChunk, roles: IntArray) -> float:
    """Requests/s each stage could sustain, summed over the stages and the windows (tie-breaker)."""
    mix = piece.traffic.mix
    tokens = mix.mean_prompt + mix.mean_output
    caps, up = piece.capacities, piece.up
    prefill = (caps.prefill * up * (roles == PREFILL)).sum(axis=1) / mix.mean_prompt
    decode = (caps.decode * up * (roles == DECODE)).sum(axis=1) / mix.mean_output
    return float(((prefill + decode) * tokens).sum())


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
    ) -> None:
        self.sim = FleetSimulation(scenario, catalog, seed, window_s=window_s, start=start)
        self.scenario = scenario
        self.seed = seed
        self.days = days
        self.n = self.sim.windows_in(days)
        self.segments = self._segments()
        self.groups = {p: Groups(m, m.roles) for p, m in enumerate(self.sim.models) if not m.colocated}

    def _segments(self) -> list[_Segment]:
        out = []
        for p, model in enumerate(self.sim.models):
            cuts = {0, self.n}
            for drift in model.pool.spec.drift:
                for hours in (drift.at_hour, drift.at_hour + drift.ramp_hours):
                    w = round(hours * 3600.0 / self.sim.window_s)
                    if 0 < w < self.n:
                        cuts.add(w)
            edges = sorted(cuts)
            out += [_Segment(p, a, b, model.roles.copy()) for a, b in itertools.pairwise(edges)]
        return out

    def _pieces(self) -> Iterator[tuple[int, list[PoolChunk]]]:
        sim = self.sim
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
        for first, pieces in self._pieces():
            for p, (model, pc) in enumerate(zip(self.sim.models, pieces, strict=True)):
                flow = model.flow(pc.traffic, pc.capacities, pc.up, states[p], window_s=window)
                mix = pc.traffic.mix
                for seg, sl in self._overlaps(p, first, len(pc.up)):
                    starved = (flow.kv_bound & flow.saturated)[sl].sum(axis=0)
                    seg.starved = starved if seg.starved is None else seg.starved + starved
                    seg.offered += float(flow.offered_tokens[sl].sum())
                    seg.delivered += float(flow.delivered_tokens[sl].sum())
                    seg.share += float(pc.traffic.share[sl].sum())
                    seg.prompt += float(mix.mean_prompt[sl].sum())
                    seg.output += float(mix.mean_output[sl].sum())
                    stride = max(1, seg.windows // _SEARCH_WINDOWS)
                    rows = np.arange(sl.start, sl.stop)
                    rows = rows[(first + rows - seg.first) % stride == 0]
                    seg.sample_prefill += list(pc.capacities.prefill[rows] * pc.up[rows])
                    seg.sample_decode += list(pc.capacities.decode[rows] * pc.up[rows])
                    seg.sample_mean += list(
                        zip(mix.mean_prompt[rows].tolist(), mix.mean_output[rows].tolist(), strict=True)
                    )

    def resimulate(self) -> None:
        """Pass 2: saturated re-simulation of each segment's leading candidates (and the current one)."""
        for seg in self.segments:
            groups = self.groups.get(seg.pool)
            if groups is None:
                seg.candidates = [np.zeros(0, dtype=np.int64)]
                continue
            seg.candidates = screen(
                np.array(seg.sample_prefill), np.array(seg.sample_decode), np.array(seg.sample_mean), groups
            )
        states = {id(seg): [QueueState() for _ in seg.candidates] for seg in self.segments}
        window = self.sim.window_s
        for first, pieces in self._pieces():
            for p, (model, pc) in enumerate(zip(self.sim.models, pieces, strict=True)):
                for seg, sl in self._overlaps(p, first, len(pc.up)):
                    piece = _slice(pc, sl)
                    groups = self.groups.get(p)
                    for c, counts in enumerate(seg.candidates):
                        roles = groups.roles(counts) if groups else model.roles
                        state = states[id(seg)][c]
                        flow = model.flow(
                            piece.traffic,
                            piece.capacities,
                            piece.up,
                            state,
                            window_s=window,
                            saturated=True,
                            roles=roles,
                        )
                        seg.saturated[c] = seg.saturated.get(c, 0.0) + float(flow.delivered_tokens.sum())
                        seg.headroom[c] = seg.headroom.get(c, 0.0) + _headroom(piece, roles)
        for seg in self.segments:
            groups = self.groups.get(seg.pool)
            scores = np.array([seg.saturated[c] for c in range(len(seg.candidates))])
            if groups is None:
                seg.best = self.sim.models[seg.pool].roles.copy()
                seg.current_saturated = seg.best_saturated = float(scores[0])
                continue
            current = next(
                c for c, counts in enumerate(seg.candidates) if np.array_equal(counts, groups.current)
            )
            room = np.array([seg.headroom[c] for c in range(len(seg.candidates))])
            if scores[current] >= scores.max() * (1.0 - TOLERANCE):
                pick = current  # within tolerance of the best: nothing worth moving
            else:
                ties = np.flatnonzero(scores >= scores.max() * (1.0 - TIE))
                flips = [int(np.abs(seg.candidates[c] - groups.current).sum()) for c in ties]
                # Equal throughput: the most spare capacity, then the fewest role changes.
                pick = int(min(zip((-room[ties]).tolist(), flips, ties.tolist(), strict=True))[2])
            seg.best = groups.roles(seg.candidates[pick])
            seg.current_saturated = float(scores[current])
            seg.best_saturated = float(scores[pick])

    def best_under_traffic(self) -> None:
        """Pass 3: the actual traffic on the best plan of each segment, queues carried across segments."""
        states = [QueueState() for _ in self.sim.models]
        window = self.sim.window_s
        for first, pieces in self._pieces():
            for p, (model, pc) in enumerate(zip(self.sim.models, pieces, strict=True)):
                for seg, sl in self._overlaps(p, first, len(pc.up)):
                    piece = _slice(pc, sl)
                    flow = model.flow(
                        piece.traffic, piece.capacities, piece.up, states[p], window_s=window, roles=seg.best
                    )
                    seg.best_delivered += float(flow.delivered_tokens.sum())

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

    def _misplaced(self, seg: _Segment) -> list[dict[str, Any]]:
        model = self.sim.models[seg.pool]
        assert seg.best is not None
        bandwidth = [w.sku.hbm_bandwidth_bytes_per_s or 0.0 for w in model.workers]
        decode_best = [bandwidth[k] for k in range(len(bandwidth)) if seg.best[k] == DECODE]
        prefill_best = [bandwidth[k] for k in range(len(bandwidth)) if seg.best[k] == PREFILL]
        decode_now = [bandwidth[k] for k in range(len(bandwidth)) if seg.current[k] == DECODE]
        starved = seg.starved if seg.starved is not None else np.zeros(len(bandwidth))
        out = []
        for k, worker in enumerate(model.workers):
            now, best = int(seg.current[k]), int(seg.best[k])
            if now == best:
                continue
            bw = bandwidth[k]
            kind = FindingKind.POOL_RATIO_DRIFT
            if now == DECODE and any(b > bw for b in decode_best):
                starved_share = float(starved[k]) / max(seg.windows, 1)
                kind = (
                    FindingKind.CAPACITY_ON_SMALL_MEMORY
                    if starved_share >= CAPACITY_KIND_SHARE
                    else FindingKind.DECODE_ON_LOW_BANDWIDTH
                )
            elif now == PREFILL and any(b < bw for b in prefill_best) and any(b < bw for b in decode_now):
                kind = FindingKind.PREFILL_ON_HIGH_BANDWIDTH
            out.append(
                {
                    "worker_id": worker.worker_id,
                    "pool": model.pool.spec.pool_id,
                    "kind": kind.value,
                    "role": _ROLE_NAME[now].value,
                    "sku": worker.sku.key,
                    "recommended_role": _ROLE_NAME[best].value,
                    "action": "swap-roles-in-place",
                }
            )
        return out

    def report(self) -> dict[str, Any]:
        segments = []
        window = self.sim.window_s
        horizon = self.n * window
        lost_total = undelivered_total = 0.0
        placed: dict[tuple[str, str], dict[str, Any]] = {}
        ratio_drift = []
        for i, seg in enumerate(self.segments):
            model = self.sim.models[seg.pool]
            assert seg.best is not None
            n = max(seg.windows, 1)
            current, best = seg.current_saturated / n, seg.best_saturated / n
            delivered, offered = seg.delivered / n, seg.offered / n
            best_delivered = seg.best_delivered / n
            misplaced = self._misplaced(seg)
            demand_limited = delivered >= 0.98 * offered
            entry = {
                "pool": model.pool.spec.pool_id,
                "start": self._time(seg.first),
                "end": self._time(seg.last),
                "current_tokens_per_s": round(current, 1),
                "best_tokens_per_s": round(best, 1),
                "lost_tokens_per_s": round(max(best - current, 0.0), 1),
                "offered_tokens_per_s": round(offered, 1),
                "delivered_tokens_per_s": round(delivered, 1),
                "best_delivered_tokens_per_s": round(best_delivered, 1),
                "undelivered_tokens_per_s": round(max(best_delivered - delivered, 0.0), 1),
                "demand_limited": demand_limited,
                "utilisation": round(delivered / current, 4) if current > 0 else 0.0,
                "code_share": round(seg.share / n, 4),
                "mean_prompt_tokens": round(seg.prompt / n, 1),
                "mean_output_tokens": round(seg.output / n, 1),
                "current_placement": self._placement(model, seg.current),
                "best_placement": self._placement(model, seg.best),
                "misplaced_workers": misplaced,
            }
            segments.append(entry)
            share = seg.windows * window / horizon
            lost_total += max(best - current, 0.0) * share
            undelivered_total += max(best_delivered - delivered, 0.0) * share
            for m in misplaced:
                if m["kind"] == FindingKind.POOL_RATIO_DRIFT.value:
                    continue
                key = (m["worker_id"], m["kind"])
                agg = placed.setdefault(key, {**m, "segments": [], "fraction_of_time": 0.0})
                agg["segments"].append(i)
                agg["fraction_of_time"] += share
            now_prefill = int((seg.current == PREFILL).sum())
            best_prefill = int((seg.best == PREFILL).sum())
            if now_prefill != best_prefill and not model.colocated:
                ratio_drift.append(
                    {
                        "pool": model.pool.spec.pool_id,
                        "segment": i,
                        "start": entry["start"],
                        "prefill_workers_now": now_prefill,
                        "prefill_workers_best": best_prefill,
                    }
                )
        layout = self.sim.layout
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
            "method": "re-simulation of the same traffic on the best placement of the same GPUs (saturated)",
            "tolerance": TOLERANCE,
            "tokens": "prompt + generated tokens of completed requests, per second",
            "lost_tokens_per_s": round(lost_total, 1),
            "undelivered_tokens_per_s": round(undelivered_total, 1),
            "demand_limited": all(s["demand_limited"] for s in segments),
            "segments": segments,
            "misplaced_workers": [
                {**m, "fraction_of_time": round(m["fraction_of_time"], 4)}
                for m in sorted(placed.values(), key=lambda m: (m["pool"], m["worker_id"]))
            ],
            "ratio_drift": ratio_drift,
            "drift_events": [
                {
                    "pool": e.pool,
                    "start": rfc3339(self.sim.epoch0 + e.start_s),
                    "end": rfc3339(self.sim.epoch0 + e.end_s),
                    "description": e.description,
                }
                for e in drift_events(self.scenario)
                if e.start_s < self.n * window
            ],
            "gpu_lost": lost_gpus,
        }


def compute_truth(
    scenario: Scenario,
    catalog: Catalog,
    seed: int = 0,
    days: float | None = None,
    *,
    window_s: float | None = None,
    start: datetime | None = None,
) -> dict[str, Any]:
    """The ground truth of a scenario run (the module docstring describes the method and the schema)."""
    horizon = scenario.days if days is None else days
    truth = _Truth(scenario, catalog=catalog, seed=seed, days=horizon, window_s=window_s, start=start)
    truth.observe()
    truth.resimulate()
    truth.best_under_traffic()
    return truth.report()
