"""What-if: a pool's best placement on a hypothetical GPU set, at the traffic it was observed serving.

Pure: adds or removes workers in the pool's SKU/TP groups and re-solves the split with
:func:`analyzer.pools.plan_choice.choose_plan`. Refusals are :class:`WhatIfError`.
Reasoning: docs/analyzer.md#what_if
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from analyzer.model.deployment import Deployment, DeploymentError, default_kv_precision
from analyzer.planning.plan import Figure, Gain, gain_from_tokens
from analyzer.pools.analysis import PoolAnalysis
from analyzer.pools.calibration import CapacityParams
from analyzer.pools.capacity import GroupCapacity, group_capacity
from analyzer.pools.plan_choice import choose_plan
from analyzer.pools.plan_rates import capacity_draws, draw_rates, evaluate
from analyzer.pools.pool import SkuGroup
from analyzer.pools.split_search import DECISION_SEED, weekly_cost_usd
from fleet.gpus import GpuCatalog, GpuSku

_LOW, _HIGH = 0.1, 0.9  # the range: 10th and 90th percentiles of the capacity draws, as placement reports


class WhatIfError(ValueError):
    """A what-if the analyzer cannot evaluate; the message says why (the CLI exits 2 with it)."""


@dataclass(frozen=True)
class GpuChange:
    op: Literal["add", "remove"]
    sku: str  # catalog key
    gpus: int

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "sku": self.sku, "gpus": self.gpus}


def _count(text: str, option: str, spec: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise WhatIfError(f"{option} {spec!r}: {text!r} is not a whole number of GPUs") from None
    if value <= 0:
        raise WhatIfError(f"{option} {spec!r}: the GPU count must be positive, got {value}")
    return value


def parse_changes(
    add: Sequence[str] = (), remove: Sequence[str] = (), replace: Sequence[str] = ()
) -> tuple[GpuChange, ...]:
    """``--add SKU:N``, ``--remove SKU:N`` and ``--replace FROM:TO:N`` (a removal of N GPUs of FROM and an
    addition of N of TO), in that order: removals first, then additions."""
    removals: list[GpuChange] = []
    additions: list[GpuChange] = []
    for option, specs, parts in (("--add", add, 2), ("--remove", remove, 2), ("--replace", replace, 3)):
        for spec in specs:
            fields = spec.rsplit(":", parts - 1)
            if len(fields) != parts or not all(f.strip() for f in fields):
                shape = "FROM_SKU:TO_SKU:GPUS" if parts == 3 else "SKU:GPUS"
                raise WhatIfError(f"{option} {spec!r}: expected {shape} (e.g. H200-SXM:8)")
            n = _count(fields[-1], option, spec)
            if option == "--add":
                additions.append(GpuChange("add", fields[0].strip(), n))
            elif option == "--remove":
                removals.append(GpuChange("remove", fields[0].strip(), n))
            else:
                removals.append(GpuChange("remove", fields[0].strip(), n))
                additions.append(GpuChange("add", fields[1].strip(), n))
    return (*removals, *additions)


def resolve_skus(changes: Sequence[GpuChange], gpus: GpuCatalog) -> dict[str, GpuSku]:
    """The catalog SKU of every key the changes name; an unknown key is refused with the known ones."""
    out: dict[str, GpuSku] = {}
    for change in changes:
        sku = gpus.lookup(change.sku)
        if sku is None or not sku.known:
            why = f" ({sku.notes})" if sku is not None and sku.notes else ""
            raise WhatIfError(
                f"unknown GPU SKU {change.sku!r}{why}; the catalog knows: {', '.join(sorted(gpus.skus))}"
            )
        out[change.sku] = sku
    return out


def choose_pool(analyses: Sequence[PoolAnalysis], name: str | None) -> PoolAnalysis:
    """The pool a what-if applies to: the one named by ``--pool``, required where there are several."""
    keys = [a.pool.key for a in analyses]
    if name is not None:
        for analysis in analyses:
            if analysis.pool.key == name:
                return analysis
        raise WhatIfError(f"no pool {name!r} in the analysis; pools: {', '.join(keys) or 'none'}")
    if len(analyses) == 1:
        return analyses[0]
    if not analyses:
        raise WhatIfError("the analysis found no pool to apply the what-if to")
    raise WhatIfError(
        f"{len(analyses)} pools: name the one the GPUs are added to or removed from with --pool "
        f"({', '.join(keys)})"
    )


@dataclass(frozen=True)
class GroupOutcome:
    """One SKU/TP group: workers now (prefill, decode) and in the what-if's best split."""

    sku: str
    tp: int
    prefill_now: int
    decode_now: int
    prefill_what_if: int
    decode_what_if: int
    new: bool  # a group the pool does not run today
    capacity_source: str  # where its per-worker capacities come from (prefill/decode)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sku": self.sku,
            "tp": self.tp,
            "gpus_now": (self.prefill_now + self.decode_now) * self.tp,
            "gpus_what_if": (self.prefill_what_if + self.decode_what_if) * self.tp,
            "prefill": {"current": self.prefill_now, "recommended": self.prefill_what_if},
            "decode": {"current": self.decode_now, "recommended": self.decode_what_if},
            "new_group": self.new,
            "capacity_source": self.capacity_source,
        }


@dataclass(frozen=True)
class Throughput:
    """Sustained capacity in the analyzer's three units (requests/s x the mix)."""

    tokens_per_s: Figure

    def as_dict(self, isl: float, osl: float) -> dict[str, dict[str, float]]:
        return gain_from_tokens(self.tokens_per_s, isl, osl).as_dict()


@dataclass(frozen=True)
class WhatIfResult:
    pool: str
    changes: tuple[GpuChange, ...]
    groups: tuple[GroupOutcome, ...]
    isl: float
    osl: float
    capacity_now: Throughput  # as it runs (central only: value = low = high)
    capacity_best_now: Throughput  # the recommended split of today's GPUs (central)
    capacity_what_if: Throughput
    gain: Gain  # what-if vs now
    bound_what_if: str
    demand_tokens_per_s: float
    cost_now_per_week_usd: float | None  # None: a SKU of the set has no catalog price
    cost_what_if_per_week_usd: float | None
    notes: tuple[str, ...]

    @property
    def cost_change_per_week_usd(self) -> float | None:
        if self.cost_now_per_week_usd is None or self.cost_what_if_per_week_usd is None:
            return None
        return self.cost_what_if_per_week_usd - self.cost_now_per_week_usd

    def as_dict(self) -> dict[str, Any]:
        def money(value: float | None) -> float | str:
            return "price not set" if value is None else round(value, 2)

        return {
            "pool": self.pool,
            "changes": [c.as_dict() for c in self.changes],
            "mean_prompt_tokens": round(self.isl, 1),
            "mean_output_tokens": round(self.osl, 1),
            "groups": [g.as_dict() for g in self.groups],
            "capacity_now": self.capacity_now.as_dict(self.isl, self.osl),
            "capacity_best_now": self.capacity_best_now.as_dict(self.isl, self.osl),
            "capacity_what_if": self.capacity_what_if.as_dict(self.isl, self.osl),
            "gain_vs_now": self.gain.as_dict(),
            "bound_what_if": self.bound_what_if,
            "demand_tokens_per_s": round(self.demand_tokens_per_s, 1),
            "cost_per_week_usd": {
                "now": money(self.cost_now_per_week_usd),
                "what_if": money(self.cost_what_if_per_week_usd),
                "change": money(self.cost_change_per_week_usd),
            },
            "notes": list(self.notes),
        }


def _tp_for(sku: GpuSku, groups: Sequence[GroupCapacity], pool: str) -> int:
    on_sku = {g.group.tp for g in groups if g.group.sku.key == sku.key}
    degrees = on_sku or {g.group.tp for g in groups}
    if len(degrees) != 1:
        raise WhatIfError(
            f"pool {pool} runs {sku.key if on_sku else 'its workers'} at several TP degrees "
            f"({', '.join(map(str, sorted(degrees)))}): the TP degree of added workers is ambiguous"
        )
    return next(iter(degrees))


def _exact(value: float) -> Figure:
    return Figure(value, value, value)


def _figure(central: float, draws: npt.NDArray[np.float64]) -> Figure:
    low, high = float(np.quantile(draws, _LOW)), float(np.quantile(draws, _HIGH))
    return Figure(central, min(central, low), max(central, high))


def what_if(
    analysis: PoolAnalysis,
    changes: Sequence[GpuChange],
    skus: dict[str, GpuSku],
    capacity: CapacityParams | None = None,
    tolerance: float = 0.0,
) -> WhatIfResult:
    """The pool's best placement on its GPUs changed by ``changes`` (``skus``: :func:`resolve_skus`)."""
    pool = analysis.pool
    segment = analysis.latest
    placement = segment.placement if segment is not None else None
    if segment is None or placement is None:
        raise WhatIfError(
            f"pool {pool.key} has no prefill/decode placement to re-solve (it serves {analysis.serving})"
        )
    isl, osl = placement.isl, placement.osl
    groups = list(placement.groups)
    sizes = list(placement.sizes)
    now_prefill = list(placement.current.prefill)
    start = list(placement.best.prefill)
    new: list[bool] = [False] * len(groups)
    notes: list[str] = []
    for change in changes:
        sku = skus[change.sku]
        if change.op == "remove":
            index = [g for g, cap in enumerate(groups) if cap.group.sku.key == sku.key and sizes[g] > 0]
            if not index:
                raise WhatIfError(f"--remove {sku.key}:{change.gpus}: pool {pool.key} runs no {sku.key} GPUs")
            if len(index) > 1:
                raise WhatIfError(
                    f"--remove {sku.key}:{change.gpus}: pool {pool.key} runs {sku.key} at several TP "
                    "degrees: which group loses GPUs is ambiguous"
                )
            g = index[0]
            tp = groups[g].group.tp
            if change.gpus % tp:
                raise WhatIfError(
                    f"--remove {sku.key}:{change.gpus}: not a multiple of the TP degree ({tp}) of the pool's "
                    f"{sku.key} workers"
                )
            if change.gpus > sizes[g] * tp:
                raise WhatIfError(
                    f"--remove {sku.key}:{change.gpus}: pool {pool.key} has only {sizes[g] * tp} {sku.key} "
                    "GPUs in prefill/decode workers"
                )
            sizes[g] -= change.gpus // tp
            start[g] = min(start[g], sizes[g])
            continue
        tp = _tp_for(sku, groups, pool.key)
        if change.gpus % tp:
            raise WhatIfError(
                f"--add {sku.key}:{change.gpus}: not a multiple of the pool's TP degree ({tp}): the pool's "
                f"workers each hold {tp} GPUs"
            )
        workers = change.gpus // tp
        g = next((i for i, cap in enumerate(groups) if cap.group.key == f"{sku.key}/tp{tp}"), -1)
        if g < 0:
            groups.append(_new_group(analysis, sku, tp, isl, osl, capacity))
            sizes.append(0)
            now_prefill.append(0)
            start.append(0)
            new.append(True)
            g = len(groups) - 1
            cap = groups[g]
            notes.append(
                f"{tp} x {sku.key} is new to this pool: prefill capacity {cap.prefill.source} "
                f"(+-{cap.prefill.uncertainty:.0%}), decode {cap.decode.source} "
                f"(+-{cap.decode.uncertainty:.0%})"
                + (f", KV budget {cap.kv_budget.source}" if cap.kv_budget is not None else "")
            )
        sizes[g] += workers
        if not groups[g].decode.fits:  # added workers start where they can serve
            start[g] += workers
    original = len(placement.groups)
    now_sizes = np.array(list(placement.sizes) + [0] * (len(groups) - original), dtype=np.int64)
    hyp_sizes = np.array(sizes, dtype=np.int64)
    cp = np.array([g.prefill.tokens_per_s if g.prefill.fits else 0.0 for g in groups])
    cd = np.array([g.decode.tokens_per_s if g.decode.fits else 0.0 for g in groups])
    draws_p, draws_d = capacity_draws(groups, cp, cd, DECISION_SEED)
    routing = placement.routing
    chosen = choose_plan(
        hyp_sizes, draws_p, draws_d, isl, osl, np.array(start, dtype=np.int64), tolerance, routing
    ).chosen
    hyp = draw_rates(chosen, hyp_sizes, draws_p, draws_d, isl, osl, routing)
    now = draw_rates(np.array(now_prefill, dtype=np.int64), now_sizes, draws_p, draws_d, isl, osl, routing)
    per_request = isl + osl
    # The current placement's measured throughput (where a phase was seen saturated) replaces the model's.
    offset = (placement.current.request_rate - float(now[0])) * per_request
    hyp_tokens = float(hyp[0]) * per_request
    gain = _figure(hyp_tokens - placement.current.tokens_per_s, (hyp - now) * per_request - offset)
    _, prompt, generated = evaluate(chosen, hyp_sizes, cp, cd, isl, osl, routing)
    bound = "prefill" if prompt[0] / isl <= generated[0] / osl else "decode"
    outcomes = tuple(
        GroupOutcome(
            cap.group.sku.key,
            cap.group.tp,
            now_prefill[g],
            int(now_sizes[g]) - now_prefill[g],
            int(chosen[g]),
            int(hyp_sizes[g] - chosen[g]),
            new[g],
            f"{cap.prefill.source}/{cap.decode.source}",
        )
        for g, cap in enumerate(groups)
    )
    return WhatIfResult(
        pool=pool.key,
        changes=tuple(changes),
        groups=outcomes,
        isl=isl,
        osl=osl,
        capacity_now=Throughput(_exact(placement.current.tokens_per_s)),
        capacity_best_now=Throughput(_exact(placement.best.tokens_per_s)),
        capacity_what_if=Throughput(_figure(hyp_tokens, hyp * per_request)),
        gain=gain_from_tokens(gain, isl, osl),
        bound_what_if=bound,
        demand_tokens_per_s=placement.demand_tokens_per_s,
        cost_now_per_week_usd=weekly_cost_usd(groups, [int(v) for v in now_sizes]),
        cost_what_if_per_week_usd=weekly_cost_usd(groups, sizes),
        notes=tuple(notes),
    )


def _new_group(
    analysis: PoolAnalysis, sku: GpuSku, tp: int, isl: float, osl: float, capacity: CapacityParams | None
) -> GroupCapacity:
    """Capacities of workers of the pool's model on a SKU it does not run, from its own calibration."""
    pool = analysis.pool
    if pool.arch is None or pool.precision is None:
        raise WhatIfError(
            f"pool {pool.key}: its model or precision lacks catalog figures: no capacity on {sku.key}"
        )
    try:
        deployment = Deployment(
            model=pool.arch,
            gpu=sku,
            precision=pool.precision,
            kv_precision=default_kv_precision(pool.precision),
            tp=tp,
        )
    except DeploymentError as exc:
        raise WhatIfError(f"{pool.model_id} on {tp} x {sku.key}: {exc}") from None
    cap = group_capacity(SkuGroup(sku, tp, (), deployment), analysis.calibration, isl, osl, capacity)
    if not cap.prefill.fits and not cap.decode.fits:
        raise WhatIfError(
            f"{pool.model_id} does not fit {tp} x {sku.key} with room for its KV cache in either role"
        )
    if math.isnan(cap.prefill.tokens_per_s) or math.isnan(cap.decode.tokens_per_s):
        raise WhatIfError(f"{pool.model_id} on {tp} x {sku.key}: capacity unknown")
    return cap
