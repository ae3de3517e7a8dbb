"""A pool's latency targets: what rules match it on, what its TPOT target changes, what is said once."""

from __future__ import annotations

from analyzer.model.deployment import make_deployment
from analyzer.pools.analysis import PoolParams
from analyzer.pools.calibration import CapacityParams, PoolCalibration
from analyzer.pools.capacity import group_capacity
from analyzer.pools.pool import Pool, SkuGroup
from analyzer.pools.targets import (
    NO_TARGETS_NOTE,
    NONE_MATCH_NOTE,
    UNAPPLIED_NOTE,
    all_rules,
    fleet_notes,
    pool_identity,
    pool_targets,
    with_targets,
)
from fleet.catalog import load_catalog
from fleet.targets import NO_TARGETS, PoolTargets, parse_rules

CATALOG = load_catalog()
ISL, OSL = 1334.0, 175.0
DEPLOYMENT = make_deployment(CATALOG, model="llama-3.1-70b", gpu="H100 SXM", precision="fp8", tp=2)
GROUP = SkuGroup(DEPLOYMENT.gpu, 2, (0, 1), DEPLOYMENT)


def _pool(cluster: str, model_id: str, deployment: str | None = None) -> Pool:
    return Pool(
        key=f"{cluster}/{model_id}",
        cluster=cluster,
        model_id=model_id,
        arch=CATALOG.models.resolve(model_id),
        precision=None,
        members=(0, 1),
        groups=(GROUP,),
        notes=(),
        deployment=deployment,
    )


def test_a_pool_is_matched_on_its_served_id_and_catalog_model() -> None:
    known = pool_identity(_pool("east", "meta-llama/Llama-3.1-70B-Instruct", "chat"))
    assert (known.cluster, known.deployment, known.model_id) == (
        "east",
        "chat",
        "meta-llama/Llama-3.1-70B-Instruct",
    )
    assert known.model_names[0] == "llama-3.1-70b"
    assert pool_identity(_pool("east", "my-finetune")).model_names == ()


def test_rules_are_the_settings_then_the_catalog_then_the_global_default() -> None:
    settings = parse_rules([{"cluster": "east", "tpot_p90_s": 0.03}], "settings", "S")
    assert [r.source for r in all_rules(settings, CATALOG, 0.1)] == ["settings", "global"]
    assert all_rules((), CATALOG, None) == ()
    pools = [
        _pool("east", "meta-llama/Llama-3.1-70B-Instruct"),
        _pool("west", "meta-llama/Llama-3.1-70B-Instruct"),
    ]
    found = pool_targets(pools, all_rules(settings, CATALOG, 0.1))
    assert {key: t.tpot_p90_s for key, t in found.items()} == {
        "east/meta-llama/Llama-3.1-70B-Instruct": 0.03,
        "west/meta-llama/Llama-3.1-70B-Instruct": 0.1,
    }


def test_a_pool_without_a_rule_keeps_its_parameters() -> None:
    params = PoolParams(capacity=CapacityParams(tpot_slo_s=0.2))
    assert with_targets(params, NO_TARGETS) is params


def test_the_rule_that_applies_sets_the_tpot_whole() -> None:
    params = PoolParams(capacity=CapacityParams(tpot_slo_s=0.2))
    tight = with_targets(params, PoolTargets(tpot_p90_s=0.03, source="catalog", rule="f: targets[0]"))
    assert tight.capacity.tpot_slo_s == 0.03 and tight.tolerance == params.tolerance
    ttft_only = with_targets(params, PoolTargets(ttft_p90_s=1.0, source="settings", rule="S[0]"))
    assert ttft_only.capacity.tpot_slo_s is None


def test_a_tight_tpot_lowers_the_decode_capacity() -> None:
    cal = PoolCalibration(skus={GROUP.key: GROUP.sku})
    params = PoolParams()
    raw = group_capacity(GROUP, cal, ISL, OSL, with_targets(params, NO_TARGETS).capacity).decode
    target = PoolTargets(tpot_p90_s=0.025, source="settings", rule="S[0]")
    tight = group_capacity(GROUP, cal, ISL, OSL, with_targets(params, target).capacity).decode
    assert tight.tpot_s is not None and tight.tpot_s <= 0.025 + 1e-9
    assert raw.tpot_s is not None and raw.tpot_s > 0.025
    assert 0 < tight.tokens_per_s < raw.tokens_per_s
    # The prefill side is untouched.
    assert group_capacity(GROUP, cal, ISL, OSL, with_targets(params, target).capacity).prefill == (
        group_capacity(GROUP, cal, ISL, OSL, params.capacity).prefill
    )


def test_a_measured_decode_capacity_is_held_to_the_target_too() -> None:
    # Decode workers seen saturated at this mix: their delivered rate is the capacity at the engines' own
    # batch, which a tight TPOT does not allow.
    cal = PoolCalibration(skus={GROUP.key: GROUP.sku}, decode_saturated={GROUP.key: (4000.0, ISL, OSL)})
    params = PoolParams()
    raw = group_capacity(GROUP, cal, ISL, OSL, params.capacity).decode
    target = PoolTargets(tpot_p90_s=0.025, source="settings", rule="S[0]")
    tight = group_capacity(GROUP, cal, ISL, OSL, with_targets(params, target).capacity).decode
    assert raw.source == tight.source == "measured"
    assert raw.tokens_per_s == 4000.0
    assert tight.tokens_per_s < raw.tokens_per_s


def test_the_fleet_is_told_once_when_no_target_applies() -> None:
    east = "east/llama"
    assert fleet_notes({east: NO_TARGETS, "west/llama": NO_TARGETS}, ()) == [NO_TARGETS_NOTE]
    assert fleet_notes({}, ()) == [NO_TARGETS_NOTE]
    rules = parse_rules([{"cluster": "north", "tpot_p90_s": 0.05}], "settings", "S")
    assert fleet_notes({east: NO_TARGETS}, rules) == [NONE_MATCH_NOTE]
    tpot = PoolTargets(tpot_p90_s=0.05, source="settings", rule="S[0]")
    assert fleet_notes({east: tpot, "west/llama": NO_TARGETS}, rules) == []
    ttft = PoolTargets(ttft_p90_s=0.5, source="settings", rule="S[0]")
    assert fleet_notes({east: ttft}, rules) == []
    e2e = PoolTargets(e2e_p90_s=2.0, source="settings", rule="S[0]")
    assert fleet_notes({east: e2e}, rules) == [UNAPPLIED_NOTE]


def test_groups_that_cannot_meet_a_ttft_target_or_have_no_model_are_named() -> None:
    from types import SimpleNamespace
    from typing import cast

    from analyzer.pools.capacity import GroupCapacity, RoleCapacity, ttft_unmet
    from analyzer.pools.pool import SkuGroup

    def group(name: str, modelled: bool) -> SkuGroup:
        deployment = object() if modelled else None
        return cast(SkuGroup, SimpleNamespace(tp=2, sku=SimpleNamespace(name=name), deployment=deployment))

    def capacity(tokens: float, unbounded: float | None, alone: float | None) -> GroupCapacity:
        prefill = RoleCapacity(tokens, 0.1, "calibrated", ttft_s=alone, unbounded_tokens_per_s=unbounded)
        return cast(GroupCapacity, SimpleNamespace(prefill=prefill))

    h100, h200, odd = group("H100 SXM", True), group("H200 SXM", True), group("X1", False)
    missed, met = capacity(0.0, 9000.0, 0.3), capacity(5000.0, 9500.0, 0.28)
    notes, none_can = ttft_unmet([h100, h200], [missed, met], 0.25)
    assert not none_can and notes == [
        "TTFT target 250 ms is below a prompt alone on 2 x H100 SXM (modelled 300 ms): it cannot prefill "
        "within the target"
    ]
    notes, none_can = ttft_unmet([h100, h200], [missed, capacity(0.0, 9500.0, 0.28)], 0.25)
    assert none_can and "no worker of the pool can prefill within its TTFT target" in notes[-1]
    # A group without catalog figures prefills at its raw figure: the target is not applied there, said so.
    notes, none_can = ttft_unmet([h100, odd], [missed, capacity(7000.0, None, None)], 0.25)
    assert not none_can and any("TTFT target not applied on 2 x X1" in n for n in notes)
    assert ttft_unmet([h100], [missed], None) == ([], False)
