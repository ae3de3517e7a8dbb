"""The evidence a finding carries: telemetry medians over its stretch of time and the worker's roofline point.

The roofline point is counter-derived: FLOP/s from the tokens served, bytes/s from DRAM activity.
Reasoning: docs/analyzer.md#evidence
"""

from __future__ import annotations

import math

import numpy as np

from analyzer.model.kv_budget import BudgetSource
from analyzer.pools.capacity import GroupCapacity
from analyzer.pools.pool import Pool
from analyzer.telemetry.bottleneck import BOTTLENECKS, EVIDENCE, BottleneckGrid
from analyzer.telemetry.frames import ROLES, FloatArray
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import ActivityEvidence, Bottleneck, Role
from fleet.models import decode_flops_per_token, prefill_flops

Evidence = dict[str, float | str | None]
_DECODE = ROLES.index(Role.DECODE)
_PROFILING = EVIDENCE.index(ActivityEvidence.PROFILING)
_UTILISATION = EVIDENCE.index(ActivityEvidence.UTILISATION)

# The evidence label of a verdict from the engine's own counters (KV cache, queue), not GPU activity.
ENGINE_EVIDENCE = "engine"


def evidence_label(level: ActivityEvidence | None) -> str:
    """``profiling``, ``utilisation`` or ``engine``: what a judged worker's verdict rests on."""
    return level.value if level is not None else ENGINE_EVIDENCE


# What a finding judged on busy-time counters says about its evidence (analyzer.telemetry.bottleneck).
UTILISATION_CAVEAT = (
    "judged on utilisation counters only (no DCGM_FI_PROF_* profiling fields): GPU_UTIL, "
    "GR_ENGINE_ACTIVE and MEM_COPY_UTIL say how often an engine or the memory controller was busy, not "
    "whether bandwidth or compute limited throughput; enable the profiling fields (DCGM_FI_PROF_DRAM_ACTIVE, "
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) to confirm"
)


def _rounded(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _median(values: FloatArray) -> float | None:
    finite = values[np.isfinite(values)]
    return round(float(np.median(finite)), 6) if finite.size else None


def dominant_bottleneck(bottlenecks: BottleneckGrid, worker_id: str, first: int, last: int) -> Bottleneck:
    """The stable bottleneck a worker held most over buckets [first, last) (unknown if never classified)."""
    if worker_id not in bottlenecks.workers:
        return Bottleneck.UNKNOWN
    labels = bottlenecks.stable[bottlenecks.workers.index(worker_id), first:last].astype(np.int64)
    known = labels[labels > 0]
    if not known.size:
        return Bottleneck.UNKNOWN
    return BOTTLENECKS[int(np.bincount(known).argmax())]


def activity_evidence(
    bottlenecks: BottleneckGrid, worker_id: str, first: int, last: int
) -> ActivityEvidence | None:
    """What the worker's verdicts over buckets [first, last) rest on, the most common first (a tie goes to
    the weaker): the profiling fields, busy-time counters (utilisation, the weakest), or, as None, the
    engine's own counters (a capacity verdict reads the KV cache and the queue, whatever the GPU reports;
    a worker without GPU activity), also None where nothing was classified."""
    if worker_id not in bottlenecks.workers:
        return None
    row = bottlenecks.workers.index(worker_id)
    stable = bottlenecks.stable[row, first:last]
    known = stable > 0
    gpu = known & (stable != BOTTLENECKS.index(Bottleneck.CAPACITY))
    levels = bottlenecks.evidence[row, first:last]
    profiling = int((gpu & (levels == _PROFILING)).sum())
    utilisation = int((gpu & (levels == _UTILISATION)).sum())
    engine = int(known.sum()) - profiling - utilisation
    if not known.any():
        return None
    top = max(profiling, utilisation, engine)
    if utilisation == top:
        return ActivityEvidence.UTILISATION
    if engine == top:
        return None
    return ActivityEvidence.PROFILING


def bottleneck_share(
    bottlenecks: BottleneckGrid, worker_id: str, first: int, last: int, kind: Bottleneck
) -> float:
    """Share of buckets [first, last) in which the worker's stable verdict was ``kind`` (0 where it was
    never classified: see :func:`known_bottleneck_share` for the share that says unknown)."""
    if worker_id not in bottlenecks.workers or last <= first:
        return 0.0
    labels = bottlenecks.stable[bottlenecks.workers.index(worker_id), first:last]
    return float(np.mean(labels == BOTTLENECKS.index(kind)))


def known_bottleneck_share(
    bottlenecks: BottleneckGrid, worker_id: str, first: int, last: int, kind: Bottleneck
) -> float | None:
    """:func:`bottleneck_share`, or None where the worker was never classified over [first, last) (unknown,
    not 0)."""
    if worker_id not in bottlenecks.workers or last <= first:
        return None
    labels = bottlenecks.stable[bottlenecks.workers.index(worker_id), first:last]
    if not bool((labels > 0).any()):
        return None
    return float(np.mean(labels == BOTTLENECKS.index(kind)))


def _sum(values: FloatArray) -> float | None:
    """Sum of the finite values; None where none is (never reported: unknown, not 0)."""
    finite = values[np.isfinite(values)]
    return float(finite.sum()) if finite.size else None


def worker_evidence(
    pool: Pool,
    grid: WorkerGrid,
    bottlenecks: BottleneckGrid,
    row: int,
    first: int,
    last: int,
    *,
    isl: float,
    osl: float,
) -> Evidence:
    """Medians over buckets [first, last) and the roofline point of the worker in grid row ``row``."""
    sl = slice(first, last)
    worker_id = grid.workers[row]
    prompt_rate = grid.rate(grid.prompt_tokens[row, sl], (row, sl))
    output_rate = grid.rate(grid.generation_tokens[row, sl], (row, sl))
    out: Evidence = {
        "tensor_active": _median(grid.tensor_active[row, sl]),
        "sm_active": _median(grid.sm_active[row, sl]),
        "dram_active": _median(grid.dram_active[row, sl]),
        "gpu_util": _median(grid.gpu_util[row, sl]),
        "gr_engine_active": _median(grid.gr_engine_active[row, sl]),
        "mem_copy_util": _median(grid.mem_copy_util[row, sl]),
        "kv_cache_usage": _median(grid.kv_usage[row, sl]),
        "requests_running": _median(grid.running[row, sl]),
        "requests_waiting": _median(grid.waiting[row, sl]),
        "tpot_p50_s": _median(grid.tpot_s[row, sl]),
        "ttft_p50_s": _median(grid.ttft_s[row, sl]),
        "prompt_tokens_per_s": _median(prompt_rate),
        "generation_tokens_per_s": _median(output_rate),
        "preemptions": _sum(grid.preemptions[row, sl]),
        "capacity_bound_share": _rounded(
            known_bottleneck_share(bottlenecks, worker_id, first, last, Bottleneck.CAPACITY), 4
        ),
        "bottleneck": str(dominant_bottleneck(bottlenecks, worker_id, first, last)),
    }
    level = activity_evidence(bottlenecks, worker_id, first, last)
    out["activity_evidence"] = evidence_label(level)
    if level is ActivityEvidence.UTILISATION:
        out["evidence_caveat"] = UTILISATION_CAVEAT
    out.update(roofline_point(pool, grid, row, first, last, isl=isl, osl=osl))
    return out


def roofline_point(
    pool: Pool, grid: WorkerGrid, row: int, first: int, last: int, *, isl: float, osl: float
) -> Evidence:
    """Achieved FLOP/s and HBM bytes/s per GPU, their ratio, and the SKU's ridge point."""
    if row in pool.unsized:
        return {"roofline": "unavailable: the worker's GPUs and TP degree are unknown"}
    group = pool.group_of(row)
    d = group.deployment
    if d is None or not (math.isfinite(isl) and math.isfinite(osl)) or isl < 1 or osl < 0:
        return {"roofline": "unavailable: model, SKU or lengths unknown"}
    sl = slice(first, last)
    prompt_seen = _median(grid.rate(grid.prompt_tokens[row, sl], (row, sl)))
    output_seen = _median(grid.rate(grid.generation_tokens[row, sl], (row, sl)))
    prompt, output = prompt_seen or 0.0, output_seen or 0.0
    if (grid.role[row, sl] == _DECODE).mean() > 0.5:
        prompt = 0.0  # a decode worker's prompt counter counts the KV it received, not prefill work
    context = max(1, round(isl + osl / 2))
    flops = prompt * prefill_flops(d.model, max(1, round(isl))) / max(isl, 1.0)
    flops += output * decode_flops_per_token(d.model, context)
    # Unknown (None), never 0 FLOP/s, where the engine reported neither token counter.
    per_gpu_flops = flops / d.tp if prompt_seen is not None or output_seen is not None else None
    dram = _median(grid.dram_active[row, sl])
    bytes_per_s = dram * d.hbm_bandwidth if dram is not None else None
    intensity = per_gpu_flops / bytes_per_s if bytes_per_s and per_gpu_flops is not None else None
    ridge = d.gpu.ridge_point(d.precision)
    return {
        "achieved_flops_per_s_per_gpu": round(per_gpu_flops, 1) if per_gpu_flops is not None else None,
        "hbm_bytes_per_s_per_gpu": round(bytes_per_s, 1) if bytes_per_s is not None else None,
        "arithmetic_intensity_flop_per_byte": round(intensity, 3) if intensity is not None else None,
        "ridge_point_flop_per_byte": round(ridge, 3) if ridge is not None else None,
        "peak_flops_per_s_per_gpu": d.matmul_peak_flops,
        "peak_hbm_bytes_per_s_per_gpu": d.hbm_bandwidth,
        "roofline_side": (
            None if intensity is None or ridge is None else ("compute" if intensity >= ridge else "memory")
        ),
    }


def capacity_evidence(capacity: GroupCapacity, row: int | None = None) -> Evidence:
    """What the capacities of a worker's group rest on, for a finding's evidence: the KV budget
    (``kv_budget``: "measured" where the worker's own engine reports it, "measured-on-peer" where another
    worker of the same model, precision, SKU and TP degree does, "inferred" from the group's telemetry,
    "modelled" from the engine's memory rule), its size, range and basis, and each role's capacity with
    its relative uncertainty and source."""
    out: Evidence = {}
    budget = capacity.kv_budget
    d = capacity.group.deployment
    if budget is None:
        out["kv_budget"] = "unknown"
        out["kv_budget_detail"] = "the model or the SKU lacks catalog figures"
    else:
        out.update(budget.as_evidence(d))
        if budget.source is BudgetSource.MEASURED and row is not None and row not in capacity.kv_reporting:
            out["kv_budget"] = str(BudgetSource.PEER)
            out["kv_budget_detail"] = f"this worker's engine does not report it; {budget.detail}"
    for role, c in (("prefill", capacity.prefill), ("decode", capacity.decode)):
        out[f"{role}_capacity_tokens_per_s"] = round(c.tokens_per_s, 1) if c.fits else None
        out[f"{role}_capacity_uncertainty"] = round(c.uncertainty, 4)
        out[f"{role}_capacity_source"] = c.source
    return out
