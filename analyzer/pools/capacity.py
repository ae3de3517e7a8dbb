"""Per-worker capacity of each SKU/TP group in each role: the performance model calibrated on fleet telemetry.

Prefill from prompt tokens per busy second, decode from the TPOT engines report, the KV budget measured,
from a peer, inferred or modelled (:func:`kv_budget_of`). Each capacity has a relative uncertainty, part of
it shared with the pool's other groups (``RoleCapacity.shared``); the KV link and a TTFT objective bound
the prefill figure (:mod:`analyzer.pools.prefill_bounds`). Reasoning: docs/analyzer.md#capacity
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from analyzer.model import uncertainty as bands
from analyzer.model import validation
from analyzer.model.deployment import Deployment
from analyzer.model.efficiency import CALIBRATED
from analyzer.model.goodput import batch_meeting_tpot
from analyzer.model.kv_budget import (
    BudgetSource,
    KvBudget,
    measured_budget,
    modelled_budget,
)
from analyzer.model.moe import kv_bytes_per_sequence, routing_experts, step_time
from analyzer.model.perf_model import default_budget
from analyzer.pools.calibration import (
    CapacityParams,
    PoolCalibration,
    mean_context,
    memory_kv_bytes,
    model_prefill,
)
from analyzer.pools.capacity_types import GroupCapacity, RoleCapacity
from analyzer.pools.pool import Pool, SkuGroup
from analyzer.pools.prefill_bounds import seen_share, ttft_unmet, within_link, within_ttft
from analyzer.pools.workload import PoolTraffic
from analyzer.telemetry.frames import ROLES
from analyzer.telemetry.grid import WorkerGrid
from fleet.contract import Role
from fleet.gpus import GpuSku

__all__ = ["GroupCapacity", "RoleCapacity", "group_capacity", "kv_budget_of", "lengths_from_kv", "ttft_unmet"]

_PREFILL, _DECODE = ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE)


def _inferred(figure: float, p: CapacityParams, detail: str) -> KvBudget:
    spread = p.inferred_kv_uncertainty
    return KvBudget(figure, figure * (1.0 - spread), figure * (1.0 + spread), BudgetSource.INFERRED, detail)


def kv_budget_of(group: SkuGroup, cal: PoolCalibration, params: CapacityParams | None = None) -> KvBudget:
    """The KV budget of one worker of the group and what it rests on (see the module docstring)."""
    p = params or CapacityParams()
    d = group.deployment
    if d is None:
        return KvBudget(0.0, 0.0, 0.0, BudgetSource.MODELLED, "model or SKU unknown: no budget")
    if group.key in cal.kv_reported:
        tokens, spread = cal.kv_reported[group.key]
        reporting = len(cal.kv_reporting.get(group.key, ()))
        budget = measured_budget(
            d, tokens, detail=f"{tokens:,.0f} tokens as {reporting} of the group's engines report them"
        )
        return _widened(budget, spread)
    if group.key in cal.kv_peer:
        tokens, spread, workers = cal.kv_peer[group.key]
        budget = measured_budget(
            d,
            tokens,
            BudgetSource.PEER,
            f"{tokens:,.0f} tokens as {workers} other worker(s) of {d.model.key} {d.precision} on "
            f"{d.tp} x {d.gpu.key} report them",
        )
        return _widened(budget, spread)
    if group.key in cal.kv_bytes:
        return _inferred(
            cal.kv_bytes[group.key], p, "inferred from KV in use per running sequence on its decode workers"
        )
    mem = cal.mem_used.get(group.key)
    what = "the memory its engines hold"
    if mem is None and cal.mem_share and group.sku.hbm_bytes:
        # A group that reports no memory: its HBM at the share the pool's engines take elsewhere.
        mem = float(np.median(list(cal.mem_share.values()))) * group.sku.hbm_bytes
        what = "the share of memory the pool's engines hold elsewhere"
    if mem is not None and math.isfinite(mem):
        figure = memory_kv_bytes(group, mem) * cal.kv_scale
        scaled = f", x {cal.kv_scale:.3g} as measured groups show" if cal.kv_scale != 1.0 else ""
        return _inferred(figure, p, f"inferred from {what} minus weights and reserve{scaled}")
    settings = cal.engines.get(group.key)
    budget = modelled_budget(d, settings, CALIBRATED) if settings is not None else default_budget(d)
    if cal.kv_scale != 1.0:
        budget = budget.scaled(cal.kv_scale, "as the pool's measured groups show")
    return budget


def _widened(budget: KvBudget, spread: float) -> KvBudget:
    """A reported budget whose reporters disagree: its range widened to their spread."""
    if spread <= 0:
        return budget
    low = min(budget.low_bytes, budget.bytes * (1.0 - min(spread, 0.99)))
    high = max(budget.high_bytes, budget.bytes * (1.0 + spread))
    return KvBudget(budget.bytes, low, high, budget.source, budget.detail, budget.assumptions)


def kv_bytes_per_worker(group: SkuGroup, cal: PoolCalibration) -> float:
    """KV cache bytes one worker of the group holds (see :func:`kv_budget_of`)."""
    return kv_budget_of(group, cal).bytes


def group_capacity(
    group: SkuGroup, cal: PoolCalibration, isl: float, osl: float, params: CapacityParams | None = None
) -> GroupCapacity:
    """Per-worker capacities of a group in both roles at mean prompt ``isl`` and output ``osl``."""
    p = params or CapacityParams()
    d = group.deployment
    if d is None:
        measured = cal.prefill_measured.get(group.key, 0.0)
        unknown = RoleCapacity(0.0, 1.0, "model", fits=False)
        prefill = RoleCapacity(measured, p.transfer_uncertainty, "measured") if measured else unknown
        return GroupCapacity(group, prefill, unknown, 0.0)
    budget = kv_budget_of(group, cal, p)
    return GroupCapacity(
        group,
        within_ttft(
            within_link(_prefill(group, d, cal, isl, osl, budget, p), d, isl, p),
            d,
            isl,
            osl,
            p,
            seen_share(cal, group.key, d, p),
        ),
        _decode(group, d, cal, isl, osl, budget, p),
        budget.bytes,
        budget,
        cal.kv_reporting.get(group.key, ()),
    )


def _prefill(
    group: SkuGroup,
    d: Deployment,
    cal: PoolCalibration,
    isl: float,
    osl: float,
    budget: KvBudget,
    p: CapacityParams,
) -> RoleCapacity:
    fits = budget.bytes >= 2 * kv_bytes_per_sequence(d, max(1, round(isl)))
    # The model's figure at the same (default) budget the calibration divided by, so the factor applies.
    model = model_prefill(d, isl, osl)
    if group.key in cal.prefill_factor:
        # The method's error (busy share, the model's shape) is common to every group it measures and to
        # the pooled factor the others borrow; a spread beyond it is this group's own.
        factor, spread = cal.prefill_factor[group.key]
        uncertainty = max(p.measured_uncertainty, spread)
        source = "measured" if group.key in cal.prefill_saturated else "calibrated"
        return RoleCapacity(
            model * factor, uncertainty, source, fits, shared=min(uncertainty, p.measured_uncertainty)
        )
    if cal.prefill_factor:
        uncertainty = _transfer_uncertainty(
            d, [cal.skus[k] for k in cal.prefill_factor if k in cal.skus], "prefill", p
        )
        # The borrowed factor's error is the measured groups'; the cross-SKU part is this group's own.
        return RoleCapacity(
            model * cal.pooled_prefill,
            uncertainty,
            "transferred",
            fits,
            shared=min(uncertainty, p.measured_uncertainty),
        )
    return RoleCapacity(model, _model_band(d, p, "prefill"), "model", fits, shared=_model_shared(p))


def _model_band(d: Deployment, p: CapacityParams, phase: str) -> float:
    """The uncalibrated model's band: its held-out absolute error (the MoE regime's where that is wider),
    widened to the error against measured kernels of this structure and phase where that is wider still
    (:mod:`analyzer.model.validation`, as ``phasefit predict`` widens it)."""
    return validation.widen(d.tp, d.is_moe, phase, _held_out_band(d, p)).band


def _held_out_band(d: Deployment, p: CapacityParams) -> float:
    """The model's held-out absolute error on published rows, the MoE regime's where that is wider."""
    return max(p.model_uncertainty, bands.band("moe")) if d.is_moe else p.model_uncertainty


def _transfer_uncertainty(d: Deployment, sources: list[GpuSku], role: str, p: CapacityParams) -> float:
    """Uncertainty of a capacity borrowed from other SKUs: it grows with how far the target's roof for the
    role is from the nearest measured SKU's (compute for prefill; bandwidth and memory for decode), from
    the measured floor to the model's held-out cross-SKU error at a 1.5x difference and beyond. Prefill
    moves between GPUs of equal compute (H100 and H200) almost exactly, as published TTFTs show."""

    def distance(source: GpuSku) -> float:
        if role == "prefill":
            target, measured = d.gpu.peak_flops(d.precision), source.peak_flops(d.precision)
            return abs(math.log(target / measured)) if target and measured else math.inf
        bandwidth = (d.gpu.hbm_bandwidth_bytes_per_s or 0.0, source.hbm_bandwidth_bytes_per_s or 0.0)
        memory = (float(d.gpu.hbm_bytes or 0), float(source.hbm_bytes or 0))
        if min(*bandwidth, *memory) <= 0:
            return math.inf
        return max(abs(math.log(bandwidth[0] / bandwidth[1])), 0.5 * abs(math.log(memory[0] / memory[1])))

    nearest = min((distance(s) for s in sources), default=math.inf)
    reach = min(1.0, nearest / math.log(1.5))
    held_out = max(p.transfer_uncertainty, bands.band("moe", "ratio")) if d.is_moe else p.transfer_uncertainty
    transfer = validation.widen(d.tp, d.is_moe, role, held_out, "ratio").band  # the kernels' ratio error
    return p.measured_uncertainty + (transfer - p.measured_uncertainty) * reach


def _model_shared(p: CapacityParams) -> float:
    """The part of the model's absolute error common to every SKU: what cancels in cross-SKU ratios."""
    return max(0.0, p.model_uncertainty - p.transfer_uncertainty)


def _decode(
    group: SkuGroup,
    d: Deployment,
    cal: PoolCalibration,
    isl: float,
    osl: float,
    budget: KvBudget,
    p: CapacityParams,
) -> RoleCapacity:
    """Generated tokens/s at the saturated batch: KV for whole sequences (prompt + output, as a scheduler
    that never evicts reserves), the engine's cap and the TPOT objective, whichever is smallest. Where
    the group's decode workers were seen saturated, their measured throughput scales to this mix."""
    kv = budget.bytes
    fits = kv >= p.min_kv_sequences * kv_bytes_per_sequence(d, max(1, round(isl + osl)))
    cap = cal.concurrency_cap.get(group.key)
    if cap is not None:  # the engines' concurrency cap, reported or seen: no batch runs beyond it
        p = replace(p, max_decode_batch=round(min(cap[0], p.max_decode_batch or math.inf)))
    line = cal.decode.get(group.key)
    scale = line.scale if line else cal.pooled_decode
    tokens, batch, tpot = _modeled_decode(d, cal, isl, osl, kv, scale, p)
    if not fits or batch < 1.0:
        return RoleCapacity(0.0, 1.0, "model", fits=False, batch=batch)
    saturated = cal.decode_saturated.get(group.key)
    if saturated is not None:
        rate, sat_isl, sat_osl = saturated
        # The measured rate is the engines' own batch's, not one a TPOT target allows: the reference is
        # the model at that batch, so a target binding at this mix lowers the figure as for a modelled one.
        engine = replace(p, tpot_slo_s=None)
        reference, _, _ = _modeled_decode(d, cal, sat_isl, sat_osl, kv, scale, engine)
        if reference > 0:
            return RoleCapacity(
                rate * tokens / reference, p.measured_uncertainty, "measured", fits, batch, tpot
            )
    seen = line.max_batch_seen if line else max((x.max_batch_seen for x in cal.decode.values()), default=0.0)
    doublings = max(0.0, math.log2(batch / max(seen, 1.0)))  # of the batch beyond the largest seen
    extrapolation = p.extrapolation_per_doubling * doublings
    # Shared with the pool's other decode groups: the fitted scale's floor (the pooled scale others borrow)
    # and the extrapolation of the same step-time model beyond the batches seen.
    shared = p.measured_uncertainty + extrapolation
    if line is not None:
        uncertainty, source = max(p.measured_uncertainty, line.residual) + extrapolation, "calibrated"
    elif cal.decode:
        sources = [cal.skus[k] for k in cal.decode if k in cal.skus]
        uncertainty, source = _transfer_uncertainty(d, sources, "decode", p) + extrapolation, "transferred"
    else:
        uncertainty, source, shared = _model_band(d, p, "decode"), "model", _model_shared(p)
    if source != "model":  # fitted or borrowed: at most the model's own held-out band
        uncertainty = min(uncertainty, _held_out_band(d, p))
    # Where the model is weakest: the budget's own range (this group's), the MoE routing band (shared).
    kv_part = _budget_part(d, cal, isl, osl, budget, scale, tokens, p)
    if source == "model":
        routing_part = _routing_part(d, cal, isl, osl, kv, scale, tokens, p)
    else:  # the fitted scale holds the routing of the batches seen: only its change beyond them is unknown
        routing_part = routing_band_beyond_seen(d, cal, mean_context(isl, osl), batch, seen)
    uncertainty = min(1.0, bands.combine(uncertainty, kv_part, routing_part))
    shared = bands.combine(shared, routing_part)
    return RoleCapacity(
        tokens, uncertainty, source, fits, batch=batch, tpot_s=tpot, shared=min(shared, uncertainty)
    )


def _budget_part(
    d: Deployment,
    cal: PoolCalibration,
    isl: float,
    osl: float,
    budget: KvBudget,
    scale: float,
    tokens: float,
    p: CapacityParams,
) -> float:
    """How far the decode capacity moves across the budget's range (relative, the wider side; 1.0 where
    the low end holds no batch)."""
    if tokens <= 0 or (budget.low_bytes >= budget.bytes and budget.high_bytes <= budget.bytes):
        return 0.0
    low, _, _ = _modeled_decode(d, cal, isl, osl, budget.low_bytes, scale, p)
    high, _, _ = _modeled_decode(d, cal, isl, osl, budget.high_bytes, scale, p)
    if low <= 0:
        return 1.0
    return max(tokens / low, high / tokens) - 1.0


def _routing_part(
    d: Deployment,
    cal: PoolCalibration,
    isl: float,
    osl: float,
    kv: float,
    scale: float,
    tokens: float,
    p: CapacityParams,
) -> float:
    """The MoE routing band: the decode capacity with tokens spread over half the experts (0 if dense)."""
    experts = routing_experts(d)
    if experts is None or tokens <= 0:
        return 0.0
    alternative, _, _ = _modeled_decode(d, cal, isl, osl, kv, scale, p, experts)
    if alternative <= 0:
        return 1.0
    return max(alternative / tokens, tokens / alternative) - 1.0


def routing_band_beyond_seen(
    d: Deployment, cal: PoolCalibration, context: float, batch: float, seen: float
) -> float:
    """The MoE routing band of a decode figure fitted on batches up to ``seen``: how much more (or less) a
    step with tokens spread over half the experts differs from uniform routing at ``batch`` than at
    ``seen``. A batch that already touches every expert at ``seen`` reads every expert's weights at any
    larger batch, and the fitted scale holds whatever routing the engines showed there, so the band is then
    near 0; a few sequences touching few experts leave much to extrapolate (0 if dense or not beyond)."""
    experts = routing_experts(d)
    if experts is None or batch <= seen or seen < 1.0:
        return 0.0
    params = cal.decode_params()

    def effect(b: float) -> float:
        uniform = step_time(d, params, decode_seqs=b, context_len=context).total_s
        return step_time(d, params, decode_seqs=b, context_len=context, experts=experts).total_s / uniform

    beyond, at_seen = effect(batch), effect(seen)
    return max(beyond / at_seen, at_seen / beyond) - 1.0


def _modeled_decode(
    d: Deployment,
    cal: PoolCalibration,
    isl: float,
    osl: float,
    kv: float,
    scale: float,
    p: CapacityParams,
    experts: float | None = None,
) -> tuple[float, float, float]:
    """(tokens/s, batch, TPOT) of the model's saturated decode worker at this mix (``experts``: the MoE
    routing spread, None for uniform routing)."""
    context = mean_context(isl, osl)
    params = cal.decode_params()

    def step(batch: float) -> float:
        return scale * step_time(d, params, decode_seqs=batch, context_len=context, experts=experts).total_s

    batch = kv / kv_bytes_per_sequence(d, max(1, round(isl + osl)))
    if p.max_decode_batch is not None:
        batch = min(batch, float(p.max_decode_batch))

    if p.tpot_slo_s is not None and batch >= 1.0:
        batch = batch_meeting_tpot(step, p.tpot_slo_s, batch)
    if batch < 1.0:
        return 0.0, batch, math.inf
    tpot = step(batch)
    return batch / tpot, batch, tpot


def lengths_from_kv(
    pool: Pool, grid: WorkerGrid, traffic: PoolTraffic, cal: PoolCalibration
) -> tuple[float, float] | None:
    """Mean prompt and output lengths when no engine counts requests: the mean context a running sequence
    holds (KV in use / running sequences) is ISL + OSL/2, and the token ratio gives ISL/OSL."""
    ratio_values = traffic.prompt_per_output
    ratio = float(np.nanmedian(ratio_values)) if (~np.isnan(ratio_values)).any() else float("nan")
    contexts = []
    for group in pool.groups:
        d = group.deployment
        if d is None:
            continue
        rows = np.array(group.members, dtype=np.int64)
        usable = (grid.running[rows] >= 1) & (grid.kv_usage[rows] >= 0.02) & (grid.role[rows] != _PREFILL)
        if not usable.any():
            continue
        kv = kv_budget_of(group, cal).bytes
        per_token = kv_bytes_per_sequence(d, 1024) / 1024
        contexts.extend((grid.kv_usage[rows][usable] * kv / per_token / grid.running[rows][usable]).tolist())
    if not contexts or not math.isfinite(ratio) or ratio <= 0:
        return None
    context = float(np.median(contexts))
    osl = context / (ratio + 0.5)
    return ratio * osl, osl
