"""Whether to move: the low end of the gain must be positive; a move recommended before stays while its high
end is; and identical telemetry gives the identical decision whatever the seed that produced it."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.findings.loss import range_to_zero
from analyzer.pipeline import analyze, input_from_samples
from analyzer.planning.plan import loss_gain
from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.loss_range import held_back_cause
from analyzer.pools.plan_choice import ACT, DOMINANCE, choose_plan
from analyzer.pools.plan_rates import Routing as SplitRouting
from analyzer.pools.plan_rates import draw_rates
from analyzer.pools.pool import SkuGroup
from analyzer.pools.split_search import PlacementResult, place
from fleet.catalog import load_catalog
from fleetsim.examine import score, simulate

ISL, OSL = 1000.0, 1000.0
SIZES = np.array([1, 1], dtype=np.int64)
CURRENT = np.array([0, 1], dtype=np.int64)  # the first SKU decodes, the second prefills
SWAP = np.array([1, 0], dtype=np.int64)


def _draws(decode_edge: float, spread: float, n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Capacity draws (row 0 central) where the second SKU decodes ``decode_edge`` faster than the first,
    give or take ``spread`` (a fixed normal sample)."""
    noise = np.random.default_rng(7).normal(0.0, 1.0, n)
    edge = np.concatenate([[decode_edge], decode_edge + spread * noise])
    prefill = np.full((n + 1, 2), 20_000.0)
    decode = np.column_stack([np.full(n + 1, 4_000.0), 4_000.0 * (1.0 + edge)])
    return prefill, decode


def _gain_wins(prefill: np.ndarray, decode: np.ndarray) -> float:
    swap = draw_rates(SWAP, SIZES, prefill, decode, ISL, OSL, SplitRouting())
    now = draw_rates(CURRENT, SIZES, prefill, decode, ISL, OSL, SplitRouting())
    return float((swap > now).mean())


def test_a_move_whose_gain_has_a_positive_low_end_is_recommended() -> None:
    prefill, decode = _draws(0.4, 0.1)
    assert _gain_wins(prefill, decode) >= ACT
    assert choose_plan(SIZES, prefill, decode, ISL, OSL, CURRENT).chosen.tolist() == SWAP.tolist()


def test_a_move_that_may_not_help_is_not_recommended() -> None:
    # The second SKU decodes 5% faster on the central estimate, but the draws allow it to be slower.
    prefill, decode = _draws(0.05, 0.1)
    wins = _gain_wins(prefill, decode)
    assert 1.0 - ACT < wins < ACT  # the low end of the gain is not positive, its high end is
    assert choose_plan(SIZES, prefill, decode, ISL, OSL, CURRENT).chosen.tolist() == CURRENT.tolist()
    # Recommended before, it stays: the high end of its gain is still positive (hysteresis).
    kept = choose_plan(SIZES, prefill, decode, ISL, OSL, CURRENT, standing=SWAP).chosen
    assert kept.tolist() == SWAP.tolist()


def test_a_standing_move_goes_once_its_high_end_is_not_positive() -> None:
    prefill, decode = _draws(-0.3, 0.1)  # the second SKU is now slower at decode: the swap loses
    assert _gain_wins(prefill, decode) <= 1.0 - ACT
    dropped = choose_plan(SIZES, prefill, decode, ISL, OSL, CURRENT, standing=SWAP).chosen
    assert dropped.tolist() == CURRENT.tolist()


def test_a_sure_but_small_gain_is_held_back_by_min_gain_and_says_so() -> None:
    """A 3% edge with no spread wins every draw, yet is under a min_gain of 5%; over one of 2% it moves."""
    prefill, decode = _draws(0.03, 0.0)  # the swap's rate: min(20k, 4k x 1.03) / 1000 against 4k / 1000
    choice = choose_plan(SIZES, prefill, decode, ISL, OSL, CURRENT, min_gain=0.05)
    assert choice.chosen.tolist() == CURRENT.tolist() and choice.held_back is not None
    assert choice.small_gain == pytest.approx(0.03)
    assert choose_plan(SIZES, prefill, decode, ISL, OSL, CURRENT, min_gain=0.02).chosen.tolist() == (
        SWAP.tolist()
    )
    cause = held_back_cause(1.0, 120.0, choice.small_gain, 0.05)
    assert "3.0% on average" in cause and "pool.min_gain" in cause and "only" not in cause


def test_a_new_plan_replaces_the_standing_one_only_by_gaining_min_gain_over_it() -> None:
    """Two plans a point or so apart never take turns from one segment to the next."""
    sizes = np.array([2, 2], dtype=np.int64)
    prefill = np.tile([3_000.0, 3_100.0], (257, 1))
    decode = np.full((257, 2), 4_000.0)
    current = np.array([1, 0], dtype=np.int64)  # 3 requests/s: one prefill worker
    best = np.array([0, 2], dtype=np.int64)  # 6.2 requests/s
    near = np.array([1, 1], dtype=np.int64)  # 6.1: the best is 1.6% more
    far = np.array([2, 0], dtype=np.int64)  # 6.0: the best is 3.3% more

    def chosen(standing: np.ndarray, min_gain: float) -> list[int]:
        choice = choose_plan(sizes, prefill, decode, ISL, OSL, current, standing=standing, min_gain=min_gain)
        return [int(v) for v in choice.chosen]

    assert chosen(near, 0.02) == near.tolist()
    assert chosen(near, 0.0) == best.tolist()
    assert chosen(far, 0.02) == best.tolist()


@pytest.mark.parametrize("scenario", ["seed-twins"])
def test_identical_pools_under_different_seeds_get_the_same_decision(scenario: str) -> None:
    """Two seeds of one layout: other traffic draws, restarts and noise, the same GPUs and roles. The
    recommended split and the workers flagged per (SKU, from, to) must agree."""
    catalog = load_catalog()
    decisions = []
    for seed in (0, 1, 2):
        run = simulate(scenario, catalog, days=1.0, seed=seed)
        result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), catalog)
        decisions.append([(p.pool, p.decision) for p in score(result, run).pools])
    moves = [row for _, decision in decisions[0] for row in decision if row[0] != "split"]
    assert moves  # a move is recommended
    assert decisions[1] == decisions[0] and decisions[2] == decisions[0]


def test_a_move_held_back_counts_its_likely_gain_as_the_loss_on_a_supply_limited_pool() -> None:
    """No move is recommended (its gain is not sure), yet a supply-limited pool most likely loses what it
    would add: the estimate and the decision are apart. The loss is the held-back split's gain at the
    central capacities, its range runs from 0 (the move might not help) and ``range_cause`` says why nothing
    is recommended. A pool that serves its demand reports 0 with the same range: nothing shows that the
    capacity is needed."""
    from tests.analyzer.pools.test_split_search import _group, _roles, place_inverted_pair

    # The H200 decodes 12% faster than the H100, each figure known within 10%: the swap may not help.
    h100 = _group("H100-SXM", range(0, 2), 13_000.0, 6_500.0, uncertainty=0.1)
    h200 = _group("H200-SXM", range(2, 4), 13_000.0, 7_280.0, uncertainty=0.1)
    result = place_inverted_pair(h100, h200, supply_limited=True)
    assert result.best == result.current and result.changes == ()
    assert result.unsure is not None and result.unsure.prefill == (2, 0)  # the swap, held back
    expected_gain = result.unsure.tokens_per_s - result.current.tokens_per_s
    assert result.lost_tokens_per_s == pytest.approx(expected_gain) and expected_gain > 0
    assert result.lost_low == 0.0 and result.lost_high > result.lost_tokens_per_s
    assert result.recommended_gain == 0.0  # nothing is recommended
    assert result.counted == result.unsure
    assert result.range_cause.startswith(
        f"no move is recommended: the split held back would most likely add {expected_gain:,.0f} tokens/s"
    )
    assert "it sustains more in only" in result.range_cause
    assert range_to_zero(result) == result.range_cause
    # `phasefit plan` recommends no change: its gain is 0, up to what the held-back move might add.
    gain = loss_gain(result).tokens_per_s
    assert (gain.value, gain.low, gain.high) == (0.0, 0.0, result.lost_high)
    serves = place_inverted_pair(h100, h200, supply_limited=False)
    assert serves.unsure is None and serves.lost_tokens_per_s == serves.lost_low == 0.0
    assert serves.lost_high == result.lost_high and serves.counted == serves.current
    assert serves.range_cause.startswith("no move is recommended: the best other split might add up to")
    # A pool whose split is its best has no such range.
    settled = place(
        [h100, h200],
        [_roles(range(0, 2), 2), _roles(range(2, 4), 0)],
        isl=1000.0,
        osl=1000.0,
        demand_tokens_per_s=1.0,
        peak_demand_tokens_per_s=1.0,
    )
    # A pool at its best split loses nothing; its range reaches what the best other split (the swap) might
    # add in the draws where it wins, and says so.
    assert settled.lost_tokens_per_s == settled.lost_low == 0.0 and settled.changes == ()
    assert settled.lost_high > 0.0
    assert settled.range_cause.startswith("no move is recommended: the best other split might add up to")
    # Where every other split surely loses, the range is 0 to 0.
    sure = place(
        [_group("H100-SXM", range(0, 2), 13_000.0, 6_500.0, uncertainty=0.01),
         _group("H200-SXM", range(2, 4), 13_000.0, 9_000.0, uncertainty=0.01)],
        [_roles(range(0, 2), 2), _roles(range(2, 4), 0)],
        isl=1000.0,
        osl=1000.0,
        demand_tokens_per_s=1.0,
        peak_demand_tokens_per_s=1.0,
    )  # fmt: skip
    assert (sure.lost_tokens_per_s, sure.lost_high) == (0.0, 0.0) and range_to_zero(sure) is None


def test_a_sure_partial_move_is_recommended_where_the_whole_one_might_not_help() -> None:
    """Each group has two workers; now the first prefills and the second decodes. Swapping both pairs gains
    most on average and beats swapping one pair in most draws, but beats the current split in fewer than
    ``ACT`` of them (the first group's decode speed is uncertain); swapping one pair gains in every draw.
    The sure move is recommended rather than none."""
    sizes, current = np.array([2, 2], dtype=np.int64), np.array([2, 0], dtype=np.int64)
    # The first group's decode speed (thousand tokens/s): row 0 the central estimate, then 100 draws.
    first_decode = np.array([12.0] + [4.0] * 12 + [6.0] * 5 + [12.0] * 83) * 1e3
    prefill = np.tile([5e3, 10e3], (first_decode.size, 1))
    decode = np.column_stack([first_decode, np.full(first_decode.size, 10e3)])

    def rates(x: list[int]) -> np.ndarray:
        return draw_rates(np.array(x), sizes, prefill, decode, ISL, OSL, SplitRouting())

    now, pair, both = rates([2, 0]), rates([1, 1]), rates([0, 2])
    assert both.mean() > pair.mean() > now.mean() and (pair > now).all()
    assert (both > pair).mean() >= 0.75 and (both > now).mean() < ACT
    choice = choose_plan(sizes, prefill, decode, ISL, OSL, current)
    assert choice.chosen.tolist() == [1, 1]
    assert choice.held_back is not None and choice.held_back.tolist() == [0, 2]  # the larger move, kept back
    # The loss's spread: in each draw, the most any split sustains over the current one.
    every = np.array([rates([a, b]) for a in range(3) for b in range(3)])
    assert choice.reachable is not None
    np.testing.assert_allclose(choice.reachable, every.max(axis=0) - now)


def test_a_partial_move_reports_the_larger_moves_possible_gain_as_its_high_end() -> None:
    """Qwen3-235B at TP 8 under measured kernels: two H100 workers prefill, two H200 workers decode, the
    H100's decode rate transferred (17%). One pair swapped is recommended; the loss's high end reaches at
    least what swapping both might gain, since the truth may lie there."""
    from analyzer.pools.capacity import GroupCapacity, RoleCapacity
    from analyzer.pools.plan_rates import capacity_draws
    from tests.analyzer.pools.test_split_search import H100, H200, SkuGroup, _roles

    h100 = GroupCapacity(
        SkuGroup(H100, 8, (0, 1), None),
        RoleCapacity(30_245.0, 0.03, "measured"),
        RoleCapacity(9_407.0, 0.172, "transferred", shared=0.1),
        kv_bytes=60e9,
    )
    h200 = GroupCapacity(
        SkuGroup(H200, 8, (2, 3), None),
        RoleCapacity(32_197.0, 0.03, "transferred"),
        RoleCapacity(10_595.0, 0.086, "calibrated", shared=0.03),
        kv_bytes=60e9,
    )
    isl, osl = 1334.2, 349.8

    def placed(supply_limited: bool) -> PlacementResult:
        return place(
            [h100, h200],
            [_roles(range(0, 2), 2), _roles(range(2, 4), 0)],
            isl=isl,
            osl=osl,
            demand_tokens_per_s=1.0,
            peak_demand_tokens_per_s=1.0,
            supply_limited=supply_limited,
        )

    result = placed(supply_limited=False)
    assert result.best.prefill == (1, 1)
    sizes = np.array([2, 2])
    cp = np.array([30_245.0, 32_197.0])
    cd = np.array([9_407.0, 10_595.0])
    draws_p, draws_d = capacity_draws([h100, h200], cp, cd, seed=0)

    def gain_q90(x: list[int]) -> float:
        gain = draw_rates(np.array(x), sizes, draws_p, draws_d, isl, osl, SplitRouting())
        gain = gain - draw_rates(np.array([2, 0]), sizes, draws_p, draws_d, isl, osl, SplitRouting())
        return float(np.quantile(gain * (isl + osl), 0.9))

    assert gain_q90([0, 2]) > gain_q90([1, 1])
    assert (
        result.lost_high >= gain_q90([0, 2]) - 1e-6
    )  # the best split of each draw: at least the larger move
    assert 0.0 < result.lost_low <= result.lost_tokens_per_s < result.lost_high
    assert result.unsure is None  # the pool serves its demand: the loss is the move recommended
    # Supply-limited (its queues show demand it does not serve): the loss is the larger move's likely gain,
    # the low end what the pair swapped surely adds; the recommendation and its own gain stay the pair's.
    starved = placed(supply_limited=True)
    assert starved.best == result.best and starved.changes == result.changes
    assert starved.unsure is not None and starved.unsure.prefill == (0, 2)
    assert starved.lost_tokens_per_s == pytest.approx(
        starved.unsure.tokens_per_s - starved.current.tokens_per_s
    )
    assert starved.lost_tokens_per_s > result.lost_tokens_per_s
    assert starved.recommended_gain == pytest.approx(result.lost_tokens_per_s)
    assert starved.lost_low == pytest.approx(result.lost_low) and starved.lost_high >= result.lost_high
    assert starved.range_cause.startswith("the loss counts a larger move held back: it would most likely add")
    assert range_to_zero(starved) == starved.range_cause
    gain = loss_gain(starved).tokens_per_s  # `phasefit plan`: the recommended pair's gain
    assert gain.value == pytest.approx(result.lost_tokens_per_s)


def test_the_search_never_ends_on_a_plan_a_smaller_confident_move_beats_in_expectation() -> None:
    """``gke-two-pools``' 70B pool under measured kernels (seed 0), its capacities as the analyzer had
    them: prefill measured on both SKUs, decode calibrated (+-11% and +-17%), prefill seen saturated now.
    The path took sure steps to the H200s all prefilling (4 role changes), past the H100s all prefilling
    with three H200 decoders (3 changes), which sustains more on average and wins 97% of the draws."""
    catalog = load_catalog()

    def group(sku: str, rows: range, prefill: float, decode: float, band: float) -> GroupCapacity:
        return GroupCapacity(
            SkuGroup(catalog.gpus.get(sku), 2, tuple(rows), None),
            RoleCapacity(prefill, 0.03, "measured", shared=0.03),
            RoleCapacity(decode, band, "calibrated", shared=band),
            kv_bytes=60e9,
        )

    groups = [
        group("H100-SXM", range(0, 8), 13_175.9, 7_248.5, 0.1148),
        group("H200-SXM", range(8, 16), 14_279.3, 8_090.7, 0.1748),
    ]
    roles = [[(r, "prefill" if i < 5 else "decode") for i, r in enumerate(range(o, o + 8))] for o in (0, 8)]

    def search(dominance: float) -> PlacementResult:
        return place(
            groups,
            roles,
            isl=1334.19,
            osl=174.75,
            demand_tokens_per_s=106_936.0,
            peak_demand_tokens_per_s=142_479.0,
            measured=(134_704.2, None),
            dominance=dominance,
        )

    along_the_path = search(10.0)  # the rule off
    assert along_the_path.best.prefill == (4, 8)
    result = search(DOMINANCE)
    assert result.best.prefill == (8, 5)
    assert result.best.tokens_per_s > along_the_path.best.tokens_per_s
