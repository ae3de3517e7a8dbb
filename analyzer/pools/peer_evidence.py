"""Evidence measured on a peer deployment: the same model, precision, SKU, TP, EP and engine serving in
another pool of the fleet.

A pool that decodes on one SKU only has no TPOT of its own on the other, and one whose prefill never queued
has only a floor on its prefill speed: its figures there rest on the model (transferred through its
cross-SKU ratio, or its prefill prediction). Where another pool of the fleet runs the very same deployment
and measured what this one lacks, that is the fleet's own evidence, and it outranks the model:

- decode: the peer's decode steps (batch, context, TPOT), on which the borrowing pool fits its own line (at
  its own calibrated efficiencies, as on its own points);
- prefill: the peer's factor over the model where its prefill workers were seen saturated, never below
  what the borrowing group's own unsaturated workers showed (their speed is a floor on their capacity).

Either way the capacity is "calibrated" and a pool note names the pools it rests on. Only a pool's own
evidence is lent: nothing is borrowed twice. Reasoning: docs/analyzer.md#peer_evidence
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from analyzer.pools.pool import Pool, SkuGroup
from analyzer.pools.reported_budgets import PeerKey, peer_key
from analyzer.telemetry.frames import FloatArray

_T = TypeVar("_T")
DecodePoints = tuple[FloatArray, FloatArray, FloatArray]  # running sequences, context tokens, TPOT seconds


@dataclass(frozen=True)
class DeploymentKey:
    """Deployments whose steps are interchangeable: the KV budget's peer key (model, precision, SKU, TP)
    and what else sets a step's time, the expert-parallel degree and the engine."""

    peer: PeerKey
    ep: int
    engine: str | None  # None where the group's workers report none


def deployment_key(pool: Pool, group: SkuGroup, engines: Mapping[int, str | None]) -> DeploymentKey | None:
    """The group's key, None where the model or SKU lacks catalog figures or its workers run different
    engines."""
    peer = peer_key(pool, group.deployment)
    named = {engines.get(row) for row in group.members}
    if peer is None or group.deployment is None or len(named) > 1:
        return None
    return DeploymentKey(peer, group.deployment.ep, named.pop() if named else None)


@dataclass(frozen=True)
class PoolEvidence:
    """What one pool measured itself, by group key: decode points, and prefill factors seen saturated."""

    decode: Mapping[str, DecodePoints]
    prefill: Mapping[str, float]


@dataclass(frozen=True)
class PeerEvidence:
    """Every pool's own evidence, by deployment key, with the pool it was measured in."""

    engines: Mapping[int, str | None] = field(default_factory=dict)  # grid row -> its worker's engine
    decode: Mapping[DeploymentKey, tuple[tuple[str, DecodePoints], ...]] = field(default_factory=dict)
    prefill: Mapping[DeploymentKey, tuple[tuple[str, float], ...]] = field(default_factory=dict)

    @classmethod
    def gather(
        cls, measured: Iterable[tuple[Pool, PoolEvidence]], engines: Mapping[int, str | None]
    ) -> PeerEvidence:
        decode: dict[DeploymentKey, list[tuple[str, DecodePoints]]] = {}
        prefill: dict[DeploymentKey, list[tuple[str, float]]] = {}
        for pool, own in measured:
            for group in pool.groups:
                key = deployment_key(pool, group, engines)
                if key is None:
                    continue
                if group.key in own.decode:
                    decode.setdefault(key, []).append((pool.key, own.decode[group.key]))
                if group.key in own.prefill:
                    prefill.setdefault(key, []).append((pool.key, own.prefill[group.key]))
        return cls(
            dict(engines),
            {k: tuple(v) for k, v in decode.items()},
            {k: tuple(v) for k, v in prefill.items()},
        )

    def _theirs(
        self, lent: Mapping[DeploymentKey, tuple[tuple[str, _T], ...]], pool: Pool, group: SkuGroup
    ) -> list[tuple[str, _T]]:
        """What pools other than ``pool`` lent on ``group``'s deployment."""
        key = deployment_key(pool, group, self.engines)
        return [(name, x) for name, x in lent.get(key, ()) if name != pool.key] if key else []

    def borrowed_decode(self, pool: Pool, group: SkuGroup) -> tuple[tuple[str, ...], DecodePoints] | None:
        """The decode points other pools measured on this group's deployment, and their keys (None: none)."""
        theirs = self._theirs(self.decode, pool, group)
        if not theirs:
            return None
        joined = tuple(np.concatenate([pts[i] for _, pts in theirs]) for i in range(3))
        return tuple(sorted({name for name, _ in theirs})), (joined[0], joined[1], joined[2])

    def borrowed_prefill(self, pool: Pool, group: SkuGroup) -> tuple[tuple[str, ...], float] | None:
        """The median prefill factor other pools saw saturated on this group's deployment, and their keys."""
        theirs = self._theirs(self.prefill, pool, group)
        if not theirs:
            return None
        return tuple(sorted({name for name, _ in theirs})), float(np.median([f for _, f in theirs]))

    def wanted(self, pool: Pool, own: PoolEvidence) -> bool:
        """Whether a group of ``pool`` lacks evidence of its own that a peer has."""
        return any(
            (g.key not in own.decode and self.borrowed_decode(pool, g) is not None)
            or (g.key not in own.prefill and self.borrowed_prefill(pool, g) is not None)
            for g in pool.groups
        )


def peer_note(group: SkuGroup, phase: str, pools: tuple[str, ...]) -> str:
    what = "TPOT" if phase == "decode" else "prefill speed seen saturated"
    return (
        f"{phase} on {group.tp} x {group.sku.name} calibrated on the {what} of the same deployment (model, "
        f"precision, SKU, TP, EP and engine) serving in {', '.join(pools)}: this pool measured none of its "
        "own there"
    )
