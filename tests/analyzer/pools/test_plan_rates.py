"""What a split sustains (``analyzer.pools.plan_rates``): the balance model, the candidate plans, the
capacity draws."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.pools.plan_choice import choose_plan
from analyzer.pools.plan_rates import EXHAUSTIVE_LIMIT, Routing, candidates, capacity_draws, evaluate
from analyzer.pools.plan_rates import draw_rates as evaluate_draws
from tests.analyzer.pools.test_split_search import _backwards


def test_the_pool_balance_is_the_minimum_of_both_pools() -> None:
    sizes = np.array([4, 4])
    cp = np.array([10_000.0, 10_000.0])
    cd = np.array([5_000.0, 8_000.0])
    rate, prompt, generated = evaluate(np.array([[4, 2]]), sizes, cp, cd, isl=1000.0, osl=200.0)
    assert prompt[0] == 60_000.0
    assert generated[0] == 16_000.0
    assert rate[0] == pytest.approx(min(60_000.0 / 1000.0, 16_000.0 / 200.0))
    # Round-robin decode: the slowest decode worker bounds the phase.
    rate_rr, _, generated_rr = evaluate(
        np.array([[2, 2]]), sizes, cp, cd, 1000.0, 200.0, Routing(decode_equal=True)
    )
    assert generated_rr[0] == 4 * 5_000.0
    assert rate_rr[0] == pytest.approx(min(40.0, 100.0))


def test_the_frontier_search_finds_the_exhaustive_optimum() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        sizes = rng.integers(1, 9, size=3)
        cp = rng.uniform(5_000, 15_000, size=3)
        cd = rng.uniform(3_000, 12_000, size=3)
        current = np.array([rng.integers(0, s + 1) for s in sizes])
        everything = candidates(sizes, cp, cd, current)
        assert len(everything) == np.prod(sizes + 1)
        rates, _, _ = evaluate(everything, sizes, cp, cd, 1200.0, 200.0)
        draws = (cp[None, :], cd[None, :])
        chosen = choose_plan(sizes, *draws, 1200.0, 200.0, current, tolerance=0.0).chosen
        rate = evaluate(chosen, sizes, cp, cd, 1200.0, 200.0)[0][0]
        assert rate == pytest.approx(rates.max())


def test_large_pools_search_a_frontier_not_every_split() -> None:
    sizes = np.array([60, 60, 60, 60])  # 61^4 > EXHAUSTIVE_LIMIT
    assert np.prod(sizes + 1) > EXHAUSTIVE_LIMIT
    cp = np.array([13_000.0, 13_000.0, 12_000.0, 9_000.0])
    cd = np.array([6_500.0, 9_000.0, 11_000.0, 5_000.0])
    current = np.array([30, 30, 30, 30])
    plans = candidates(sizes, cp, cd, current)
    assert len(plans) < 10_000
    rates, _, _ = evaluate(plans, sizes, cp, cd, 1300.0, 180.0)
    # The LP optimum over fractional splits bounds the integer one from above.
    lp_rates, _, _ = evaluate(
        np.array(
            [
                [x0, x1, x2, x3]
                for x0 in (60,)
                for x1 in range(0, 61, 2)
                for x2 in range(0, 61, 2)
                for x3 in (60,)
            ]
        ),
        sizes,
        cp,
        cd,
        1300.0,
        180.0,
    )
    assert rates.max() >= lp_rates.max() * 0.995


def test_capacity_draws_keep_what_the_groups_share() -> None:
    groups, _ = _backwards(shared=True)
    cp = np.array([g.prefill.tokens_per_s for g in groups])
    cd = np.array([g.decode.tokens_per_s for g in groups])
    draws_p, draws_d = capacity_draws(groups, cp, cd, seed=3)
    assert np.array_equal(draws_p[0], cp) and np.array_equal(draws_d[0], cd)  # row 0: central
    # Fully shared: both groups' prefill draws move together; partly shared: correlated, not identical.
    assert np.allclose(draws_p[1:, 0] / draws_p[1:, 1], cp[0] / cp[1])
    logs = np.log(draws_d[1:] / cd[None, :])
    expected = groups[0].decode.correlation * groups[1].decode.correlation
    assert np.corrcoef(logs.T)[0, 1] == pytest.approx(expected, abs=0.1)
    # Each group keeps its own spread.
    assert np.std(logs[:, 1]) == pytest.approx(np.log1p(0.291), rel=0.15)
    independent, _ = _backwards(shared=False)
    _, draws_i = capacity_draws(independent, cp, cd, seed=3)
    assert abs(np.corrcoef(np.log(draws_i[1:] / cd[None, :]).T)[0, 1]) < 0.2


def test_shared_errors_give_no_false_comfort_to_a_split_decode_pool() -> None:
    """Drawn independently, decode spread over both SKUs (7, 6) looks safer than decode on the H200s alone
    (8, 5), though both figures come from one extrapolated line; drawn as they are, the plan with more
    decode headroom keeps more of its rate where the line is too optimistic."""
    isl, osl = 1334.3, 174.8
    sizes = np.array([8, 8])
    for shared, better in ((True, True), (False, False)):
        groups, _ = _backwards(shared)
        cp = np.array([g.prefill.tokens_per_s for g in groups])
        cd = np.array([g.decode.tokens_per_s for g in groups])
        draws_p, draws_d = capacity_draws(groups, cp, cd, seed=0)
        split, alone = (
            float(
                evaluate_draws(
                    np.array(x, dtype=np.float64), sizes, draws_p, draws_d, isl, osl, Routing()
                ).mean()
            )
            for x in ((7, 6), (8, 5))
        )
        assert (alone >= split) is better
