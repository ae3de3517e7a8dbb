"""Calibration of the performance model on a pool's telemetry: prefill speed per busy second (from saturated
buckets where there are any), the decode step-time line from reported TPOT, saturated decode throughput,
and the KV cache the engines hold. Reasoning: docs/analyzer.md#capacity
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import CALIBRATED, CALIBRATION_ACCURACY, EfficiencyParams
from analyzer.model.kv_budget import (
    KvBudget,
)
from analyzer.model.moe import kv_bytes_per_sequence, weights_per_gpu
from analyzer.model.perf_model import Workload, default_budget, predict
from analyzer.pools.concurrency import group_cap
from analyzer.pools.decode_fit import DecodeLine, fit_decode_line
from analyzer.pools.limits import Limits, busy_share, limits
from analyzer.pools.peer_evidence import DecodePoints, PeerEvidence, PoolEvidence
from analyzer.pools.pool import Pool, SkuGroup
from analyzer.pools.reported_budgets import ReportedBudgets, peer_key, reported_median
from analyzer.pools.ttft_evidence import TtftPoints, ttft_points
from analyzer.pools.workload import PoolTraffic
from analyzer.telemetry.frames import ROLES, FloatArray
from analyzer.telemetry.grid import WorkerGrid
from analyzer.tunable import tunable
from fleet.catalog import EngineSettings
from fleet.contract import Role
from fleet.gpus import GpuSku

_PREFILL, _DECODE = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE)


@dataclass(frozen=True)
class CapacityParams:
    tpot_slo_s: float | None = tunable(
        None, "The operator's TPOT objective in seconds: decode batches are sized to meet it (null: none)."
    )
    # The pool's TTFT objective (p90, seconds), set from its latency-target rule (analyzer.pools.targets),
    # never a threshold of its own: each prefill worker is loaded only as far as its queue keeps the p90 time
    # to first token within it (None: none).
    ttft_slo_s: float | None = None
    # The KV-transfer bandwidth of a prefill worker in bytes/s (findings.kv_fabric.link_bytes_per_s, the
    # operator's PHASEFIT_ANALYZER_KV_LINK_GB_S): a disaggregated prefill worker hands off no more prompt
    # tokens than its link carries (None: not known, not bounded).
    kv_link_bytes_per_s: float | None = None
    max_decode_batch: int | None = tunable(
        None, "The engines' cap on concurrent sequences (vLLM --max-num-seqs; null: the model's own)."
    )
    min_busy: float = tunable(0.05, "Buckets busier than this share can measure a worker's prefill speed...")
    loaded_busy: float = tunable(0.3, "...and those busier than this do, where a worker has a few of them.")
    busiest_share: float = tunable(
        0.25,
        "An unsaturated worker's prefill speed is read from this share of its loaded buckets, the busiest "
        "(at least 3): speed per busy second rises with load toward capacity: they are its tightest floor.",
    )
    min_kv_usage: float = tunable(0.02, "Buckets with more KV cache in use than this measure KV capacity.")
    min_kv_sequences: int = tunable(
        4, "A decode role fits a GPU where its weights plus this many sequences' KV cache fit."
    )
    extrapolation_per_doubling: float = tunable(
        0.04, "Uncertainty added per doubling of batch beyond the largest one seen."
    )
    saturated_busy: float = tunable(
        0.9, "A prefill bucket this busy (GPU utilisation share) with a queue is saturated."
    )
    saturated_kv: float = tunable(
        0.9, "A decode bucket with this much KV cache in use and a queue is saturated."
    )
    plateau_share: float = tunable(
        0.98,
        "Running requests within this share of a worker's concurrency cap (reported, else its plateau) are "
        "at the cap: with a queue, a saturated decode bucket.",
    )
    plateau_buckets: int = tunable(
        3, "Buckets a worker must hold its running-requests peak to call it a plateau (a cap, not a peak)."
    )
    ttft_rise: float = tunable(
        2.0,
        "A prefill bucket with a queue whose median TTFT is this many times the worker's own TTFT without "
        "a queue is at its limit (TTFT rising with the queue), where busy time says nothing.",
    )
    min_saturated_buckets: int = tunable(
        2, "Saturated buckets a group needs before its measured throughput is its capacity."
    )
    measured_uncertainty: float = tunable(0.03, "Relative uncertainty of a measured capacity.")
    transfer_uncertainty: float = tunable(
        CALIBRATION_ACCURACY.heldout_ratio_p90,
        "Relative uncertainty of a capacity transferred from another SKU (the model's held-out ratio p90).",
    )
    model_uncertainty: float = tunable(
        CALIBRATION_ACCURACY.heldout_absolute_p90,
        "Relative uncertainty of a capacity from the model alone (its held-out absolute p90).",
    )
    inferred_kv_uncertainty: float = tunable(
        0.10, "Relative uncertainty of a KV budget inferred from KV in use per sequence or memory held."
    )


@dataclass(frozen=True)
class PoolCalibration:
    """What the pool's own telemetry says about the model: factors per group and pooled."""

    prefill_factor: dict[str, tuple[float, float]] = field(default_factory=dict)  # group -> (factor, spread)
    prefill_measured: dict[str, float] = field(default_factory=dict)  # group -> tokens per busy second
    prefill_saturated: set[str] = field(
        default_factory=set
    )  # groups whose factor comes from saturated buckets
    decode: dict[str, DecodeLine] = field(default_factory=dict)
    kv_bytes: dict[str, float] = field(default_factory=dict)  # group -> measured KV bytes per worker
    # group -> (generated tokens/s, prompt length, output length) of decode workers saturated (KV full with
    # a queue): their throughput is their capacity at that mix
    decode_saturated: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    kv_scale: float = 1.0  # measured KV / memory-based estimate
    mem_used: dict[str, float] = field(default_factory=dict)  # group -> median bytes per GPU
    mem_share: dict[str, float] = field(default_factory=dict)  # group -> median share of HBM in use
    pooled_prefill: float = 1.0
    pooled_decode: float = 1.0
    skus: dict[str, GpuSku] = field(default_factory=dict)  # group -> SKU, for every group of the pool
    # group -> (median tokens, relative spread) its own engines report, and the rows that report
    kv_reported: dict[str, tuple[float, float]] = field(default_factory=dict)
    kv_reporting: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # group -> (median tokens, relative spread, workers) reported by peers elsewhere in the fleet
    kv_peer: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    engines: dict[str, EngineSettings] = field(default_factory=dict)  # group -> its engine's KV rule
    # group -> (the most requests its engines run at once, where that figure comes from: "reported" by its
    # engines, "plateau" its decode workers held with work waiting, "peer" another group's of the pool)
    concurrency_cap: dict[str, tuple[float, str]] = field(default_factory=dict)
    caps_reported: dict[int, int] = field(default_factory=dict)  # grid row -> its engine's reported cap
    prefill_ttft: dict[str, TtftPoints] = field(default_factory=dict)  # group -> its prefill buckets' TTFT
    # group -> the (running, context, TPOT) points its own decode workers measured (lent to peer pools)
    decode_points: dict[str, DecodePoints] = field(default_factory=dict)
    # group -> the pools whose decode points its line was fitted on, where it had none of its own
    decode_peers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # group -> its unsaturated workers' speed over the model (a floor on its factor), and the pools whose
    # saturated prefill factor it borrowed, where it saw none saturated itself
    prefill_floor: dict[str, float] = field(default_factory=dict)
    prefill_peers: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def own_evidence(self) -> PoolEvidence:
        """What this pool measured itself, to lend to peer pools: decode points, saturated prefill factors."""
        saturated = {k: f for k, (f, _) in self.prefill_factor.items() if k in self.prefill_saturated}
        return PoolEvidence(dict(self.decode_points), saturated)

    def as_dict(self) -> dict[str, float | str | None]:
        out: dict[str, float | str | None] = {
            "pooled_prefill_factor": self.pooled_prefill,
            "pooled_decode_scale": self.pooled_decode,
            "kv_scale": self.kv_scale,
        }
        for key, (factor, _) in self.prefill_factor.items():
            out[f"prefill_factor[{key}]"] = factor
        for key, line in self.decode.items():
            out[f"decode_scale[{key}]"] = line.scale
        return out

    def params(self) -> EfficiencyParams:
        """The model's efficiencies with the compute rate the fleet's prefill workers achieve."""
        return replace(
            CALIBRATED, compute_efficiency=min(1.0, CALIBRATED.compute_efficiency * self.pooled_prefill)
        )

    def decode_params(self) -> EfficiencyParams:
        """Efficiencies for decode steps: the decode matmuls' own compute rate where the fleet's decode
        workers reached the compute-bound regime (skinny GEMMs run below prefill's rate), else prefill's."""
        fitted = [line.compute_efficiency for line in self.decode.values() if line.compute_efficiency]
        if not fitted:
            return self.params()
        return replace(CALIBRATED, compute_efficiency=float(np.median(fitted)))


def mean_context(isl: float, osl: float) -> float:
    return max(1.0, isl + osl / 2.0)


def model_prefill(d: Deployment, isl: float, osl: float, budget: KvBudget | None = None) -> float:
    workload = Workload(max(1, round(isl)), max(1, round(osl)))
    return predict(d, workload, budget=budget, with_range=False).prefill_tokens_per_s


def _model_prefill_series(
    d: Deployment, isl: FloatArray, osl: FloatArray, needed: npt.NDArray[np.bool_]
) -> FloatArray:
    """The model's prefill tokens/s at each bucket's mix (NaN where not needed or lengths unknown)."""
    out = np.full(isl.shape, np.nan)
    cache: dict[tuple[int, int], float] = {}
    for t in np.flatnonzero(needed & np.isfinite(isl) & np.isfinite(osl) & (isl >= 1)):
        key = (round(float(isl[t])), max(1, round(float(osl[t]))))
        if key not in cache:
            cache[key] = model_prefill(d, key[0], key[1])
        out[t] = cache[key]
    return out


def calibrate(
    pool: Pool,
    grid: WorkerGrid,
    traffic: PoolTraffic,
    params: CapacityParams | None = None,
    budgets: ReportedBudgets | None = None,
    peers: PeerEvidence | None = None,
) -> PoolCalibration:
    """Fit the pool's calibration from every bucket of the grid; ``budgets`` are the KV budgets the
    fleet's engines report (and each worker's engine), where known; ``peers`` what other pools measured on
    the same deployments, for groups that measured none (:mod:`analyzer.pools.peer_evidence`)."""
    p = params or CapacityParams()
    cal = PoolCalibration()  # filled in place below, then frozen into the result
    cal.skus.update({group.key: group.sku for group in pool.groups})
    if budgets is not None:
        _reported(pool, budgets, cal)
    for group in pool.groups:
        rows = np.array(group.members, dtype=np.int64)
        _memory_held(group, grid, rows, cal)
        busy = busy_share(grid, rows)
        reached = limits(grid, rows, busy, p, cal.caps_reported)
        _prefill_speed(group, grid, rows, busy, reached, traffic, p, cal)
        if group.deployment is not None:
            points = _decode_evidence(group, grid, rows, reached, traffic, p, cal)
            if points is not None:
                cal.decode_points[group.key] = points
    _peer_caps(pool, cal)
    if peers is not None:
        _peer_prefill(pool, cal, peers)
    return _pooled(pool, cal, peers)


def _peer_prefill(pool: Pool, cal: PoolCalibration, peers: PeerEvidence) -> None:
    """Groups that saw no prefill saturated take a peer deployment's saturated factor, never below the floor
    their own workers' speed sets."""
    for group in pool.groups:
        if group.key in cal.prefill_saturated or group.deployment is None:
            continue
        borrowed = peers.borrowed_prefill(pool, group)
        if borrowed is None:
            continue
        cal.prefill_peers[group.key], factor = borrowed
        floor = cal.prefill_floor.get(group.key, 0.0)
        cal.prefill_factor[group.key] = (max(factor, floor), 0.0)


def _memory_held(
    group: SkuGroup, grid: WorkerGrid, rows: npt.NDArray[np.int64], cal: PoolCalibration
) -> None:
    """The group's median memory in use, and its share of the GPU's."""
    mem = grid.mem_used_bytes[rows]
    if (~np.isnan(mem)).any():
        cal.mem_used[group.key] = float(np.nanmedian(mem))
        if group.sku.hbm_bytes:
            cal.mem_share[group.key] = cal.mem_used[group.key] / group.sku.hbm_bytes


def _prefill_speed(
    group: SkuGroup,
    grid: WorkerGrid,
    rows: npt.NDArray[np.int64],
    busy: FloatArray,
    reached: Limits,
    traffic: PoolTraffic,
    p: CapacityParams,
    cal: PoolCalibration,
) -> None:
    """Prefill: per bucket, prompt tokens per busy second over the model's prediction at that bucket's
    mix; the median over a worker's loaded buckets is robust to counter resets and gaps."""
    d = group.deployment
    prefill = (grid.role[rows] == _PREFILL) & (busy >= p.min_busy) & (grid.engine_s[rows] > 0)
    serving_prefill = (grid.role[rows] == _PREFILL) & (grid.engine_s[rows] > 0)
    cal.prefill_ttft[group.key] = ttft_points(grid, rows, serving_prefill)
    if not prefill.any():
        return
    speed_per_bucket = grid.rate(grid.prompt_tokens[rows], rows) / np.where(busy > 0, busy, np.nan)
    model = _model_prefill_series(d, traffic.isl, traffic.osl, prefill.any(axis=0)) if d is not None else None
    per_worker, factors, floors = [], [], []
    # Saturated: busy at its limit with prompts queued. Only there is a worker's speed its capacity.
    saturated = prefill & reached.prefill & reached.queued
    for i in range(len(rows)):
        at_limit = saturated[i].sum() >= p.min_saturated_buckets
        loaded = _busiest(prefill[i] & (busy[i] >= p.loaded_busy), busy[i], p.busiest_share)
        use = saturated[i] if at_limit else (loaded if loaded.sum() >= 3 else prefill[i])
        if not use.any():
            continue
        per_worker.append(float(np.nanmedian(speed_per_bucket[i][use])))
        # The model's prediction is 0 where the model does not fit the GPU (a MIG slice too small for it):
        # no factor from there.
        ratio = (
            speed_per_bucket[i][use] / np.where(model[use] > 0, model[use], np.nan)
            if model is not None
            else None
        )
        if ratio is not None and np.isfinite(ratio).any():
            factor = float(np.nanmedian(ratio))
            # An unsaturated worker's speed is a floor on its capacity (small batches, idle gaps): it may
            # show the model too slow, never too fast.
            factors.append(factor if at_limit else max(factor, 1.0))
            if at_limit:
                cal.prefill_saturated.add(group.key)
            elif math.isfinite(factor):
                floors.append(factor)
    cal.prefill_measured[group.key] = float(np.median(per_worker))
    if floors:
        cal.prefill_floor[group.key] = float(np.median(floors))
    finite = [f for f in factors if math.isfinite(f)]
    if finite:
        factor = float(np.median(finite))
        spread = float(np.median(np.abs(np.array(finite) / factor - 1.0))) if len(finite) > 1 else 0.0
        cal.prefill_factor[group.key] = (factor, spread)


def _busiest(loaded: npt.NDArray[np.bool_], busy: FloatArray, share: float) -> npt.NDArray[np.bool_]:
    """The busiest ``share`` of a worker's loaded buckets, at least 3 (all of them where there are fewer).
    Prefill batches more prompts per iteration the busier a worker is, so its speed per busy second rises
    with load toward its capacity: the median over every loaded bucket reads a few percent under it."""
    count = int(loaded.sum())
    keep = max(3, math.ceil(share * count))
    if count <= keep:
        return loaded
    threshold = np.sort(busy[loaded])[count - keep]
    busiest: npt.NDArray[np.bool_] = loaded & (busy >= threshold)
    return busiest


def _decode_evidence(
    group: SkuGroup,
    grid: WorkerGrid,
    rows: npt.NDArray[np.int64],
    reached: Limits,
    traffic: PoolTraffic,
    p: CapacityParams,
    cal: PoolCalibration,
) -> tuple[FloatArray, FloatArray, FloatArray] | None:
    """Decode: the concurrency cap, the saturated rate and the KV capacity seen, into ``cal``; the
    step-time points (running, context, TPOT) the line is fitted on (None: fewer than 3)."""
    d = group.deployment
    assert d is not None
    isl, osl = traffic.isl, traffic.osl
    context = isl + osl / 2.0
    decode = (
        (grid.role[rows] == _DECODE)
        & (grid.running[rows] >= 1)
        & ~np.isnan(grid.tpot_s[rows])
        & ~np.isnan(context)[None, :]
    )
    points = None
    if decode.sum() >= 3:
        points = (
            grid.running[rows][decode],
            np.broadcast_to(context, decode.shape)[decode],
            grid.tpot_s[rows][decode],
        )
    saturated = decode & reached.decode & reached.queued
    pinned = decode & reached.at_cap & reached.queued & ~reached.kv_full  # a cap, not a full KV cache
    _cap_of(group.key, group.members, pinned, grid, rows, cal, p)
    if saturated.sum() >= p.min_saturated_buckets:
        rate = grid.rate(grid.generation_tokens[rows], rows)[saturated]
        cal.decode_saturated[group.key] = (
            float(np.median(rate)),
            float(np.median(np.broadcast_to(isl, decode.shape)[saturated])),
            float(np.median(np.broadcast_to(osl, decode.shape)[saturated])),
        )
    occupied = decode & (grid.kv_usage[rows] >= p.min_kv_usage)
    if occupied.any():
        ctx = np.broadcast_to(context, decode.shape)[occupied]
        seqs = grid.running[rows][occupied] / grid.kv_usage[rows][occupied]
        per_seq_bytes = np.array([kv_bytes_per_sequence(d, max(1, round(c))) for c in ctx])
        cal.kv_bytes[group.key] = float(np.median(seqs * per_seq_bytes))
    return points


def _pooled(pool: Pool, cal: PoolCalibration, peers: PeerEvidence | None) -> PoolCalibration:
    """The decode lines fitted with the pooled prefill factor (on a peer pool's points where a group
    measured none), and the pool-wide factors and scales."""
    factors = [f for f, _ in cal.prefill_factor.values()]
    pooled_prefill = float(np.median(factors)) if factors else 1.0
    fleet = replace(cal, pooled_prefill=pooled_prefill).params()
    for group in pool.groups:
        if group.deployment is None:
            continue
        if group.key in cal.decode_points:
            cal.decode[group.key] = fit_decode_line(group.deployment, fleet, *cal.decode_points[group.key])
        elif peers is not None and (borrowed := peers.borrowed_decode(pool, group)) is not None:
            cal.decode_peers[group.key], points = borrowed
            cal.decode[group.key] = fit_decode_line(group.deployment, fleet, *points)
    scale = 1.0
    if cal.decode:
        weights = np.array([line.points for line in cal.decode.values()], dtype=np.float64)
        scale = float(np.average([line.scale for line in cal.decode.values()], weights=weights))
    scales = [
        cal.kv_bytes[g.key] / estimate
        for g in pool.groups
        if g.key in cal.kv_bytes and (estimate := memory_kv_bytes(g, cal.mem_used.get(g.key))) > 0
    ]
    return replace(
        cal,
        pooled_prefill=pooled_prefill,
        pooled_decode=scale,
        kv_scale=float(np.median(scales)) if scales else 1.0,
    )


def _cap_of(
    key: str,
    members: tuple[int, ...],
    pinned: npt.NDArray[np.bool_],
    grid: WorkerGrid,
    rows: npt.NDArray[np.int64],
    cal: PoolCalibration,
    p: CapacityParams,
) -> None:
    """A group's concurrency cap: what its engines report, else the running plateau its decode workers held
    with work waiting (``pinned``: per row and bucket) in ``min_saturated_buckets`` buckets or more."""
    reported = group_cap(members, cal.caps_reported)
    if reported is not None:
        cal.concurrency_cap[key] = (reported, "reported")
        return
    held = pinned.sum(axis=1) >= p.min_saturated_buckets
    if held.any():
        running = np.where(pinned[held], grid.running[rows[held]], np.nan)
        cal.concurrency_cap[key] = (float(np.nanmedian(np.nanmax(running, axis=1))), "plateau")


def _peer_caps(pool: Pool, cal: PoolCalibration) -> None:
    """Groups with no cap of their own take the one the pool's other engines report (one deployment's
    engines share their settings); a plateau is one group's observation and stays its own."""
    own = [cap for cap, source in cal.concurrency_cap.values() if source == "reported"]
    if not own:
        return
    for group in pool.groups:
        cal.concurrency_cap.setdefault(group.key, (float(np.median(own)), "peer"))


def _reported(pool: Pool, budgets: ReportedBudgets, cal: PoolCalibration) -> None:
    """The budgets the group's own engines report, else their peers' elsewhere, and each group's engine."""
    cal.caps_reported.update({row: cap for row, cap in budgets.caps.items() if row in pool.members})
    for group in pool.groups:
        settings = budgets.settings_of(group.members)
        if settings is not None:
            cal.engines[group.key] = settings
        own = reported_median(budgets.of_rows(group.members))
        if own is not None:
            cal.kv_reported[group.key] = own
            cal.kv_reporting[group.key] = tuple(r for r in group.members if r in budgets.tokens)
            continue
        key = peer_key(pool, group.deployment)
        peers = budgets.peers.get(key, ()) if key is not None else ()
        figure = reported_median(peers)
        if figure is not None:
            cal.kv_peer[group.key] = (figure[0], figure[1], len(peers))


def memory_kv_bytes(group: SkuGroup, mem_used_per_gpu: float | None) -> float:
    """KV bytes per worker from the memory the engine holds, else the model's budget."""
    d = group.deployment
    if d is None:
        return 0.0
    if mem_used_per_gpu is None or not math.isfinite(mem_used_per_gpu):
        return default_budget(d).bytes
    held = min(mem_used_per_gpu, d.hbm_bytes)
    return max(0.0, held - weights_per_gpu(d) - CALIBRATED.runtime_reserve_bytes) * d.tp
