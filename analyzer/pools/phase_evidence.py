"""What a segment's telemetry says about its phases: how the router spreads each phase's work, what each
phase delivered while at its limit, and each worker's load (which chooses the workers that move).
Reasoning: docs/analyzer.md#analysis
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from analyzer.pools.calibration import CapacityParams
from analyzer.pools.capacity import GroupCapacity
from analyzer.pools.limits import busy_share, limits
from analyzer.pools.plan_rates import Routing
from analyzer.pools.saturation import saturated_together
from analyzer.pools.worker_choice import WorkerLoad
from analyzer.telemetry.grid import WorkerGrid


def _median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else math.nan


def worker_loads(
    grid: WorkerGrid, rows: list[int], first: int, last: int, nodes: Mapping[int, str]
) -> dict[int, WorkerLoad]:
    """Per worker, medians over buckets [first, last) of its KV cache usage, requests running and waiting."""
    sl = slice(first, last)
    return {
        row: WorkerLoad(
            kv_usage=_median(grid.kv_usage[row, sl]),
            in_flight=_median(grid.running[row, sl]),
            waiting=_median(grid.waiting[row, sl]),
            node=nodes.get(row),
        )
        for row in rows
    }


def infer_routing(
    grid: WorkerGrid,
    current_roles: list[list[tuple[int, str]]],
    capacities: tuple[GroupCapacity, ...],
    first: int,
    last: int,
    *,
    load_tolerance: float = 0.05,
    speed_gap: float = 0.10,
) -> Routing:
    """Round-robin or load-aware, per phase: equal work per worker across SKU groups whose speeds differ
    means the router ignores speed. Work a decode worker receives is its prompt counter (the KV handed to
    it); a prefill worker's is its prompt tokens."""
    sl = slice(first, last)

    def equal(role: str, speed: list[float]) -> bool:
        loads, speeds = [], []
        for members, cap in zip(current_roles, speed, strict=True):
            rows = [row for row, r in members if r == role]
            if not rows or cap <= 0:
                continue
            received = grid.rate(grid.prompt_tokens[rows, sl], (rows, sl))
            if not np.isfinite(received).any() or np.nanmean(received) <= 0:
                received = grid.rate(grid.generation_tokens[rows, sl], (rows, sl))
            if not np.isfinite(received).any():
                continue
            loads.append(float(np.nanmean(received)))
            speeds.append(cap)
        if len(loads) < 2 or min(loads) <= 0:
            return False
        return (
            max(loads) / min(loads) <= 1.0 + load_tolerance and max(speeds) / min(speeds) >= 1.0 + speed_gap
        )

    return Routing(
        prefill_equal=equal("prefill", [c.prefill.tokens_per_s for c in capacities]),
        decode_equal=equal("decode", [c.decode.tokens_per_s for c in capacities]),
    )


def measured_phases(
    grid: WorkerGrid,
    current_roles: list[list[tuple[int, str]]],
    first: int,
    last: int,
    routing: Routing,
    params: CapacityParams,
    caps: Mapping[int, int] | None = None,
) -> tuple[float | None, float | None]:
    """Prompt and generated tokens/s each phase delivered while saturated (None where never seen so).

    A phase is saturated in a bucket when its workers queue work at their limit (decode: KV cache full or
    running at the engine's concurrency cap (``caps``, else the plateau) with a queue; prefill:
    ``saturated_busy`` busy with a queue): all of them under a load-aware router, any one
    under round-robin, where the slowest bounds the phase. Needs ``min_saturated_buckets`` such buckets;
    the median over them.
    """
    sl = slice(first, last)
    out: list[float | None] = []
    for role, equal in (("prefill", routing.prefill_equal), ("decode", routing.decode_equal)):
        rows = np.array([row for members in current_roles for row, r in members if r == role], dtype=np.int64)
        if rows.size == 0:
            out.append(None)
            continue
        reached = limits(grid, rows, busy_share(grid, rows), params, caps)
        if role == "decode":
            at_limit = reached.decode[:, sl]
            tokens = grid.rate(grid.generation_tokens[rows, sl], (rows, sl))
        else:
            at_limit = reached.prefill[:, sl]
            tokens = grid.rate(grid.prompt_tokens[rows, sl], (rows, sl))
        phase = saturated_together(grid, rows, sl, reached.queued[:, sl] & at_limit, any_one=equal)
        if phase.sum() < params.min_saturated_buckets:
            out.append(None)
            continue
        out.append(float(np.median(np.nansum(tokens[:, phase], axis=0))))
    return out[0], out[1]


def routing_notes(routing: Routing) -> list[str]:
    """Why a phase is bounded by its slowest worker: the router spreads its work equally."""
    equal = [n for n, eq in (("prefill", routing.prefill_equal), ("decode", routing.decode_equal)) if eq]
    if not equal:
        return []
    return [
        f"the router spreads {' and '.join(equal)} work equally over workers of unequal speed (round-robin): "
        "the slowest bounds the phase"
    ]


def measured_notes(measured: tuple[float | None, float | None], ttft_slo_s: float | None) -> list[str]:
    """A note per phase seen saturated: what its delivered throughput stands for now."""
    notes = []
    for phase, value in zip(("prefill", "decode"), measured, strict=True):
        if value is not None and phase == "prefill" and ttft_slo_s is not None:
            notes.append(
                "the prefill phase was seen saturated: under the TTFT target the current plan counts the "
                "load that meets it, not what the phase delivered while queueing"
            )
        elif value is not None:
            notes.append(
                f"the {phase} phase was seen saturated: its delivered throughput is its capacity now"
            )
    return notes
