"""Latency targets applied to pools: each pool's rule (:mod:`fleet.targets`) and what it changes.

The rules are the settings' (``PHASEFIT_ANALYZER_TARGETS``), the operator catalog's (``targets:``) and the
fleet-wide TPOT default (``pool.capacity.tpot_slo_s``, ``PHASEFIT_ANALYZER_TPOT_SLO_S``). A pool's TPOT
target sizes its decode batches and its TTFT target the load on its prefill workers (:func:`with_targets`), so
its capacity, best split, loss and what-ifs count goodput; an end-to-end target is reported with the pool,
not applied. Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from analyzer.pools.analysis import PoolParams
from analyzer.pools.pool import Pool
from fleet.catalog import Catalog
from fleet.targets import PlacedRule, PoolIdentity, PoolTargets, global_rule, resolve

NO_TARGETS_NOTE = "no latency targets set: capacity is raw throughput"
NONE_MATCH_NOTE = "no latency-target rule matches any pool: capacity is raw throughput"
UNAPPLIED_NOTE = (
    "latency targets: end-to-end targets are reported with their pools; TTFT and TPOT targets size "
    "capacity (prefill load, decode batches)"
)


def pool_identity(pool: Pool) -> PoolIdentity:
    """What target rules match the pool on (its catalog model's key, HF ids and aliases where known)."""
    names = (pool.arch.key, *pool.arch.hf_ids, *pool.arch.aliases) if pool.arch is not None else ()
    return PoolIdentity(pool.cluster, pool.deployment, pool.model_id, names)


def all_rules(
    settings: Sequence[PlacedRule],
    catalog: Catalog,
    global_tpot_s: float | None,
    global_where: str = "pool.capacity.tpot_slo_s",
) -> tuple[PlacedRule, ...]:
    """Every rule in the order ties resolve: the settings', the catalog's, then the global default
    (``global_where``: what set it, as the rule's label)."""
    return (*settings, *catalog.targets, *global_rule(global_tpot_s, global_where))


def pool_targets(pools: Sequence[Pool], rules: Sequence[PlacedRule]) -> dict[str, PoolTargets]:
    """Each pool's targets, by pool key."""
    return {pool.key: resolve(rules, pool_identity(pool)) for pool in pools}


def with_targets(params: PoolParams, targets: PoolTargets) -> PoolParams:
    """The pool's parameters with its TPOT target sizing decode batches and its TTFT target the prefill
    load (unchanged where no rule applies)."""
    if targets.source == "none":
        return params
    capacity = replace(params.capacity, tpot_slo_s=targets.tpot_p90_s, ttft_slo_s=targets.ttft_p90_s)
    return replace(params, capacity=capacity)


def with_link(params: PoolParams, link_bytes_per_s: float | None) -> PoolParams:
    """The pool's parameters with the operator's KV-link figure bounding its prefill workers."""
    if link_bytes_per_s is None:
        return params
    return replace(params, capacity=replace(params.capacity, kv_link_bytes_per_s=link_bytes_per_s))


def fleet_notes(targets: Mapping[str, PoolTargets], rules: Sequence[PlacedRule]) -> list[str]:
    """What the analysis says once about targets: that none applies anywhere, or that some are only
    reported."""
    if not any(t.is_set for t in targets.values()):
        return [NONE_MATCH_NOTE if rules else NO_TARGETS_NOTE]
    if any(t.e2e_p90_s is not None for t in targets.values()):
        return [UNAPPLIED_NOTE]
    return []
