"""Findings the truth measures rather than plants: what the run's own records and re-simulation show.

A scenario plants a physical cause (traffic that under-uses a pool, an exporter that loses fields, a GPU
lost to Xid 79); whether the finding is due is read from what that cause produced, never from the flags
the analyzer reads, and never at the analyzer's own threshold:

- ``underutilised-pool``: the pool's time-weighted utilisation in the truth (what it delivered over what
  its current placement sustains, re-simulated saturated). Due below ``UNDERUSED_BELOW``; not due above
  ``USED_ABOVE``; in between the run is not scored for that pool (either answer is defensible around the
  product's documented 40%).
- ``telemetry-degraded``: the share of a worker's GPU samples that lack the profiling fields (SM, tensor
  and DRAM activity) in the records the run emitted. Due from ``MISSING_DUE``; not due where every
  sample has them; in between not scored.

Each fact returns (due: list of {"kind", "pool", "worker_id", "why"}, grey: set of (pool, worker_id)
left unscored).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from fleet.contract import FindingKind
from fleetsim.examine_pools import epoch

UNDERUSED_BELOW = 0.3
USED_ABOVE = 0.5
MISSING_DUE = 0.1
_PROFILING = ("sm_active", "tensor_active", "dram_active")

Due = list[dict[str, Any]]
Grey = set[tuple[str, str | None]]


def underuse(truth: Mapping[str, Any]) -> tuple[Due, Grey]:
    """Pools the truth measured under- or fully used (module docstring)."""
    span: dict[str, float] = defaultdict(float)
    used: dict[str, float] = defaultdict(float)
    for seg in truth.get("segments", []):
        length = epoch(seg["end"]) - epoch(seg["start"])
        span[seg["pool"]] += length
        used[seg["pool"]] += length * float(seg["utilisation"])
    due: Due = []
    grey: Grey = set()
    for pool, length in span.items():
        share = used[pool] / length if length > 0 else 0.0
        if share < UNDERUSED_BELOW:
            why = f"delivered {share:.0%} of what its placement sustains (re-simulated)"
            due.append(
                {"kind": FindingKind.UNDERUTILISED_POOL.value, "pool": pool, "worker_id": None, "why": why}
            )
        elif share <= USED_ABOVE:
            grey.add((pool, None))
    return due, grey


def missing_fields(gpu: Mapping[str, Any], truth: Mapping[str, Any]) -> tuple[Due, Grey]:
    """Workers whose GPU samples lacked the profiling fields (module docstring)."""
    pool_of = {w: pool for pool, info in truth.get("pools", {}).items() for w in info["workers"]}
    workers = gpu.get("worker_id") or []
    if not workers:
        return [], set()
    missing = np.ones(len(workers), dtype=bool)
    for name in _PROFILING:
        values = gpu.get(name) or [None] * len(workers)
        missing &= np.array([v is None for v in values], dtype=bool)
    total: dict[str, int] = defaultdict(int)
    lacking: dict[str, int] = defaultdict(int)
    for worker, miss in zip(workers, missing.tolist(), strict=True):
        if worker is not None:
            total[worker] += 1
            lacking[worker] += miss
    due: Due = []
    grey: Grey = set()
    for worker, n in total.items():
        share = lacking[worker] / n
        pool = pool_of.get(worker, "")
        if share >= MISSING_DUE:
            why = f"{share:.0%} of its GPU samples lack SM, tensor and DRAM activity"
            due.append(
                {"kind": FindingKind.TELEMETRY_DEGRADED.value, "pool": pool, "worker_id": worker, "why": why}
            )
        elif share > 0:
            grey.add((pool, worker))
    return due, grey
