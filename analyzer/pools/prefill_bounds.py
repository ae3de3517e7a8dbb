"""What bounds a prefill worker below its throughput: the operator's KV link and the pool's TTFT objective,
the latter by the queueing model or, where higher, by the load the fleet's prefill workers were seen serving
within it (:mod:`analyzer.pools.ttft_evidence`). Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from analyzer.model.deployment import Deployment
from analyzer.model.goodput import rate_meeting_ttft
from analyzer.model.perf_model import Workload, predict
from analyzer.model.roofline import kv_bytes_per_sequence as roofline_kv_bytes
from analyzer.pools.calibration import CapacityParams, PoolCalibration
from analyzer.pools.capacity_types import GroupCapacity, RoleCapacity
from analyzer.pools.pool import SkuGroup

_SAME_COMPUTE = 0.05  # peak FLOPs this close: the same compute, for prefill (H100 and H200 SXM)


def within_link(cap: RoleCapacity, d: Deployment, isl: float, p: CapacityParams) -> RoleCapacity:
    """The prefill capacity the KV link allows: a disaggregated prefill worker hands each prompt token's KV
    cache to a decode worker, so it prefills no faster than its link carries that KV (the operator's link
    figure, known: the bound's own uncertainty is the measured floor). Unchanged without a link figure."""
    if p.kv_link_bytes_per_s is None or cap.tokens_per_s <= 0 or isl <= 0:
        return cap
    per_token = roofline_kv_bytes(d, max(1, round(isl))) / max(1.0, isl)
    limit = p.kv_link_bytes_per_s / per_token if per_token > 0 else math.inf
    if cap.tokens_per_s <= limit:
        return cap
    band = min(cap.uncertainty, p.measured_uncertainty)
    return replace(
        cap,
        tokens_per_s=limit,
        uncertainty=band,
        shared=min(cap.shared, band),
        unbounded_tokens_per_s=cap.tokens_per_s,
        kv_link_bound=True,
    )


def seen_share(cal: PoolCalibration, key: str, d: Deployment, p: CapacityParams) -> tuple[float, bool] | None:
    """The share of its prefill speed a group's workers were seen serving within the TTFT objective
    (:mod:`analyzer.pools.ttft_evidence`), and whether it is the group's own: else the median share of
    the pool's groups of the same compute that have that evidence (prefill moves between SKUs of equal
    compute, as H100 and H200; a slower or faster GPU's share says nothing of this one's); None where none
    has it."""
    if p.ttft_slo_s is None:
        return None
    target = p.ttft_slo_s

    def own(group: str) -> float | None:
        points, speed = cal.prefill_ttft.get(group), cal.prefill_measured.get(group)
        load = points.load_within(target, p.min_saturated_buckets) if points is not None else None
        return min(1.0, load / speed) if load is not None and speed else None

    mine = own(key)
    if mine is not None:
        return mine, True
    flops = d.gpu.peak_flops(d.precision)

    def same_compute(group: str) -> bool:
        sku = cal.skus.get(group)
        theirs = sku.peak_flops(d.precision) if sku is not None else None
        return flops is not None and theirs is not None and math.isclose(theirs, flops, rel_tol=_SAME_COMPUTE)

    alike = [group for group in cal.prefill_ttft if same_compute(group)]
    others = [share for group in alike if (share := own(group)) is not None]
    return (float(np.median(others)), False) if others else None


def within_ttft(
    cap: RoleCapacity,
    d: Deployment,
    isl: float,
    osl: float,
    p: CapacityParams,
    seen: tuple[float, bool] | None = None,
) -> RoleCapacity:
    """The prefill capacity a TTFT objective allows: the load at which the worker's queue keeps the p90
    time to first token within it (:func:`analyzer.model.goodput.rate_meeting_ttft`), a prompt alone
    taking the model's time at this worker's calibrated speed; or, where higher, the share of its capacity
    the pool's workers were seen serving within it (``seen``: :func:`seen_share`, measured on this group
    or borrowed from another). Unchanged without an objective."""
    if p.ttft_slo_s is None or cap.tokens_per_s <= 0 or isl <= 0:
        return cap
    modelled = _modelled_within_ttft(cap, d, isl, osl, p)
    if seen is None or seen[0] * cap.tokens_per_s <= modelled.tokens_per_s:
        return modelled
    share, mine = seen
    if not mine and modelled.tokens_per_s <= 0:
        return modelled  # a prompt alone misses the target here: no other group's evidence says otherwise
    band = min(cap.uncertainty, p.measured_uncertainty) if mine else cap.uncertainty
    return replace(
        modelled,
        tokens_per_s=share * cap.tokens_per_s,
        uncertainty=band,
        shared=min(modelled.shared, band),
        ttft_seen=True,
    )


def _modelled_within_ttft(
    cap: RoleCapacity, d: Deployment, isl: float, osl: float, p: CapacityParams
) -> RoleCapacity:
    """:func:`within_ttft` by the queueing model alone."""
    assert p.ttft_slo_s is not None
    alone = predict(d, Workload(max(1, round(isl)), max(1, round(osl))), with_range=False)
    if alone.prefill_tokens_per_s <= 0:
        return cap
    target = p.ttft_slo_s

    def within(speed: float) -> float:
        """Prompt tokens/s held to the target on a worker ``speed`` times this one's prompt rate."""
        tokens = cap.tokens_per_s * speed
        idle = alone.ttft_s * alone.prefill_tokens_per_s / tokens
        return rate_meeting_ttft(idle, tokens / isl, target) * isl

    idle = alone.ttft_s * alone.prefill_tokens_per_s / cap.tokens_per_s
    central = within(1.0)
    raw = cap.unbounded_tokens_per_s or cap.tokens_per_s  # before the link or the target bounded it
    bounded = replace(cap, tokens_per_s=central, ttft_s=idle, unbounded_tokens_per_s=raw)
    if central <= 0:
        return bounded  # no load meets the target: the pool says so (analysis.ttft_unmet)
    # The bounded rate moves more than the worker's speed does: its band is the search rerun at the band's
    # ends, not the raw band carried over.
    u = cap.uncertainty
    low, high = within(max(1.0 - u, 1e-6)), within(1.0 + u)
    band = max(1.0 - low / central, high / central - 1.0, u)
    shared = cap.shared * band / u if u > 0 else cap.shared
    return replace(bounded, uncertainty=min(band, 1.0), shared=min(shared, band, 1.0))


def ttft_unmet(
    groups: Sequence[SkuGroup], capacities: Sequence[GroupCapacity], target: float | None
) -> tuple[list[str], bool]:
    """Notes for the groups on which a prompt alone already takes longer than the TTFT objective (they
    cannot prefill within it), and whether that is every group that could prefill at all."""
    if target is None:
        return [], False
    able = [
        (g, c) for g, c in zip(groups, capacities, strict=True) if (c.prefill.unbounded_tokens_per_s or 0) > 0
    ]
    unmet = [(g, c) for g, c in able if c.prefill.tokens_per_s <= 0]
    notes = [
        f"TTFT target {target * 1e3:,.0f} ms is below a prompt alone on {g.tp} x {g.sku.name} (modelled "
        f"{(c.prefill.ttft_s or math.nan) * 1e3:,.0f} ms): it cannot prefill within the target"
        for g, c in unmet
    ]
    unmodelled = [
        g
        for g, c in zip(groups, capacities, strict=True)
        if g.deployment is None and c.prefill.tokens_per_s > 0
    ]
    notes += [
        f"TTFT target not applied on {g.tp} x {g.sku.name}: the model or GPU lacks catalog figures, so its "
        "prefill figure is raw throughput"
        for g in unmodelled
    ]
    notes += [
        f"TTFT target on {g.tp} x {g.sku.name}: prefill counted at the load the pool's prefill workers were "
        f"seen serving within it ({c.prefill.tokens_per_s / (c.prefill.unbounded_tokens_per_s or 1.0):.0%} "
        "of its throughput), above the queueing model's bound"
        for g, c in able
        if c.prefill.ttft_seen
    ]
    none_can = bool(able) and len(unmet) == len(able) and not unmodelled
    if none_can:
        notes.append(
            "no worker of the pool can prefill within its TTFT target: no split meets it, so its goodput "
            "capacity and loss are unknown (relax the target or see phasefit predict --ttft-slo)"
        )
    return notes, none_can
