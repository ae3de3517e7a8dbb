"""Decode steps measured on a peer deployment: the same model, precision, SKU, TP, EP and engine serving in
another pool of the fleet.

A pool whose decode runs on one SKU only has no TPOT of its own for the other: the figure it would have
there is transferred from its own SKU through the model's cross-SKU ratio. Where another pool of the fleet
runs the very same deployment on that SKU, its workers' decode steps (batch, context, TPOT) are the fleet's
own evidence of it, and they outrank the model's ratio. The borrowing pool fits its own decode line on them
(at its own calibrated efficiencies, as on its own points), so the capacity is "calibrated", and a note
names the pools it rests on. Only a pool's own points are lent: nothing is borrowed twice.
Reasoning: docs/analyzer.md#peer_decode
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from analyzer.pools.pool import Pool, SkuGroup
from analyzer.telemetry.frames import FloatArray

DecodePoints = tuple[FloatArray, FloatArray, FloatArray]  # running sequences, context tokens, TPOT seconds


@dataclass(frozen=True)
class DecodePeerKey:
    """Deployments whose decode steps are interchangeable: everything that sets a step's time."""

    model: str
    precision: str
    sku: str
    tp: int
    ep: int
    engine: str | None  # None where the group's workers report none (or disagree)


def decode_peer_key(pool: Pool, group: SkuGroup, engines: Mapping[int, str | None]) -> DecodePeerKey | None:
    """The group's key, None where the model or SKU lacks catalog figures or its workers run different
    engines."""
    d = group.deployment
    if d is None or pool.precision is None:
        return None
    named = {engines.get(row) for row in group.members}
    if len(named) > 1:
        return None
    return DecodePeerKey(d.model.key, str(d.precision), d.gpu.key, d.tp, d.ep, named.pop() if named else None)


@dataclass(frozen=True)
class DecodePeers:
    """Every pool's own decode points, by peer key, with the pool they were measured in."""

    engines: Mapping[int, str | None] = field(default_factory=dict)  # grid row -> its worker's engine
    lent: Mapping[DecodePeerKey, tuple[tuple[str, DecodePoints], ...]] = field(default_factory=dict)

    @classmethod
    def gather(
        cls, measured: Iterable[tuple[Pool, Mapping[str, DecodePoints]]], engines: Mapping[int, str | None]
    ) -> DecodePeers:
        """From each pool and its groups' own decode points (group key -> points)."""
        lent: dict[DecodePeerKey, list[tuple[str, DecodePoints]]] = {}
        for pool, points in measured:
            for group in pool.groups:
                key = decode_peer_key(pool, group, engines)
                if key is not None and group.key in points:
                    lent.setdefault(key, []).append((pool.key, points[group.key]))
        return cls(dict(engines), {k: tuple(v) for k, v in lent.items()})

    def borrowed(self, pool: Pool, group: SkuGroup) -> tuple[tuple[str, ...], DecodePoints] | None:
        """The decode points other pools measured on this group's deployment, and those pools' keys; None
        where none did."""
        key = decode_peer_key(pool, group, self.engines)
        theirs = [(name, pts) for name, pts in self.lent.get(key, ()) if name != pool.key] if key else []
        if not theirs:
            return None
        names = tuple(sorted({name for name, _ in theirs}))
        joined = tuple(np.concatenate([pts[i] for _, pts in theirs]) for i in range(3))
        return names, (joined[0], joined[1], joined[2])

    def wanted(self, pool: Pool, own: Mapping[str, DecodePoints]) -> bool:
        """Whether a group of ``pool`` without decode points of its own has a peer's to borrow."""
        return any(g.key not in own and self.borrowed(pool, g) is not None for g in pool.groups)


def peer_note(group: SkuGroup, pools: tuple[str, ...]) -> str:
    return (
        f"decode on {group.tp} x {group.sku.name} calibrated on the TPOT of the same deployment (model, "
        f"precision, SKU, TP, EP and engine) serving in {', '.join(pools)}: this pool measured no decode "
        "steps of its own there"
    )
