"""The pool-balance model and the best placement of the same GPUs (DESIGN.md, physics).

A disaggregated pool sustains requests/s = min(prefill capacity / mean prompt length, decode capacity /
mean output length), and tokens/s = requests/s x (prompt + output length). The search keeps every worker on
its GPUs (same counts per SKU and TP group) and chooses how many of each group's workers prefill; a group
whose memory cannot hold the model and a minimum KV cache in a role gets no worker in that role. A plan with
more role changes must beat one with fewer by more than ``tolerance``: a worker is misplaced only when
moving it matters.

A phase's capacity is the sum of its workers' under a load-aware router, and the slowest worker's times
their number under round-robin (``Routing``, inferred from how evenly work is spread). The plan is chosen
on its expected rate over capacities drawn within their uncertainties, so a plan that balances on the
edge of an unmeasured capacity loses to one with headroom. The draws keep what the groups' errors share
(``RoleCapacity.shared``: a borrowed calibration, the same model extrapolated): drawn independently, a
plan that spreads a phase over two SKUs whose figures come from one source would look safer than it is.
Among target plans that sustain as much, one whose non-binding phase has more spare capacity (buffer
against a shift of the mix or a worker down) by more than ``tolerance`` is worth its extra role changes;
a pool is never moved for buffer alone.

Lost tokens/s = best - current, both saturated: the current placement's phase capacities are measured
where the pool was seen saturated in that phase, modelled otherwise; the low/high range comes from
re-evaluating both plans under the capacity draws (10th and 90th percentiles). When the pool is
demand-limited (it served even its peak hours), the loss is idle capacity, priced per week at the catalog's
hourly prices ("price unknown" where the catalog has none), not undelivered tokens.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.capacity import GroupCapacity, RoleCapacity

HOURS_PER_WEEK = 168.0
EXHAUSTIVE_LIMIT = 200_000  # candidate plans enumerated exhaustively; larger pools use a frontier sweep
_DRAWS = 256
SHORTLIST = 64  # plans whose expected rate is computed (the best at the central capacities)


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
class Change:
    row: int  # grid row of the worker
    group: int  # index into the groups
    to_role: str  # "prefill" or "decode"
    share: float  # of the plan's gain attributed to this worker


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
    """Capacity of a phase given workers per group (rows of ``n``) and per-worker speeds ``c``."""
    if not equal:
        return n @ c
    slowest = np.where(n > 0, c[None, :], np.inf).min(axis=1)
    return np.where(np.isfinite(slowest), n.sum(axis=1) * np.where(np.isfinite(slowest), slowest, 0.0), 0.0)


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


def spare(
    prompt: npt.NDArray[np.float64], generated: npt.NDArray[np.float64], isl: float, osl: float
) -> npt.NDArray[np.float64]:
    """Spare capacity of the phase that does not bind, as a share of the rate: how far the mix can shift
    toward that phase (or how many of its workers can be down) before it binds; 0 where a phase is empty."""
    p, d = prompt / isl, generated / osl
    low, high = np.minimum(p, d), np.maximum(p, d)
    out: npt.NDArray[np.float64] = np.where(low > 0, high / np.where(low > 0, low, 1.0) - 1.0, 0.0)
    return out


_SAME_RATE = 1e-9  # relative: expected rates this close are equal (floating-point sums of equal draws)


def best_plan(
    sizes: npt.NDArray[np.int64],
    draws_p: npt.NDArray[np.float64],
    draws_d: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    current: npt.NDArray[np.int64],
    tolerance: float,
    routing: Routing | None = None,
    shortlist: int = SHORTLIST,
) -> npt.NDArray[np.int64]:
    """The plan (prefill workers per group) with the highest *expected* request rate over capacity draws
    (rows of ``draws_p``/``draws_d``; the first row is the central estimate), preferring fewer role
    changes: a plan with more changes must beat the incumbent by ``tolerance``. The rate is the minimum
    of two pools, so a plan that balances on the edge of one pool's uncertain capacity loses expected
    rate to one with headroom where the model is least sure.

    Once the pool is worth moving (the incumbent is no longer the current plan), a plan with more changes
    that sustains at least the incumbent's expected rate also wins when the spare capacity of its
    non-binding phase (:func:`spare`, at the central capacities) exceeds the incumbent's by ``tolerance``:
    the same tokens with more buffer. A pool is never moved for buffer alone."""
    r = routing or Routing()
    plans = candidates(sizes, draws_p[0], draws_d[0], current)
    central, _, _ = evaluate(plans, sizes, draws_p[0], draws_d[0], isl, osl, r)
    if len(plans) > shortlist:  # expected rates only for the best plans at the central capacities
        keep = np.argsort(-central, kind="stable")[:shortlist]
        plans = np.vstack([current[None, :], plans[keep]])
    expected = np.array(
        [_draw_rates(x.astype(np.float64), sizes, draws_p, draws_d, isl, osl, r).mean() for x in plans]
    )
    _, prompt, generated = evaluate(plans, sizes, draws_p[0], draws_d[0], isl, osl, r)
    buffer = spare(prompt, generated, isl, osl)
    changes = np.abs(plans - current[None, :]).sum(axis=1)
    chosen = current
    chosen_rate = float(_draw_rates(current.astype(np.float64), sizes, draws_p, draws_d, isl, osl, r).mean())
    chosen_buffer, moved = 0.0, False
    for k in np.unique(changes):
        if k == 0:
            continue
        at_k = changes == k
        better = expected > chosen_rate * (1.0 + tolerance)
        if chosen_rate <= 0:
            better |= expected > 0
        if moved:
            better |= (expected >= chosen_rate * (1.0 - _SAME_RATE)) & (buffer > chosen_buffer + tolerance)
        found = np.flatnonzero(at_k & better)
        if found.size:
            i = int(found[np.lexsort((-buffer[found], -expected[found]))[0]])
            chosen, chosen_rate, chosen_buffer, moved = plans[i], float(expected[i]), float(buffer[i]), True
    return np.asarray(chosen, dtype=np.int64)


def _changes(
    groups: Sequence[GroupCapacity],
    current_roles: Sequence[Sequence[tuple[int, str]]],
    best: Plan,
    isl: float,
    osl: float,
) -> tuple[Change, ...]:
    """The workers whose role differs in the best plan: decode workers move to prefill lowest id first,
    prefill workers to decode highest id first (``current_roles`` lists each group by worker id)."""
    moves: list[tuple[int, int, str, float]] = []
    for g, (group, members) in enumerate(zip(groups, current_roles, strict=True)):
        prefilling = [row for row, role in members if role == "prefill"]
        decoding = [row for row, role in members if role == "decode"]
        delta = best.prefill[g] - len(prefilling)
        if delta > 0:
            moves += [(row, g, "prefill", group.prefill.tokens_per_s / isl) for row in decoding[:delta]]
        elif delta < 0:  # the prefill workers with the highest ids decode first
            moves += [(row, g, "decode", group.decode.tokens_per_s / osl) for row in prefilling[delta:]]
    total = sum(weight for *_, weight in moves) or 1.0
    return tuple(Change(row, g, role, weight / total) for row, g, role, weight in moves)


def _with_measured(plan: Plan, measured: tuple[float | None, float | None], isl: float, osl: float) -> Plan:
    """The plan with a phase capacity replaced by its measurement where there is one."""
    prompt = measured[0] if measured[0] is not None else plan.prefill_tokens_per_s
    generated = measured[1] if measured[1] is not None else plan.decode_tokens_per_s
    if (prompt, generated) == (plan.prefill_tokens_per_s, plan.decode_tokens_per_s):
        return plan
    rate = min(prompt / isl, generated / osl)
    bound = "prefill" if prompt / isl <= generated / osl else "decode"
    return Plan(plan.prefill, rate, rate * (isl + osl), prompt, generated, bound)


def _draw_rates(
    x: npt.NDArray[np.float64],
    sizes: npt.NDArray[np.int64],
    draws_p: npt.NDArray[np.float64],
    draws_d: npt.NDArray[np.float64],
    isl: float,
    osl: float,
    r: Routing,
) -> npt.NDArray[np.float64]:
    """Request rate of one plan under each capacity draw (rows)."""
    n_p = np.broadcast_to(x, draws_p.shape)
    n_d = np.broadcast_to(sizes - x, draws_d.shape)

    def phase(n: npt.NDArray[np.float64], c: npt.NDArray[np.float64], equal: bool) -> npt.NDArray[np.float64]:
        if not equal:
            total: npt.NDArray[np.float64] = (n * c).sum(axis=1)
            return total
        slowest = np.where(n > 0, c, np.inf).min(axis=1)
        return np.where(
            np.isfinite(slowest), n.sum(axis=1) * np.where(np.isfinite(slowest), slowest, 0.0), 0.0
        )

    return np.minimum(phase(n_p, draws_p, r.prefill_equal) / isl, phase(n_d, draws_d, r.decode_equal) / osl)


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
    tolerance: float = 0.01,
    routing: Routing | None = None,
    measured: tuple[float | None, float | None] = (None, None),
    seed: int = 0,
) -> PlacementResult:
    """Best placement of a disaggregated pool's workers. ``current_roles`` lists, per group, the
    (grid row, "prefill"|"decode") of each available worker, by worker id.

    The plan is chosen on its expected rate over capacity draws (see :func:`best_plan`); the loss is
    that plan's gain at the central capacities, its range the 10th-90th percentiles over the draws.
    ``measured`` holds the current placement's prompt and generated tokens/s where the pool was seen
    saturated in that phase: a saturated phase's delivered throughput is its capacity, so it replaces the
    model's figure for the current plan (the counterfactual plans have no such measurement).
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
    chosen = best_plan(sizes, draws_p, draws_d, isl, osl, current_x, tolerance, r)
    best = _plan([int(v) for v in chosen], sizes, cp, cd, isl, osl, r)
    if best.tokens_per_s <= current.tokens_per_s:
        best = current
    lost = max(0.0, best.tokens_per_s - current.tokens_per_s)
    low = high = lost
    if best.prefill != current.prefill:
        offset = (current.request_rate - modeled.request_rate) * (isl + osl)  # measured minus modeled now
        xb = np.array(best.prefill, dtype=np.float64)
        xc = current_x.astype(np.float64)
        rate_best = _draw_rates(xb, sizes, draws_p, draws_d, isl, osl, r)
        rate_cur = _draw_rates(xc, sizes, draws_p, draws_d, isl, osl, r)
        gains = (rate_best - rate_cur) * (isl + osl) - offset
        low = max(0.0, min(lost, float(np.quantile(gains, 0.1))))
        high = max(lost, float(np.quantile(gains, 0.9)))
    gpus = int(sum(len(m) * g.group.tp for g, m in zip(groups, current_roles, strict=True)))
    prices = [g.group.sku.hourly_price_usd for g in groups]
    weekly = (
        float(
            sum(
                len(m) * g.group.tp * (price or 0.0)
                for g, m, price in zip(groups, current_roles, prices, strict=True)
            )
        )
        * HOURS_PER_WEEK
        if all(price is not None for price in prices)
        else None
    )
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
        changes=_changes(groups, current_roles, best, isl, osl),
        sizes=tuple(int(v) for v in sizes),
        routing=r,
        gpus=gpus,
        weekly_cost_usd=weekly,
        idle_cost_per_week_usd=idle_cost,
        misplacement_cost_per_week_usd=misplacement_cost,
        isl=isl,
        osl=osl,
    )
