"""The best placement of a disaggregated pool's GPUs, and what the current one loses against it.

What a split sustains is :mod:`analyzer.pools.plan_rates`; which split to recommend,
:mod:`analyzer.pools.plan_choice`. Which workers move is chosen from telemetry, never by id. Reasoning:
docs/analyzer.md#split_search
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.pools.capacity import GroupCapacity
from analyzer.pools.loss_range import held_back_cause, larger_move_cause, range_cause
from analyzer.pools.plan_choice import ACT, CONFIDENCE, DOMINANCE, HEADROOM, MIN_GAIN, PlanChoice, choose_plan
from analyzer.pools.plan_rates import Plan, Routing, capacity_draws, draw_rates, evaluate
from analyzer.pools.worker_choice import Change, WorkerLoad, changes_for

HOURS_PER_WEEK = 168.0
# The capacity draws are a fixed sample of the uncertainty, the same for every pool and segment: the same
# capacities give the same decision wherever and whenever they are analysed (no randomness in a decision).
DECISION_SEED = 0


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
    # The plan the search chose but did not recommend because its gain was not sure (``act``), on a
    # supply-limited pool: the loss is its gain at the central capacities, its range running down to 0.
    # None: the loss is ``best``'s.
    unsure: Plan | None = None
    # Whether the current plan's prefill and decode figures are measurements (seen saturated), not the model's
    current_measured: tuple[bool, bool] = (False, False)

    @property
    def counted(self) -> Plan:
        """The split the loss is counted against: ``best``, or the ``unsure`` plan held back."""
        return self.best if self.unsure is None else self.unsure

    @property
    def recommended_gain(self) -> float:
        """Tokens/s the recommendation gains: the loss, or what the recommended split adds where a larger
        move held back is the loss (``unsure``; 0 where nothing is recommended)."""
        if self.unsure is None:
            return self.lost_tokens_per_s
        return max(0.0, self.best.tokens_per_s - self.current.tokens_per_s)

    def requests_for(self, tokens_per_s: float) -> float:
        """Requests/s behind ``tokens_per_s`` at the pool's mix: every plan's tokens are requests x (isl +
        osl)."""
        return tokens_per_s / (self.isl + self.osl) if self.isl + self.osl > 0 else math.nan

    def lost_requests(self, bound: str = "") -> float:
        """Lost requests/s (``bound`` "", "low" or "high")."""
        return self.requests_for(
            {"": self.lost_tokens_per_s, "low": self.lost_low, "high": self.lost_high}[bound]
        )

    def lost_output_tokens(self, bound: str = "") -> float:
        """Lost generated tokens/s (``bound`` "", "low" or "high"): lost requests x mean output length."""
        return self.lost_requests(bound) * self.osl


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
    bound = _bound(float(prompt[0]), float(generated[0]), isl, osl)
    return Plan(tuple(int(v) for v in x), r, r * (isl + osl), float(prompt[0]), float(generated[0]), bound)


def _bound(prompt: float, generated: float, isl: float, osl: float) -> str:
    """The phase that bounds a plan's request rate (prefill on ties)."""
    return "prefill" if prompt / isl <= generated / osl else "decode"


def _with_measured(plan: Plan, measured: tuple[float | None, float | None], isl: float, osl: float) -> Plan:
    """The plan with a phase capacity replaced by its measurement where there is one."""
    prompt = measured[0] if measured[0] is not None else plan.prefill_tokens_per_s
    generated = measured[1] if measured[1] is not None else plan.decode_tokens_per_s
    if (prompt, generated) == (plan.prefill_tokens_per_s, plan.decode_tokens_per_s):
        return plan
    rate = min(prompt / isl, generated / osl)
    bound = _bound(prompt, generated, isl, osl)
    return Plan(plan.prefill, rate, rate * (isl + osl), prompt, generated, bound)


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
    supply_limited: bool = False,
) -> PlacementResult:
    """Best placement of a disaggregated pool's workers. ``current_roles`` lists, per group, the
    (grid row, "prefill"|"decode") of each available worker; ``loads`` (grid row -> ``WorkerLoad``) chooses
    the workers that change role. ``measured``: the current placement's prompt and generated tokens/s where
    the pool was seen saturated in that phase, which replace the model's figures for the current plan.
    ``standing``: prefill workers per group of the plan recommended for the same workers before (the
    previous segment), kept while its gain's high end stays positive. ``supply_limited``: the pool's own
    evidence shows demand it does not serve (``pool_state``), so a move held back only because its gain is
    not sure counts its likely gain as the loss (``PlacementResult.unsure``); a pool that serves its demand
    reports 0 then, nothing showing that the capacity is needed. Reasoning: docs/analyzer.md#split_search
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
    unsure = _unsure(choice, best, supply_limited, sizes, cp, cd, isl, osl, r)
    counted = best if unsure is None else unsure
    lost = max(0.0, counted.tokens_per_s - current.tokens_per_s)
    drawn = _Drawn(sizes, current_x, draws_p, draws_d, isl, osl, r)
    low, high, cause = _loss_range(groups, choice, drawn, current, modeled, best, lost, min_gain)
    if unsure is not None and best is not current:  # a sure move recommended, a larger one is the loss
        assert choice.unsure_wins is not None
        cause = larger_move_cause(lost, best.tokens_per_s - current.tokens_per_s, choice.unsure_wins)
    costs = _Costs.of(
        groups, current_roles, current, counted, lost, demand_tokens_per_s, peak_demand_tokens_per_s
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
        utilisation=costs.utilisation,
        demand_limited=costs.demand_limited,
        changes=changes_for(groups, current_roles, best.prefill, isl, osl, loads),
        sizes=tuple(int(v) for v in sizes),
        routing=r,
        gpus=costs.gpus,
        weekly_cost_usd=costs.weekly,
        idle_cost_per_week_usd=costs.idle,
        misplacement_cost_per_week_usd=costs.misplacement,
        isl=isl,
        osl=osl,
        range_cause=cause,
        current_measured=(measured[0] is not None, measured[1] is not None),
        unsure=unsure,
    )


def _unsure(
    choice: PlanChoice,
    best: Plan,
    supply_limited: bool,
    sizes: npt.NDArray[np.int64],
    cp: npt.NDArray[np.float64],
    cd: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    r: Routing,
) -> Plan | None:
    """The plan whose gain is the loss though it is not recommended: the search's choice, held back only
    because its gain is not sure (``act``), where nothing or a smaller sure move is recommended (``best``).
    The estimate and the decision are apart: a supply-limited pool most likely loses that gain, and whether
    to move for it is the decision. None on a pool that serves its demand (nothing shows that the capacity
    is needed), where no plan was held back by ``act`` (none won the search, or the gain is below
    ``min_gain``: the pool is at its best split within what matters), or where the held-back plan is not
    above ``best``'s figure (measured where a phase was seen saturated)."""
    if not supply_limited or choice.held_back is None or choice.unsure_wins is None:
        return None
    plan = _plan([int(v) for v in choice.held_back], sizes, cp, cd, isl, osl, r)
    return plan if plan.tokens_per_s > best.tokens_per_s else None


@dataclass(frozen=True)
class _Drawn:
    """The search's pool and its capacity draws: workers per group, prefill workers now, the draws, the mix
    and the routing."""

    sizes: npt.NDArray[np.int64]
    current_x: npt.NDArray[np.int64]
    draws_p: npt.NDArray[np.float64]
    draws_d: npt.NDArray[np.float64]
    isl: float
    osl: float
    routing: Routing

    def gain_at(
        self, other: npt.NDArray[np.int64], dp: npt.NDArray[np.float64], dd: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """Tokens/s plan ``other`` sustains over the current plan under each draw (rows of ``dp``/``dd``)."""
        xo, xc = other.astype(np.float64), self.current_x.astype(np.float64)
        s, r = self.sizes, self.routing
        rates = draw_rates(xo, s, dp, dd, self.isl, self.osl, r) - draw_rates(
            xc, s, dp, dd, self.isl, self.osl, r
        )
        out: npt.NDArray[np.float64] = rates * (self.isl + self.osl)
        return out


def _loss_range(
    groups: Sequence[GroupCapacity],
    choice: PlanChoice,
    drawn: _Drawn,
    current: Plan,
    modeled: Plan,
    best: Plan,
    lost: float,
    min_gain: float,
) -> tuple[float, float, str]:
    """(low, high, cause) of the loss ``best`` minus ``current``: the recommended move's, or the held-back
    one's, gain over the draws (docs/analyzer.md#split_search, "The loss's range")."""
    moved = best.prefill != current.prefill
    other = np.array(best.prefill, dtype=np.int64) if moved else choice.held_back
    if other is None:
        return lost, lost, ""
    tokens = drawn.isl + drawn.osl
    offset = (current.request_rate - modeled.request_rate) * tokens  # measured minus modeled now
    if choice.alternative:  # no move the search made: the model's comparison alone, never a phantom
        offset = 0.0

    def gain_at(dp: npt.NDArray[np.float64], dd: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return drawn.gain_at(other, dp, dd)

    gains = gain_at(drawn.draws_p, drawn.draws_d) - offset
    low, high, cause = lost, max(lost, float(np.quantile(gains, 0.9))), ""
    if moved:
        low = max(0.0, min(lost, float(np.quantile(gains, 0.1))))
        if lost > 0 and low <= 0:
            cause = range_cause(groups, gains, gain_at, drawn.draws_p, drawn.draws_d, offset)
    elif lost > 0:  # held back, though most likely better (``unsure``): the move might not help
        low = 0.0
    if choice.reachable is not None:  # in some worlds the draws allow, another split gains more
        high = max(high, float(np.quantile(choice.reachable * tokens - offset, 0.9)))
    if not moved and high > 0:
        wins = float((gains > 0).mean()) if choice.unsure_wins is None else choice.unsure_wins
        cause = held_back_cause(wins, high, choice.small_gain, min_gain, lost)
    return low, high, cause


@dataclass(frozen=True)
class _Costs:
    """The pool's GPUs, its weekly cost and what of it idles or is lost to the placement."""

    gpus: int
    weekly: float | None
    utilisation: float
    demand_limited: bool
    idle: float | None
    misplacement: float | None

    @classmethod
    def of(
        cls,
        groups: Sequence[GroupCapacity],
        current_roles: Sequence[Sequence[tuple[int, str]]],
        current: Plan,
        best: Plan,
        lost: float,
        demand: float,
        peak: float,
    ) -> _Costs:
        gpus = int(sum(len(m) * g.group.tp for g, m in zip(groups, current_roles, strict=True)))
        weekly = weekly_cost_usd(groups, [len(m) for m in current_roles])
        capacity = current.tokens_per_s
        utilisation = demand / capacity if capacity > 0 else float("nan")
        idle = weekly * max(0.0, 1.0 - utilisation) if weekly is not None and capacity > 0 else None
        misplacement = (
            weekly * lost / best.tokens_per_s if weekly is not None and best.tokens_per_s > 0 else None
        )
        return cls(gpus, weekly, utilisation, capacity > 0 and peak <= capacity, idle, misplacement)
