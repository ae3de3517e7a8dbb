"""Fleet totals from the pools' and workers' summaries, and the merge of summaries of disjoint pool shards.

One computation serves both: a whole-fleet analysis and the merge of shards analysed apart (``phasefit
analyze --shard``) give the same totals for the same pools.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from analyzer.results.summary import (
    SUMMARY_VERSION,
    FleetTotals,
    LossUnit,
    LostCapacity,
    ModelInfo,
    PoolSummary,
    Summary,
    WorkerSummary,
    lost_capacity,
)

PRICE_CATALOG = "catalog"
PRICE_NOT_SET = "price not set"
PRICE_NOT_ANALYSED = "no placement analysis"
LOSS_DIGITS: dict[LossUnit, int] = {"output_tokens_per_s": 1, "requests_per_s": 4, "tokens_per_s": 1}
SCOPE_NOTE = "this analysis covers "  # the warning a partial analysis carries (see analyzer.pipeline)


@dataclass(frozen=True)
class DeviceTotals:
    """Devices the analysed inventory holds: whole GPUs and MIG instances, and those no worker holds."""

    gpus: int
    whole_gpus: int
    mig_instances: int
    mig_parent_gpus: int
    physical_gpus: int | None
    physical_gpus_reason: str | None
    unattributed_gpus: int


def num(value: float | None, digits: int = 1) -> float | None:
    """Rounded, or None where the value is missing or not finite (never 0 for unknown)."""
    return round(float(value), digits) if value is not None and math.isfinite(value) else None


def _figure(row: PoolSummary, key: str) -> float | None:
    value = getattr(row, key)
    return None if value is None else float(value)


def _sum(values: Iterable[float | None], digits: int = 1) -> float | None:
    """Sum over the values that are known; None when none is."""
    known = [float(v) for v in values if v is not None]
    return num(sum(known), digits) if known else None


def loss_sum(losses: Sequence[LostCapacity]) -> LostCapacity:
    """Each figure summed over the losses that know it; None where none does."""
    return lost_capacity(
        lambda unit, bound: _sum((lost.figure(unit, bound) for lost in losses), LOSS_DIGITS[unit])
    )


def _all_or_none(values: Sequence[float | None], digits: int = 1) -> float | None:
    """Sum when every value is known (a partial sum would pass for the whole); else None."""
    if not values or any(v is None for v in values):
        return None
    return num(sum(float(v) for v in values if v is not None), digits)


def _price(pool_rows: Sequence[PoolSummary]) -> str:
    priced = [row for row in pool_rows if row.price != PRICE_NOT_ANALYSED]
    if not priced:
        return PRICE_NOT_ANALYSED
    return PRICE_CATALOG if all(row.price == PRICE_CATALOG for row in priced) else PRICE_NOT_SET


def fleet_totals(
    pool_rows: Sequence[PoolSummary],
    workers: Sequence[WorkerSummary],
    devices: DeviceTotals,
    open_findings_by_kind: Mapping[str, int],
) -> FleetTotals:
    """The fleet's totals: a sum is null when no pool knows the figure (capacity, best and costs: when any
    pool does not), with the pools that do not listed."""
    price = _price(pool_rows)
    priced = [row for row in pool_rows if row.price != PRICE_NOT_ANALYSED]

    def cost(key: str) -> float | None:
        return _all_or_none([_figure(row, key) for row in priced], 2) if price == PRICE_CATALOG else None

    serving = [row for row in pool_rows if row.workers]
    unjudged = Counter(w.unjudged_reason for w in workers if w.unjudged_reason is not None)
    by_evidence = Counter(
        w.activity_evidence for w in workers if w.unjudged_reason is None and w.activity_evidence
    )
    return FleetTotals(
        lost=loss_sum([row.lost for row in pool_rows]),
        lost_unknown_pools=[row.pool for row in pool_rows if row.lost.tokens_per_s.value is None],
        lost_mean=loss_sum([row.lost_mean for row in pool_rows]),
        capacity_tokens_per_s=_all_or_none([row.capacity_tokens_per_s for row in serving]),
        best_tokens_per_s=_all_or_none([row.best_tokens_per_s for row in serving]),
        capacity_unknown_pools=[row.pool for row in serving if row.capacity_tokens_per_s is None],
        demand_output_tokens_per_s=_sum(row.demand_output_tokens_per_s for row in pool_rows),
        demand_tokens_per_s=_sum(row.demand_tokens_per_s for row in pool_rows),
        demand_limited=all(row.demand_limited is True for row in pool_rows),
        weekly_cost_usd=cost("weekly_cost_usd"),
        idle_cost_per_week_usd=cost("idle_cost_per_week_usd"),
        misplacement_cost_per_week_usd=cost("misplacement_cost_per_week_usd"),
        price=price,
        pools=len(pool_rows),
        workers=len(workers),
        judged_workers=len(workers) - sum(unjudged.values()),
        unjudged_workers=sum(unjudged.values()),
        unjudged_reasons=dict(unjudged.most_common()),
        judged_by_evidence=dict(by_evidence.most_common()),
        gpus=devices.gpus,
        whole_gpus=devices.whole_gpus,
        mig_instances=devices.mig_instances,
        mig_parent_gpus=devices.mig_parent_gpus,
        physical_gpus=devices.physical_gpus,
        physical_gpus_reason=devices.physical_gpus_reason,
        unattributed_gpus=devices.unattributed_gpus,
        misplaced_workers=sum(1 for w in workers if w.misplaced),
        open_findings=sum(open_findings_by_kind.values()),
        open_findings_by_kind=dict(sorted(open_findings_by_kind.items())),
    )


def changes_record(pool_rows: Sequence[PoolSummary]) -> tuple[int, float | None]:
    """Changes scored over the pools and the median of |realized / predicted - 1| over them."""
    ratios = [
        c.realized_to_predicted
        for row in pool_rows
        for c in row.changes
        if c.realized_to_predicted is not None and math.isfinite(c.realized_to_predicted)
    ]
    return len(ratios), (round(statistics.median(abs(r - 1.0) for r in ratios), 4) if ratios else None)


class MergeError(ValueError):
    """Summaries that cannot be merged: other ranges, other versions, or the same pool twice."""


def merge(parts: Sequence[Summary]) -> Summary:
    """One summary of the pools of disjoint shards analysed over the same range."""
    if not parts:
        raise MergeError("nothing to merge")
    first = parts[0]
    for part in parts[1:]:
        if (part.from_, part.to, part.bucket_s) != (first.from_, first.to, first.bucket_s):
            raise MergeError(
                f"shards cover other ranges: {first.from_}..{first.to} and {part.from_}..{part.to}"
            )
    pools = sorted((p for part in parts for p in part.pools), key=lambda p: p.pool)
    twice = sorted(k for k, n in Counter(p.pool for p in pools).items() if n > 1)
    if twice:
        raise MergeError(f"pools analysed in more than one shard: {', '.join(twice)}")
    workers = [w for part in parts for w in part.workers]
    fleets = [part.fleet for part in parts]
    physical = [f.physical_gpus for f in fleets]
    devices = DeviceTotals(
        gpus=sum(f.gpus for f in fleets),
        whole_gpus=sum(f.whole_gpus for f in fleets),
        mig_instances=sum(f.mig_instances for f in fleets),
        mig_parent_gpus=sum(f.mig_parent_gpus for f in fleets),
        physical_gpus=None if any(p is None for p in physical) else sum(p for p in physical if p is not None),
        physical_gpus_reason=next((f.physical_gpus_reason for f in fleets if f.physical_gpus_reason), None),
        unattributed_gpus=sum(f.unattributed_gpus for f in fleets),
    )
    kinds: Counter[str] = Counter()
    for f in fleets:
        kinds.update(f.open_findings_by_kind)
    scored, error = changes_record(pools)
    warnings = list(dict.fromkeys(w for part in parts for w in part.warnings if not w.startswith(SCOPE_NOTE)))
    warnings.append(f"merged from {len(parts)} shard(s) analysed apart")
    return Summary(
        version=SUMMARY_VERSION,
        from_=first.from_,
        to=first.to,
        bucket_s=first.bucket_s,
        fleet=fleet_totals(pools, workers, devices, kinds),
        model=ModelInfo(
            calibration=first.model.calibration,
            heldout_ratio_error_p90=first.model.heldout_ratio_error_p90,
            heldout_absolute_error_p90=first.model.heldout_absolute_error_p90,
            changes_scored=scored,
            realized_error_median=error,
        ),
        warnings=warnings,
        pools=pools,
        workers=workers,
    )
