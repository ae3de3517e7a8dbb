"""Which split to recommend: the decision rule over capacity draws (docs/analyzer.md#split_search).

Plans are taken in order of role changes; one with more changes must win most of the draws
(``CONFIDENCE``), a move is recommended only where the low end of its gain is positive (``ACT``) and worth
its changes (``MIN_GAIN``), and a move recommended before stays while the high end of its gain stays
positive (hysteresis). The draws are a fixed sample, so the same capacities always give the same decision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.pools.plan_rates import _SAME_RATE, Routing, candidates, draw_rates, evaluate, spare

SHORTLIST = 64  # plans whose expected rate is computed (the best at the central capacities)
# Which plan: one with more role changes must beat the incumbent in this share of the capacity draws, three
# worlds in four the analyzer's uncertainty allows (well clear of the draws' own noise, about +-3 points).
CONFIDENCE = 0.75
# Whether to move: the chosen plan's gain over the current one must have a positive low end (the reported
# range's 10th percentile): it wins this share of the draws. A move recommended before stays recommended while
# the high end of its gain (the 90th percentile) stays positive, in more than ``1 - ACT`` of the draws: the
# band between the two is the hysteresis that keeps a recommendation from flapping.
ACT = 0.9
# Whether a move is worth its role changes at all: its expected gain over the current plan must be at least
# this share of the current rate, the least loss that is a warning (``findings.severity.warning_share``).
# Below it the pool is at its best split within what matters (a near-tie), so seeds never flip it.
MIN_GAIN = 0.02
# Spare capacity (of the phase that does not bind) a plan must add to be worth more role changes at the
# same expected rate, once the pool is worth moving: the non-binding phase on the hardware its bottleneck
# needs (decode on the higher-bandwidth SKU) absorbs a shift of the mix or a worker down.
HEADROOM = 0.05
# A plan with no more role changes than the search's pick, which sustains this share more on average and is a
# confident move itself, replaces the pick: the path never ends on a plan that is beaten in expectation by a
# smaller move. Half a percent: more than the draws' own sampling noise on one expected rate.
DOMINANCE = 0.005


@dataclass(frozen=True)
class PlanChoice:
    chosen: npt.NDArray[np.int64]  # prefill workers per group, recommended
    # The plan that would have been chosen but for ``act`` (its gain's low end is not positive) or for
    # ``min_gain`` (its expected gain is too small to be worth the role changes); with a move recommended,
    # the larger move it stops short of; with none considered, the other plan of the highest expected rate
    # (what the loss's range may reach). None: there is no other plan.
    held_back: npt.NDArray[np.int64] | None = None
    # The expected gain as a share of the current rate when ``min_gain`` held the plan back (None: ``act``).
    small_gain: float | None = None
    # ``held_back`` is no move the search made, only the best other plan: its gain is the model's alone.
    alternative: bool = False
    # Per capacity draw (requests/s): the most any plan considered sustains over the current plan. The loss
    # is the best split's rate minus the current one, and in each world the draws allow the best split may
    # be another: this is the loss's own spread, whichever plan is recommended.
    reachable: npt.NDArray[np.float64] | None = None
    # The share of the draws in which ``held_back`` sustains more than the current plan, where ``act`` alone
    # held it back (the decision's own test); None otherwise.
    unsure_wins: float | None = None


def choose_plan(
    sizes: npt.NDArray[np.int64],
    draws_p: npt.NDArray[np.float64],
    draws_d: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    current: npt.NDArray[np.int64],
    tolerance: float = 0.0,
    routing: Routing | None = None,
    shortlist: int = SHORTLIST,
    confidence: float = CONFIDENCE,
    headroom: float = HEADROOM,
    standing: npt.NDArray[np.int64] | None = None,
    act: float = ACT,
    min_gain: float = MIN_GAIN,
    dominance: float = DOMINANCE,
) -> PlanChoice:
    """The plan (prefill workers per group) to recommend, from capacity draws (rows of ``draws_p`` /
    ``draws_d``; the first row is the central estimate). Rules: docs/analyzer.md#split_search

    - Which plan: plans are taken in order of role changes; one replaces the incumbent when its expected
      rate is higher (by ``tolerance``) and it wins at least ``confidence`` of the draws against it. Once
      the pool moves, a plan with more changes at no loss of expected rate wins when it adds ``headroom``
      of spare capacity to the phase that does not bind. The pick then gives way to a plan with no more
      changes that sustains ``dominance`` more on average and is a move to recommend itself.
    - Whether to move: the plan is recommended only when the low end of its gain over the current plan
      is positive (it wins ``act`` of the draws) and its expected gain is at least ``min_gain`` of the
      current rate; else the current plan stays.
    - ``standing``: the plan recommended before (the previous segment's) stays while the high end of its
      gain stays positive (it wins more than ``1 - act`` of the draws against the current plan), unless
      a new plan wins ``act`` of them against it.
    """
    r = routing or Routing()
    alternative = False
    plans = candidates(sizes, draws_p[0], draws_d[0], current)
    central, _, _ = evaluate(plans, sizes, draws_p[0], draws_d[0], isl, osl, r)
    if len(plans) > shortlist:  # draws only for the best plans at the central capacities
        keep = np.argsort(-central, kind="stable")[:shortlist]
        plans = plans[keep]
    rates = np.vstack([draw_rates(x.astype(np.float64), sizes, draws_p, draws_d, isl, osl, r) for x in plans])
    expected = rates.mean(axis=1)
    _, prompt, generated = evaluate(plans, sizes, draws_p[0], draws_d[0], isl, osl, r)
    buffer = spare(prompt, generated, isl, osl)
    changes = np.abs(plans - current[None, :]).sum(axis=1)
    chosen, chosen_buffer, moved = current, 0.0, False
    chosen_rates = draw_rates(current.astype(np.float64), sizes, draws_p, draws_d, isl, osl, r)
    current_rates = chosen_rates
    path: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []  # each plan chosen, in order
    for k in np.unique(changes):
        if k == 0:
            continue
        chosen_rate = float(chosen_rates.mean())
        wins = (rates > chosen_rates[None, :] * (1.0 + _SAME_RATE)).mean(axis=1)
        better = (expected > chosen_rate * (1.0 + max(tolerance, _SAME_RATE))) & (wins >= confidence)
        if chosen_rate <= 0:
            better |= expected > 0
        if moved:  # the same tokens on average with each phase on the hardware it needs: more headroom
            better |= (expected >= chosen_rate * (1.0 - _SAME_RATE)) & (buffer > chosen_buffer + headroom)
        found = np.flatnonzero((changes == k) & better)
        if found.size:
            i = int(found[np.lexsort((-buffer[found], -wins[found], -expected[found]))[0]])
            chosen, chosen_rates, chosen_buffer, moved = plans[i], rates[i], float(buffer[i]), True
            path.append((chosen, chosen_rates))
    held_back, small_gain, unsure_wins = None, None, None
    if moved and current_rates.mean() > 0:
        chosen, held_back, small_gain = _act_on(path, current, current_rates, act, min_gain)
        if held_back is not None and small_gain is None:
            last_wins = float((path[-1][1] > current_rates * (1.0 + _SAME_RATE)).mean())
            unsure_wins = last_wins if last_wins < act else None
        if not np.array_equal(chosen, current):
            chosen = _undominated(
                plans, rates, expected, changes, chosen, current_rates, (act, min_gain, dominance)
            )
    if standing is not None and not np.array_equal(standing, current):
        chosen = _keep_standing(
            standing, chosen, current, (sizes, draws_p, draws_d, isl, osl, r), tolerance, act, min_gain
        )
    if not np.array_equal(chosen, current):
        small_gain = None
        if held_back is not None and np.array_equal(held_back, chosen):
            held_back, unsure_wins = None, None
    elif held_back is None and current_rates.mean() > 0:
        held_back = _best_other(plans, expected, current)  # what the range's high end may reach
        alternative = held_back is not None
    reachable = np.maximum(rates.max(axis=0), current_rates) - current_rates
    return PlanChoice(
        np.asarray(chosen, dtype=np.int64), held_back, small_gain, alternative, reachable, unsure_wins
    )


def _undominated(
    plans: npt.NDArray[np.int64],
    rates: npt.NDArray[np.float64],
    expected: npt.NDArray[np.float64],
    changes: npt.NDArray[np.int64],
    chosen: npt.NDArray[np.int64],
    current_rates: npt.NDArray[np.float64],
    rules: tuple[float, float, float],
) -> npt.NDArray[np.int64]:
    """The chosen plan, unless another with no more role changes sustains ``dominance`` more on average
    and is itself a move to recommend (it wins ``act`` of the draws against the current plan and gains
    ``min_gain``): then the highest such, the fewest changes among equals. The search's path compares
    each plan with the previous pick, so it can end on a sure small step past a better plan that was not
    sure against that pick."""
    act, min_gain, dominance = rules
    at = np.flatnonzero((plans == chosen[None, :]).all(axis=1))
    if at.size == 0:
        return chosen
    i = int(at[0])
    confident = (rates > current_rates[None, :] * (1.0 + _SAME_RATE)).mean(axis=1) >= act
    worth = expected >= current_rates.mean() * (1.0 + min_gain)
    better = (changes <= changes[i]) & (expected > expected[i] * (1.0 + dominance)) & confident & worth
    found = np.flatnonzero(better)
    if found.size == 0:
        return chosen
    j = int(found[np.lexsort((changes[found], -expected[found]))[0]])
    picked: npt.NDArray[np.int64] = plans[j]
    return picked


def _best_other(
    plans: npt.NDArray[np.int64], expected: npt.NDArray[np.float64], current: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64] | None:
    """The plan other than the current one with the highest expected rate (None: there is none). Where no
    move is recommended, its gain over the draws is the loss's range: 0 up to what it might add."""
    other = np.flatnonzero((plans != current[None, :]).any(axis=1))
    if other.size == 0:
        return None
    best: npt.NDArray[np.int64] = plans[int(other[np.argmax(expected[other])])]
    return best


def _act_on(
    path: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]],
    current: npt.NDArray[np.int64],
    current_rates: npt.NDArray[np.float64],
    act: float,
    min_gain: float,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None, float | None]:
    """(plan to recommend, the search's plan where that is not it, its expected gain share where only
    ``min_gain`` held it back).

    The search's last plan is recommended when its gain is confident (wins ``act`` of the draws against
    the current plan) and worth its role changes (``min_gain``). Else the latest plan of the search's path
    that is both, if any: a move with fewer role changes that surely gains, where the larger one might not
    (which stays the held-back plan: its possible gain is the loss's high end)."""
    last = path[-1][0]
    last_share: float | None = None
    for steps_back, (plan, rates) in enumerate(reversed(path)):
        confident = (rates > current_rates * (1.0 + _SAME_RATE)).mean() >= act
        share = float(rates.mean() / current_rates.mean() - 1.0)
        if confident and share >= min_gain:
            return plan, (last if steps_back else None), None
        if steps_back == 0:
            last_share = share if confident else None
    return current, last, last_share


_Draws = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64], float, float, Routing]


def _keep_standing(
    standing: npt.NDArray[np.int64],
    chosen: npt.NDArray[np.int64],
    current: npt.NDArray[np.int64],
    draws: _Draws,
    tolerance: float,
    confidence: float,
    min_gain: float = 0.0,
) -> npt.NDArray[np.int64]:
    """Hysteresis: the plan recommended before stays while the high end of its gain over the current plan
    is positive (it wins more than ``1 - confidence`` of the draws and more on average); a different plan
    replaces it only by winning ``confidence`` of the draws against it and gaining ``min_gain`` over it on
    average (two near-equal plans never take turns)."""
    sizes, draws_p, draws_d, isl, osl, r = draws
    if np.array_equal(chosen, standing):
        return chosen

    def rates(x: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return draw_rates(x.astype(np.float64), sizes, draws_p, draws_d, isl, osl, r)

    kept, now = rates(standing), rates(current)
    floor = now.mean() * (1.0 + max(tolerance, _SAME_RATE))
    if (kept > now * (1.0 + _SAME_RATE)).mean() <= 1.0 - confidence or kept.mean() <= floor:
        return chosen
    if np.array_equal(chosen, current):
        return standing
    new = rates(chosen)
    better = (new > kept * (1.0 + _SAME_RATE)).mean() >= confidence
    return chosen if better and new.mean() >= kept.mean() * (1.0 + min_gain) else standing
