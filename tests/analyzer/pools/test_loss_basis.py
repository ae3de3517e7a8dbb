from __future__ import annotations

from dataclasses import replace

from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.loss_basis import loss_basis
from analyzer.pools.pool import SkuGroup
from analyzer.pools.split_search import PlacementResult, place
from fleet.catalog import load_catalog
from tests.analyzer.pools.test_split_search import place_inverted_pair

CATALOG = load_catalog()


def _group(sku_key: str, rows: range, prefill: tuple[float, str], decode: tuple[float, str]) -> GroupCapacity:
    return GroupCapacity(
        SkuGroup(CATALOG.gpus.get(sku_key), 2, tuple(rows), None),
        RoleCapacity(prefill[0], 0.03, prefill[1]),
        RoleCapacity(decode[0], 0.03, decode[1]),
        kv_bytes=60e9,
    )


def _roles(rows: range, n_prefill: int) -> list[tuple[int, str]]:
    return [(row, "prefill" if i < n_prefill else "decode") for i, row in enumerate(rows)]


def _inverted(
    h100_decode: str, h200_decode: str, measured: tuple[float | None, float | None] = (None, None)
) -> PlacementResult:
    """Every H100 decodes and every H200 prefills, long outputs: the swap is sure to pay."""
    h100 = _group("H100-SXM", range(0, 4), (13_000.0, "calibrated"), (6_500.0, h100_decode))
    h200 = _group("H200-SXM", range(4, 8), (13_000.0, "calibrated"), (9_000.0, h200_decode))
    return place(
        [h100, h200],
        [_roles(range(0, 4), 0), _roles(range(4, 8), 4)],
        isl=1300.0,
        osl=1000.0,
        demand_tokens_per_s=50_000.0,
        peak_demand_tokens_per_s=60_000.0,
        measured=measured,
    )


def _right_way_round(h100: GroupCapacity, h200: GroupCapacity, osl: float) -> PlacementResult:
    """The H100s prefilling and the H200s decoding."""
    return place(
        [h100, h200],
        [_roles(range(0, 4), 4), _roles(range(4, 8), 0)],
        isl=1300.0,
        osl=osl,
        demand_tokens_per_s=50_000.0,
        peak_demand_tokens_per_s=60_000.0,
    )


def test_a_move_rests_on_the_weakest_figure_of_either_split() -> None:
    # Decode bounds both splits: now the H100s' (calibrated), after the swap the H200s' (transferred).
    result = _inverted("calibrated", "transferred")
    assert result.best.prefill != result.current.prefill and result.lost_tokens_per_s > 0
    assert result.current.bound == result.best.bound == "decode"
    basis = loss_basis(result)
    assert basis is not None and basis.source == "transferred"
    assert "H200-SXM/tp2 decode" in basis.detail and "(transferred)" in basis.detail
    assert "H100-SXM/tp2 decode" in basis.detail and "(calibrated)" in basis.detail


def test_a_measured_current_split_counts_as_measured_on_its_side_only() -> None:
    model_now = loss_basis(_inverted("model", "calibrated"))
    assert model_now is not None and model_now.source == "model"
    # The same pool seen saturated in decode: the current side is measured, the best side still calibrated.
    seen = _inverted("model", "calibrated", measured=(None, 4 * 6_500.0 * 1.02))
    assert seen.current_measured == (False, True)
    basis = loss_basis(seen)
    assert basis is not None and basis.source == "calibrated"
    assert "current split's decode throughput, seen saturated (measured)" in basis.detail


def test_no_move_rests_on_every_capacity_the_comparison_used() -> None:
    h100 = _group("H100-SXM", range(0, 4), (13_000.0, "measured"), (6_500.0, "model"))
    h200 = _group("H200-SXM", range(4, 8), (13_000.0, "calibrated"), (9_000.0, "measured"))
    # Already placed right: H100s prefill, H200s decode, both phases at 40 requests/s.
    result = _right_way_round(h100, h200, osl=900.0)
    assert result.best.prefill == result.current.prefill and result.lost_tokens_per_s == 0
    basis = loss_basis(result)
    assert basis is not None and basis.source == "model"  # the H100 decode figure no split uses now
    assert basis.detail.startswith("no move recommended") and "H100-SXM/tp2 decode" in basis.detail


def test_a_capacity_that_does_not_fit_is_left_out_and_no_placement_has_no_basis() -> None:
    h100 = _group("H100-SXM", range(0, 4), (13_000.0, "measured"), (6_500.0, "measured"))
    unfit = replace(h100, decode=RoleCapacity(0.0, 1.0, "model", fits=False))
    h200 = _group("H200-SXM", range(4, 8), (13_000.0, "measured"), (9_000.0, "measured"))
    basis = loss_basis(_right_way_round(unfit, h200, osl=600.0))
    assert basis is not None and basis.source == "measured"
    assert loss_basis(None) is None


def test_an_unknown_source_never_reads_as_measured() -> None:
    result = _inverted("calibrated", "someone's guess")
    basis = loss_basis(result)
    assert basis is not None and basis.source == "model"


def test_a_move_held_back_rests_on_the_held_back_split_whose_gain_is_the_loss() -> None:
    """The H200s decode 12% faster than the H100s, each figure within 10%: the swap is held back (its
    gain is not sure), and on a supply-limited pool the loss, its likely gain, rests on what the swapped
    split would be bound by."""
    h100 = GroupCapacity(
        SkuGroup(CATALOG.gpus.get("H100-SXM"), 2, (0, 1), None),
        RoleCapacity(13_000.0, 0.1, "calibrated"),
        RoleCapacity(6_500.0, 0.1, "calibrated"),
        kv_bytes=60e9,
    )
    h200 = GroupCapacity(
        SkuGroup(CATALOG.gpus.get("H200-SXM"), 2, (2, 3), None),
        RoleCapacity(13_000.0, 0.1, "calibrated"),
        RoleCapacity(7_280.0, 0.1, "transferred"),
        kv_bytes=60e9,
    )
    result = place_inverted_pair(h100, h200, supply_limited=True)
    assert result.best == result.current and result.unsure is not None and result.lost_tokens_per_s > 0
    basis = loss_basis(result)
    assert basis is not None and basis.source == "transferred"  # the H200 decode figure the swap needs
    assert "held-back split's decode rate: the H200-SXM/tp2 decode capacity (transferred)" in basis.detail
    assert not basis.detail.startswith("no move recommended")
