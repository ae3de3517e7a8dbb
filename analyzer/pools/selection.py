"""Which pools one analysis covers: named pools, or one shard of them, so a fleet can be analysed in parts.

Shards balance GPUs (largest pool first, into the shard with the fewest GPUs so far, ties to the lower
index) and depend only on the inventory, so every shard of a sharded job agrees on who analyses what.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from analyzer.pools.pool import Inventory, Pool, build_pools
from fleet.catalog import Catalog

_SHARD = re.compile(r"^(\d+)/(\d+)$")


class SelectionError(ValueError):
    """A named pool is not in the range, or a shard is malformed; the message lists what exists."""


@dataclass(frozen=True)
class PoolSelection:
    pools: frozenset[str] = field(default_factory=frozenset)  # pool keys; empty: every pool
    shard: tuple[int, int] | None = None  # (index, count), index from 0

    @classmethod
    def parse(cls, pools: Sequence[str] = (), shard: str | None = None) -> PoolSelection:
        """From ``--pool`` keys and ``--shard INDEX/COUNT`` (INDEX from 0, as a Kubernetes indexed Job's)."""
        split = None
        if shard is not None:
            match = _SHARD.match(shard.strip())
            if match is None or not 0 <= int(match[1]) < int(match[2]):
                raise SelectionError(f"shard {shard!r} is not INDEX/COUNT with 0 <= INDEX < COUNT (e.g. 0/4)")
            split = (int(match[1]), int(match[2]))
        return cls(frozenset(pools), split)

    @property
    def everything(self) -> bool:
        return not self.pools and (self.shard is None or self.shard[1] == 1)

    def describe(self) -> str:
        parts = [f"pools {', '.join(sorted(self.pools))}"] if self.pools else []
        if self.shard is not None:
            parts.append(f"shard {self.shard[0]} of {self.shard[1]} (from 0)")
        return " and ".join(parts) or "every pool"


def gpus_of(pool: Pool) -> int:
    return sum(len(g.members) * g.tp for g in pool.groups) + len(pool.unsized)


def shards(pools: Sequence[Pool], count: int) -> dict[str, int]:
    """Pool key -> shard index, balancing GPUs across ``count`` shards."""
    load = [0] * count
    out: dict[str, int] = {}
    for pool in sorted(pools, key=lambda p: (-gpus_of(p), p.key)):
        index = min(range(count), key=lambda i: (load[i], i))
        out[pool.key] = index
        load[index] += gpus_of(pool)
    return out


def select(
    inventory: Inventory, catalog: Catalog, clusters: Mapping[str, str] | None, selection: PoolSelection
) -> Inventory:
    """The inventory of the selected pools: their workers and the GPUs those workers hold."""
    if selection.everything:
        return inventory
    pools = build_pools(
        inventory, {w.worker_id: i for i, w in enumerate(inventory.workers)}, catalog, clusters
    )
    keys = {p.key for p in pools}
    missing = sorted(selection.pools - keys)
    if missing:
        raise SelectionError(
            f"no pool {', '.join(missing)} in the range; pools: {', '.join(sorted(keys)) or 'none'}"
        )
    chosen = [p for p in pools if not selection.pools or p.key in selection.pools]
    if selection.shard is not None:
        index, count = selection.shard
        assigned = shards(pools, count)
        chosen = [p for p in chosen if assigned[p.key] == index]
    rows = {row for p in chosen for row in p.members}
    workers = tuple(w for i, w in enumerate(inventory.workers) if i in rows)
    ids = {w.worker_id for w in workers}
    held = {u for w in workers for u in w.gpu_uuids}
    gpus = tuple(g for g in inventory.gpus if g.worker_id in ids or g.gpu_uuid in held)
    return Inventory(workers, gpus)
