"""The placement search of the ground truth: which workers of a disaggregated pool should run prefill.

A placement keeps every worker on its GPUs and chooses, per SKU group, how many of the group's workers
run prefill (the rest decode). Workers of a group are ordered [current prefill, current decode] (layout
order within each), so "k prefill workers" means the first k: a count per SKU reached with the fewest
role changes. Which workers of a group move is not part of the truth: it is scored by counts per (pool,
SKU, role). Candidates are screened on per-window worker capacities (the simulator's own, in each role):
a window sustains min(prefill capacity / mean prompt, decode capacity / mean output) requests/s. Every
combination is scored when there are at most ``EXHAUSTIVE_LIMIT``; beyond, a hill-climb from the
current placement. The screen only picks what to re-simulate; it ranks nothing in the truth.
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
RESIMULATED = 10  # leading candidates per segment handed to re-simulation (besides the current one)


class Groups:
    """A disaggregated pool's workers by SKU (lowest HBM bandwidth first), each ordered [current prefill,
    current decode]: "k prefill workers in this group" means its first k."""

    def __init__(self, model: PoolModel, current: IntArray) -> None:
        by_sku: dict[str, list[int]] = {}
        for k, w in enumerate(model.workers):
            by_sku.setdefault(w.sku.key, []).append(k)
        self.keys = sorted(
            by_sku, key=lambda s: (model.workers[by_sku[s][0]].sku.hbm_bandwidth_bytes_per_s or 0, s)
        )
        self.bandwidth = [model.workers[by_sku[s][0]].sku.hbm_bandwidth_bytes_per_s or 0.0 for s in self.keys]
        self.order = [
            [k for k in by_sku[s] if current[k] == PREFILL] + [k for k in by_sku[s] if current[k] != PREFILL]
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
    """Candidate prefill counts per group worth re-simulating: the ``RESIMULATED`` best by the capacity
    screen, then the current placement.

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

    def evaluate(combos: IntArray) -> FloatArray:
        p_sum = sum(cum_p[g][combos[:, g]] for g in range(len(cum_p)))
        d_sum = sum(cum_d[g][-1][None, :] - cum_d[g][combos[:, g]] for g in range(len(cum_d)))
        p_req, d_req = p_sum / means[:, 0], d_sum / means[:, 1]
        return np.asarray((np.minimum(p_req, d_req) * means.sum(axis=1)).mean(axis=1), dtype=np.float64)

    total = int(np.prod(groups.sizes + 1))
    if total <= EXHAUSTIVE_LIMIT:
        combos = np.array(list(itertools.product(*(range(n + 1) for n in groups.sizes))), dtype=np.int64)
        scores = np.concatenate([evaluate(combos[i : i + 4096]) for i in range(0, len(combos), 4096)])
    else:
        combos, scores = _local_search(groups, evaluate)
    chosen = [combos[i] for i in np.argsort(-scores, kind="stable")[:RESIMULATED]]
    chosen.append(groups.current)
    unique: dict[tuple[int, ...], IntArray] = {}
    for c in chosen:
        unique.setdefault(tuple(int(x) for x in c), np.asarray(c, dtype=np.int64))
    return list(unique.values())


def _local_search(groups: Groups, evaluate: Callable[[IntArray], FloatArray]) -> tuple[IntArray, FloatArray]:
    """Hill-climb from the current placement, one worker's role at a time (for huge fleets)."""
    seen: dict[tuple[int, ...], float] = {}
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
            for m, a in zip(fresh, evaluate(np.array(fresh)).tolist(), strict=True):
                seen[tuple(int(x) for x in m)] = a
        best = max(moves, key=lambda m: seen[tuple(int(x) for x in m)])
        if np.array_equal(best, point):
            break
        point = best
    keys = list(seen)
    return np.array(keys, dtype=np.int64), np.array([seen[k] for k in keys])
