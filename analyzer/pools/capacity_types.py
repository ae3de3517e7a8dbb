"""What a capacity is: one worker's throughput in a role with its uncertainty and source, and a group's in
both roles. Reasoning: docs/analyzer.md#capacity
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.model.kv_budget import KvBudget
from analyzer.pools.pool import SkuGroup


@dataclass(frozen=True)
class RoleCapacity:
    """One worker's saturated throughput in a role: prompt tokens/s (prefill) or generated tokens/s
    (decode), with a relative uncertainty and where the figure came from."""

    tokens_per_s: float
    uncertainty: float
    # "measured" (a saturated worker's delivered throughput), "calibrated" (the model fitted to this group's
    # unsaturated telemetry), "transferred" (another group's calibration) or "model"
    source: str
    fits: bool = True
    batch: float | None = None  # decode: the saturated batch
    tpot_s: float | None = None
    ttft_s: float | None = None  # prefill under a TTFT objective: a prompt alone (the queue's floor)
    unbounded_tokens_per_s: float | None = None  # prefill: before the KV link or a TTFT objective bounded it
    kv_link_bound: bool = False  # prefill: held to what the worker's KV link carries
    ttft_seen: bool = False  # prefill under a TTFT objective: the load its workers served within it
    # The part of ``uncertainty`` the pool's other groups share in this role (the calibration they borrow,
    # the same model extrapolated to larger batches); the rest is this group's alone.
    shared: float = 0.0

    @property
    def correlation(self) -> float:
        """Share of the uncertainty common to the pool's groups: two groups' errors in this role correlate
        by the product of their shares."""
        return min(1.0, max(0.0, self.shared / self.uncertainty)) if self.uncertainty > 0 else 0.0

    @property
    def low(self) -> float:
        return self.tokens_per_s * max(0.0, 1.0 - self.uncertainty)

    @property
    def high(self) -> float:
        return self.tokens_per_s * (1.0 + self.uncertainty)


@dataclass(frozen=True)
class GroupCapacity:
    group: SkuGroup
    prefill: RoleCapacity
    decode: RoleCapacity
    kv_bytes: float  # KV cache per worker (bytes)
    kv_budget: KvBudget | None = None  # what ``kv_bytes`` rests on (None where the model is unknown)
    # Grid rows of the group's workers whose own engines report their budget: the others' figure is their
    # peers' (see analyzer.findings.evidence.capacity_evidence).
    kv_reporting: tuple[int, ...] = ()
