"""Workers moved to GPUs of another model within the range, and the outcome of such a move.

Within one analysis a worker keeps the GPU model its latest samples name, so a move across GPU models is
judged apart: the pool is analysed before the move with the GPUs the workers held then, and after it with
the GPUs they hold since, and the two settled segments around the move are compared as any change is
(:mod:`analyzer.pools.outcomes`). Reasoning: docs/analyzer.md#moves
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.pools.analysis import PoolAnalysis
from analyzer.pools.outcomes import OutcomeParams, change_outcome
from analyzer.pools.pool import Inventory, Pool
from analyzer.results.changes import ChangeOutcome
from analyzer.telemetry.grid import Columns


@dataclass(frozen=True)
class GpuMove:
    """A worker that ran on ``before`` GPUs until ``at`` (a bucket start, epoch seconds) and on ``after``."""

    worker_id: str
    at: float
    before: tuple[str, ...]
    after: tuple[str, ...]


def gpu_moves(gpu_buckets: Columns, workers: Sequence[str]) -> list[GpuMove]:
    """Per worker, its latest change of GPU set in the bucket rows (rows that name their worker)."""
    owners = list(gpu_buckets["worker_id"])
    uuids = list(gpu_buckets["gpu_uuid"])
    stamps = np.asarray(gpu_buckets["ts"], dtype=np.float64).tolist()
    # Only a worker that held more GPUs over the range than in some bucket can have moved: counted with
    # C-level passes, so a fleet without moves costs little.
    distinct = Counter(w for w, _ in set(zip(owners, uuids, strict=True)))
    least: dict[Any, int] = {}
    for (worker, _), n in Counter(zip(owners, stamps, strict=True)).items():
        least[worker] = min(least.get(worker, n), n)
    wanted = set(workers)
    candidates = {w for w, n in distinct.items() if w in wanted and n > least.get(w, n)}
    if not candidates:
        return []
    held: dict[str, dict[float, set[str]]] = defaultdict(lambda: defaultdict(set))
    for ts, uuid, worker in zip(stamps, uuids, owners, strict=True):
        if worker in candidates:
            held[worker][ts].add(str(uuid))
    moves = []
    for worker, by_bucket in held.items():
        sets = [by_bucket[b] for b in sorted(by_bucket)]
        starts = sorted(by_bucket)
        changes = []
        for i in range(1, len(sets)):
            if sets[i].isdisjoint(sets[i - 1]):  # a clean cut between two buckets
                changes.append((starts[i], sets[i - 1], sets[i]))
            elif i >= 2 and sets[i].isdisjoint(sets[i - 2]) and sets[i - 1] == sets[i - 2] | sets[i]:
                changes.append((starts[i - 1], sets[i - 2], sets[i]))  # one bucket held both: the move's
        if changes:
            at, before, after = changes[-1]
            moves.append(GpuMove(worker, at, tuple(sorted(before)), tuple(sorted(after))))
    return sorted(moves, key=lambda m: (m.at, m.worker_id))


def held_inventory(inventory: Inventory, held: Mapping[str, tuple[str, ...]]) -> Inventory:
    """The inventory with the named workers holding the named GPUs (and those GPUs naming them)."""
    owner = {uuid: worker for worker, uuids in held.items() for uuid in uuids}
    workers = tuple(
        dataclasses.replace(w, gpu_uuids=held[w.worker_id]) if w.worker_id in held else w
        for w in inventory.workers
    )
    gpus = tuple(
        dataclasses.replace(g, worker_id=owner[g.gpu_uuid]) if g.gpu_uuid in owner else g
        for g in inventory.gpus
    )
    return Inventory(workers, gpus)


# (inventory, start, end) -> the pool's analysis over [start, end) with that inventory (None: no such pool)
PartAnalysis = Callable[[Inventory, float, float], PoolAnalysis | None]


def move_outcomes(
    pool: Pool,
    moves: Sequence[GpuMove],
    workers: Sequence[str],
    analyse_part: PartAnalysis,
    inventory: Inventory,
    start: float,
    end: float,
    moved_sku: Callable[[GpuMove], tuple[str, str]],
    params: OutcomeParams | None = None,
) -> list[ChangeOutcome]:
    """The outcome of the latest move across GPU models among the pool's workers (moves at one bucket are
    one change: a pair of workers trading GPUs)."""
    members = {workers[row] for row in pool.members}
    across = [m for m in moves if m.worker_id in members and len(set(moved_sku(m))) == 2]
    if not across:
        return []
    at = max(m.at for m in across)
    now = [m for m in across if m.at == at]
    before = analyse_part(held_inventory(inventory, {m.worker_id: m.before for m in now}), start, at)
    after = analyse_part(held_inventory(inventory, {m.worker_id: m.after for m in now}), at, end)
    if before is None or after is None or not before.segments or not after.segments:
        return []
    skus = {m.worker_id: moved_sku(m) for m in now}
    outcome = change_outcome(before.segments, after.segments, workers, params or OutcomeParams(), skus)
    return [outcome] if outcome is not None else []
