"""The pool-balance model and the best placement of the same GPUs.

requests/s = min(prefill capacity / mean prompt, decode capacity / mean output). A plan with more role
changes wins only when it sustains more on average and in most capacity draws (``CONFIDENCE``). Which
workers move is chosen from telemetry, never by id. Reasoning: docs/analyzer.md#split_search
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.loss_range import held_back_cause, range_cause
from analyzer.pools.worker_choice import Change, WorkerLoad, changes_for

HOURS_PER_WEEK = 168.0
EXHAUSTIVE_LIMIT = 200_000  # candidate plans enumerated exhaustively; larger pools use a frontier sweep
_DRAWS = 256
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
# The capacity draws are a fixed sample of the uncertainty, the same for every pool and segment: the same
# capacities give the same decision wherever and whenever they are analysed (no randomness in a decision).
DECISION_SEED = 0


@dataclass(frozen=True)
class Plan:
    """How many workers of each group prefill (the rest decode), and what that sustains."""

    prefill: tuple[int, ...]
    request_rate: float
    tokens_per_s: float
    prefill_tokens_per_s: float  # prompt-token capacity
    decode_tokens_per_s: float  # generated-token capacity
    bound: str  # the pool that limits the request rate: "prefill" or "decode"


@dataclass(frozen=True)
class Routing:
    """How the router spreads each phase's work over its workers: in proportion to their speed (a
    load-aware router) or equally (round-robin), where the slowest worker bounds the phase."""

    prefill_equal: bool = False
    decode_equal: bool = False


@dataclass(frozen=True)
class PlacementResult:
    groups: tuple[GroupCapacity, ...]
    current: Plan
    best: Plan
    lost_tokens_per_s: float
    lost_low: float
    lost_high: float
    demand_tokens_per_s: float
    peak_demand_tokens_per_s: float
    utilisation: float  # demand / current capacity
    demand_limited: bool
    changes: tuple[Change, ...]
    sizes: tuple[int, ...]  # workers per group in the search
    routing: Routing
    gpus: int
    weekly_cost_usd: float | None  # the pool's GPUs at catalog prices, None where a price is unknown
    idle_cost_per_week_usd: float | None
    misplacement_cost_per_week_usd: float | None
    isl: float = math.nan  # the mix the plans were evaluated at (mean prompt and output tokens)
    osl: float = math.nan
    range_cause: str = ""  # where lost_low is 0 while the loss is not: the uncertainty that takes it there
    # Whether the current plan's prefill and decode figures are measurements (seen saturated), not the model's
    current_measured: tuple[bool, bool] = (False, False)

    def lost_requests(self, bound: str = "") -> float:
        """Lost requests/s (``bound`` "", "low" or "high"): every plan's tokens are requests x (isl + osl)."""
        tokens = {"": self.lost_tokens_per_s, "low": self.lost_low, "high": self.lost_high}[bound]
        return tokens / (self.isl + self.osl) if self.isl + self.osl > 0 else math.nan

    def lost_output_tokens(self, bound: str = "") -> float:
        """Lost generated tokens/s (``bound`` "", "low" or "high"): lost requests x mean output length."""
        return self.lost_requests(bound) * self.osl


def _phase_capacity(
    n: npt.NDArray[np.float64], c: npt.NDArray[np.float64], equal: bool
) -> npt.NDArray[np.float64]:
    """Capacity of a phase given workers per group ``n`` and per-worker speeds ``c``, the groups on the last
    axis, broadcast over the others (plans, capacity draws). With ``equal`` routing every worker gets an
    equal share, so the slowest group in use paces them all."""
    n, c = np.broadcast_arrays(n, c)
    if not equal:
        total: npt.NDArray[np.float64] = (n * c).sum(axis=-1)
        return total
    slowest = np.where(n > 0, c, np.inf).min(axis=-1)
    return np.where(np.isfinite(slowest), n.sum(axis=-1) * np.where(np.isfinite(slowest), slowest, 0.0), 0.0)


def evaluate(
    prefill: npt.NDArray[np.float64] | npt.NDArray[np.int64] | Sequence[int],
    sizes: npt.NDArray[np.int64],
    cp: npt.NDArray[np.float64],
    cd: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    routing: Routing | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Request rate, prompt capacity and generated capacity of plans (rows of ``prefill``)."""
    r = routing or Routing()
    x = np.atleast_2d(np.asarray(prefill, dtype=np.float64))
    prompt = _phase_capacity(x, cp, r.prefill_equal)
    generated = _phase_capacity(sizes[None, :] - x, cd, r.decode_equal)
    return np.minimum(prompt / isl, generated / osl), prompt, generated


def _plan(
    x: Sequence[int],
    sizes: npt.NDArray[np.int64],
    cp: npt.NDArray[np.float64],
    cd: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    routing: Routing,
) -> Plan:
    rate, prompt, generated = evaluate(x, sizes, cp, cd, isl, osl, routing)
    r = float(rate[0])
    bound = "prefill" if prompt[0] / isl <= generated[0] / osl else "decode"
    return Plan(tuple(int(v) for v in x), r, r * (isl + osl), float(prompt[0]), float(generated[0]), bound)


def candidates(
    sizes: npt.NDArray[np.int64],
    cp: npt.NDArray[np.float64],
    cd: npt.NDArray[np.float64],
    current: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Plans to consider: every split when few, else the comparative-advantage frontier and its
    neighbours (groups ordered by prefill/decode speed ratio, prefill filled from the top)."""
    allowed_low = np.where(cd > 0, 0, sizes)  # a group that cannot decode prefills entirely
    allowed_high = np.where(cp > 0, sizes, 0)
    allowed_low = np.minimum(allowed_low, allowed_high)
    # A group that fits the model in neither role (a MIG slice too small for it) keeps its split: no role
    # is ever recommended onto hardware that cannot hold the model.
    neither = (cp <= 0) & (cd <= 0)
    allowed_low = np.where(neither, current, allowed_low)
    allowed_high = np.where(neither, current, allowed_high)
    spans = [range(int(lo), int(hi) + 1) for lo, hi in zip(allowed_low, allowed_high, strict=True)]
    if math.prod(len(s) for s in spans) <= EXHAUSTIVE_LIMIT:
        return np.array(list(itertools.product(*spans)), dtype=np.int64).reshape(-1, len(sizes))
    order = np.argsort(-(cp / np.maximum(cd, 1e-12)), kind="stable")
    rows = [current.copy()]
    x = allowed_low.copy()
    rows.append(x.copy())
    for g in order:
        for _ in range(int(allowed_high[g] - x[g])):
            x[g] += 1
            rows.append(x.copy())
    frontier = np.array(rows, dtype=np.int64)
    # Neighbours: move one worker between any two groups, around every frontier point.
    extra = []
    for point in frontier:
        for a, b in itertools.permutations(range(len(sizes)), 2):
            y = point.copy()
            y[a] += 1
            y[b] -= 1
            if allowed_low[a] <= y[a] <= allowed_high[a] and allowed_low[b] <= y[b] <= allowed_high[b]:
                extra.append(y)
    return np.unique(np.vstack([frontier, *([np.array(extra)] if extra else [])]), axis=0)


_SAME_RATE = 1e-9  # relative: rates this close are equal (floating-point sums of equal draws)


def spare(
    prompt: npt.NDArray[np.float64], generated: npt.NDArray[np.float64], isl: float, osl: float
) -> npt.NDArray[np.float64]:
    """Spare capacity of the phase that does not bind, as a share of the rate (0 where a phase is empty)."""
    p, d = prompt / isl, generated / osl
    low, high = np.minimum(p, d), np.maximum(p, d)
    out: npt.NDArray[np.float64] = np.where(low > 0, high / np.where(low > 0, low, 1.0) - 1.0, 0.0)
    return out


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
    held_back, small_gain = None, None
    if moved and current_rates.mean() > 0:
        chosen, held_back, small_gain = _act_on(path, current, current_rates, act, min_gain)
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
            held_back = None
    elif held_back is None and current_rates.mean() > 0:
        held_back = _best_other(plans, expected, current)  # what the range's high end may reach
        alternative = held_back is not None
    reachable = np.maximum(rates.max(axis=0), current_rates) - current_rates
    return PlanChoice(np.asarray(chosen, dtype=np.int64), held_back, small_gain, alternative, reachable)


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


def _with_measured(plan: Plan, measured: tuple[float | None, float | None], isl: float, osl: float) -> Plan:
    """The plan with a phase capacity replaced by its measurement where there is one."""
    prompt = measured[0] if measured[0] is not None else plan.prefill_tokens_per_s
    generated = measured[1] if measured[1] is not None else plan.decode_tokens_per_s
    if (prompt, generated) == (plan.prefill_tokens_per_s, plan.decode_tokens_per_s):
        return plan
    rate = min(prompt / isl, generated / osl)
    bound = "prefill" if prompt / isl <= generated / osl else "decode"
    return Plan(plan.prefill, rate, rate * (isl + osl), prompt, generated, bound)


def draw_rates(
    x: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    draws_p: npt.NDArray[np.float64],
    draws_d: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    r: Routing,
) -> npt.NDArray[np.float64]:
    """Request rate of one plan (prefill workers per group ``x``) under each capacity draw (rows)."""
    prefill = np.asarray(x, dtype=np.float64)
    prompt = _phase_capacity(prefill, draws_p, r.prefill_equal)
    generated = _phase_capacity(sizes - prefill, draws_d, r.decode_equal)
    return np.minimum(prompt / isl, generated / osl)


def weekly_cost_usd(groups: Sequence[GroupCapacity], workers: Sequence[int]) -> float | None:
    """What ``workers`` per group cost a week at the catalog's hourly prices; None where a group in use has
    no price (never $0)."""
    total = 0.0
    for cap, n in zip(groups, workers, strict=True):
        if n <= 0:
            continue
        price = cap.group.sku.hourly_price_usd
        if price is None:
            return None
        total += n * cap.group.tp * price
    return total * HOURS_PER_WEEK


def capacity_draws(
    groups: Sequence[GroupCapacity], cp: npt.NDArray[np.float64], cd: npt.NDArray[np.float64], seed: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per-worker capacities in each role (rows: row 0 the central estimate, then ``_DRAWS`` lognormal
    draws within each capacity's uncertainty). In each role one common normal is shared by the groups in
    proportion to ``RoleCapacity.correlation``, so two groups' draws correlate by the product of their
    shares while each keeps its own spread."""
    rng = np.random.default_rng(seed)
    own_p = rng.normal(0.0, 1.0, (_DRAWS, len(groups)))
    own_d = rng.normal(0.0, 1.0, (_DRAWS, len(groups)))
    common = rng.normal(0.0, 1.0, (_DRAWS, 2))

    def draws(
        central: npt.NDArray[np.float64], roles: list[RoleCapacity], own: npt.NDArray[np.float64], k: int
    ) -> npt.NDArray[np.float64]:
        rho = np.array([c.correlation for c in roles])
        sigma = np.log1p(np.array([c.uncertainty for c in roles]))
        noise = rho[None, :] * common[:, k : k + 1] + np.sqrt(1.0 - rho**2)[None, :] * own
        out: npt.NDArray[np.float64] = central[None, :] * np.exp(
            np.vstack([np.zeros(len(roles)), noise]) * sigma[None, :]
        )
        return out

    return (
        draws(cp, [g.prefill for g in groups], own_p, 0),
        draws(cd, [g.decode for g in groups], own_d, 1),
    )


def place(
    groups: Sequence[GroupCapacity],
    current_roles: Sequence[Sequence[tuple[int, str]]],
    *,
    isl: float,
    osl: float,
    demand_tokens_per_s: float,
    peak_demand_tokens_per_s: float,
    tolerance: float = 0.0,
    routing: Routing | None = None,
    measured: tuple[float | None, float | None] = (None, None),
    seed: int = DECISION_SEED,
    loads: Mapping[int, WorkerLoad] | None = None,
    confidence: float = CONFIDENCE,
    headroom: float = HEADROOM,
    standing: Sequence[int] | None = None,
    act: float = ACT,
    min_gain: float = MIN_GAIN,
    dominance: float = DOMINANCE,
) -> PlacementResult:
    """Best placement of a disaggregated pool's workers. ``current_roles`` lists, per group, the
    (grid row, "prefill"|"decode") of each available worker; ``loads`` (grid row -> ``WorkerLoad``) chooses
    the workers that change role. ``measured``: the current placement's prompt and generated tokens/s where
    the pool was seen saturated in that phase, which replace the model's figures for the current plan.
    ``standing``: prefill workers per group of the plan recommended for the same workers before (the
    previous segment), kept while its gain's high end stays positive. Reasoning: docs/analyzer.md#split_search
    """
    r = routing or Routing()
    sizes = np.array([len(m) for m in current_roles], dtype=np.int64)
    cp = np.array([g.prefill.tokens_per_s if g.prefill.fits else 0.0 for g in groups])
    cd = np.array([g.decode.tokens_per_s if g.decode.fits else 0.0 for g in groups])
    current_x = np.array(
        [sum(1 for _, role in m if role == "prefill") for m in current_roles], dtype=np.int64
    )
    modeled = _plan([int(v) for v in current_x], sizes, cp, cd, isl, osl, r)
    current = _with_measured(modeled, measured, isl, osl)
    draws_p, draws_d = capacity_draws(groups, cp, cd, seed)
    choice = choose_plan(
        sizes,
        draws_p,
        draws_d,
        isl,
        osl,
        current_x,
        tolerance,
        r,
        confidence=confidence,
        headroom=headroom,
        standing=None if standing is None else np.array(standing, dtype=np.int64),
        act=act,
        min_gain=min_gain,
        dominance=dominance,
    )
    chosen = choice.chosen
    best = _plan([int(v) for v in chosen], sizes, cp, cd, isl, osl, r)
    if best.tokens_per_s <= current.tokens_per_s or best.prefill == current.prefill:
        # The same split is the same pool: its figure is the current one (measured where it was), never a
        # modelled twin of it, so a pool already at its best split loses nothing.
        best = current
    lost = max(0.0, best.tokens_per_s - current.tokens_per_s)
    low = high = lost
    cause = ""
    moved = best.prefill != current.prefill
    other = np.array(best.prefill, dtype=np.int64) if moved else choice.held_back
    if other is not None:  # the recommended move, or the one held back by ``act``: its gain over the draws
        offset = (current.request_rate - modeled.request_rate) * (isl + osl)  # measured minus modeled now
        if choice.alternative:  # no move the search made: the model's comparison alone, never a phantom
            offset = 0.0
        xo, xc = other.astype(np.float64), current_x.astype(np.float64)

        def gain_at(dp: npt.NDArray[np.float64], dd: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            rates = draw_rates(xo, sizes, dp, dd, isl, osl, r) - draw_rates(xc, sizes, dp, dd, isl, osl, r)
            out: npt.NDArray[np.float64] = rates * (isl + osl)
            return out

        gains = gain_at(draws_p, draws_d) - offset
        high = max(lost, float(np.quantile(gains, 0.9)))
        if moved:
            low = max(0.0, min(lost, float(np.quantile(gains, 0.1))))
            if lost > 0 and low <= 0:
                cause = range_cause(groups, gains, gain_at, draws_p, draws_d, offset)
        if choice.reachable is not None:  # in some worlds the draws allow, another split gains more
            high = max(high, float(np.quantile(choice.reachable * (isl + osl) - offset, 0.9)))
        if not moved and high > 0:
            cause = held_back_cause(gains, high, choice.small_gain, min_gain)
    gpus = int(sum(len(m) * g.group.tp for g, m in zip(groups, current_roles, strict=True)))
    weekly = weekly_cost_usd(groups, [len(m) for m in current_roles])
    capacity = current.tokens_per_s
    utilisation = demand_tokens_per_s / capacity if capacity > 0 else float("nan")
    demand_limited = capacity > 0 and peak_demand_tokens_per_s <= capacity
    idle_cost = weekly * max(0.0, 1.0 - utilisation) if weekly is not None and capacity > 0 else None
    misplacement_cost = (
        weekly * lost / best.tokens_per_s if weekly is not None and best.tokens_per_s > 0 else None
    )
    return PlacementResult(
        groups=tuple(groups),
        current=current,
        best=best,
        lost_tokens_per_s=lost,
        lost_low=low,
        lost_high=high,
        demand_tokens_per_s=demand_tokens_per_s,
        peak_demand_tokens_per_s=peak_demand_tokens_per_s,
        utilisation=utilisation,
        demand_limited=demand_limited,
        changes=changes_for(groups, current_roles, best.prefill, isl, osl, loads),
        sizes=tuple(int(v) for v in sizes),
        routing=r,
        gpus=gpus,
        weekly_cost_usd=weekly,
        idle_cost_per_week_usd=idle_cost,
        misplacement_cost_per_week_usd=misplacement_cost,
        isl=isl,
        osl=osl,
        range_cause=cause,
        current_measured=(measured[0] is not None, measured[1] is not None),
    )
