"""The placement search of the ground truth: which workers of a disaggregated pool should run prefill.

A placement keeps every worker on its GPUs and chooses, per SKU group, how many of the group's workers
run prefill (the rest decode). Workers of a group are ordered [current prefill by id, current decode by
id], so "k prefill workers" means the first k: the fewest role changes for that count. Candidates are
screened on per-window worker capacities (the simulator's own, in each role): a window sustains
min(prefill capacity / mean prompt, decode capacity / mean output) requests/s. Every combination is
scored when there are at most ``EXHAUSTIVE_LIMIT``; beyond, a hill-climb from the current placement.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from fleetsim.pool import DECODE, PREFILL, PoolModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

EXHAUSTIVE_LIMIT = 100_000
RESIMULATED = 6  # candidates per segment handed to re-simulation (besides the current placement)
TIE = 0.0025  # placements within 0.25% sustain the same throughput (per-GPU spread, sampling)


class Groups:
    """A disaggregated pool's workers by SKU, ordered [current prefill by id, current decode by id]:
    "k prefill workers in this group" means its first k."""

    def __init__(self, model: PoolModel, current: IntArray) -> None:
        by_sku: dict[str, list[int]] = {}
        for k, w in enumerate(model.workers):
            by_sku.setdefault(w.sku.key, []).append(k)
        self.keys = sorted(
            by_sku, key=lambda s: (model.workers[by_sku[s][0]].sku.hbm_bandwidth_bytes_per_s or 0, s)
        )
        ids = [w.worker_id for w in model.workers]
        self.order = [
            sorted((k for k in by_sku[s] if current[k] == PREFILL), key=ids.__getitem__)
            + sorted((k for k in by_sku[s] if current[k] != PREFILL), key=ids.__getitem__)
            for s in self.keys
        ]
        self.current = np.array([int((current[o] == PREFILL).sum()) for o in self.order], dtype=np.int64)
        self.sizes = np.array([len(o) for o in self.order], dtype=np.int64)
        self.width = len(current)

    def roles(self, counts: Sequence[int] | IntArray) -> IntArray:
        roles = np.full(self.width, DECODE, dtype=np.int64)
        for order, k in zip(self.order, counts, strict=True):
            roles[order[:k]] = PREFILL
        return roles

    def counts(self, roles: IntArray) -> IntArray:
        return np.array([int((roles[o] == PREFILL).sum()) for o in self.order], dtype=np.int64)


def screen(prefill: FloatArray, decode: FloatArray, means: FloatArray, groups: Groups) -> list[IntArray]:
    """Candidate prefill counts per group worth re-simulating: the best by the capacity screen, the
    fewest-change ones near the best (most headroom first), and the current placement.

    ``prefill`` and ``decode`` are (windows, workers) capacities in each role (zero where a worker is
    down), ``means`` the windows' (mean prompt, mean output) lengths.
    """
    cum_p = [
        np.concatenate([np.zeros((1, len(prefill))), np.cumsum(prefill[:, o].T, axis=0)])
        for o in groups.order
    ]
    cum_d = [
        np.concatenate([np.zeros((1, len(decode))), np.cumsum(decode[:, o].T, axis=0)]) for o in groups.order
    ]

    def evaluate(combos: IntArray) -> tuple[FloatArray, FloatArray]:
        p_sum = sum(cum_p[g][combos[:, g]] for g in range(len(cum_p)))
        d_sum = sum(cum_d[g][-1][None, :] - cum_d[g][combos[:, g]] for g in range(len(cum_d)))
        p_req, d_req = p_sum / means[:, 0], d_sum / means[:, 1]
        tokens = means.sum(axis=1)
        return (np.minimum(p_req, d_req) * tokens).mean(axis=1), ((p_req + d_req) * tokens).mean(axis=1)

    total = int(np.prod(groups.sizes + 1))
    if total <= EXHAUSTIVE_LIMIT:
        combos = np.array(list(itertools.product(*(range(n + 1) for n in groups.sizes))), dtype=np.int64)
        parts = [evaluate(combos[i : i + 4096]) for i in range(0, len(combos), 4096)]
        scores = np.concatenate([p[0] for p in parts])
        headroom = np.concatenate([p[1] for p in parts])
    else:
        combos, scores, headroom = _local_search(groups, evaluate)
    chosen = [combos[i] for i in np.argsort(-scores, kind="stable")[: RESIMULATED // 2]]
    near = np.flatnonzero(scores >= scores.max() * (1.0 - 4 * TIE))
    flips = np.abs(combos[near] - groups.current).sum(axis=1)
    for i in np.lexsort((-scores[near], flips, -headroom[near]))[: RESIMULATED // 2]:
        chosen.append(combos[near[i]])
    chosen.append(groups.current)
    unique: dict[tuple[int, ...], IntArray] = {}
    for c in chosen:
        unique.setdefault(tuple(int(x) for x in c), np.asarray(c, dtype=np.int64))
    return list(unique.values())


def _local_search(
    groups: Groups, evaluate: Callable[[IntArray], tuple[FloatArray, FloatArray]]
) -> tuple[IntArray, FloatArray, FloatArray]:
    """Hill-climb from the current placement, one worker's role at a time (for huge fleets)."""
    seen: dict[tuple[int, ...], tuple[float, float]] = {}
    point = groups.current.copy()
    while True:
        moves = [point]
        for g in range(len(point)):
            for step in (-1, 1):
                nxt = point.copy()
                nxt[g] += step
                if 0 <= nxt[g] <= groups.sizes[g]:
                    moves.append(nxt)
        fresh = [m for m in moves if tuple(int(x) for x in m) not in seen]
        if fresh:
            score, room = evaluate(np.array(fresh))
            for m, a, b in zip(fresh, score.tolist(), room.tolist(), strict=True):
                seen[tuple(int(x) for x in m)] = (a, b)
        best = max(moves, key=lambda m: seen[tuple(int(x) for x in m)][0])
        if np.array_equal(best, point):
            break
        point = best
    keys = list(seen)
    values = np.array([seen[k] for k in keys])
    return np.array(keys, dtype=np.int64), values[:, 0], values[:, 1]
