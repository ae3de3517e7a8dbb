"""The pool-balance model: what a split of a pool's workers sustains, at central capacities and over
capacity draws within their uncertainty.

requests/s = min(prefill capacity / mean prompt, decode capacity / mean output), each phase's capacity the
sum of its workers' (a load-aware router) or the slowest one's times their number (round-robin). Which
split to recommend is :mod:`analyzer.pools.plan_choice`; the placement and its loss,
:mod:`analyzer.pools.split_search`. Reasoning: docs/analyzer.md#split_search
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.pools.capacity import GroupCapacity, RoleCapacity

EXHAUSTIVE_LIMIT = 200_000  # candidate plans enumerated exhaustively; larger pools use a frontier sweep
_DRAWS = 256
_SAME_RATE = 1e-9  # relative: rates this close are equal (floating-point sums of equal draws)


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


def spare(
    prompt: npt.NDArray[np.float64], generated: npt.NDArray[np.float64], isl: float, osl: float
) -> npt.NDArray[np.float64]:
    """Spare capacity of the phase that does not bind, as a share of the rate (0 where a phase is empty)."""
    p, d = prompt / isl, generated / osl
    low, high = np.minimum(p, d), np.maximum(p, d)
    out: npt.NDArray[np.float64] = np.where(low > 0, high / np.where(low > 0, low, 1.0) - 1.0, 0.0)
    return out


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
