"""What a pool's loss rests on: measured, calibrated, transferred or modelled capacities.

The loss is the best split's rate minus the current one's, and each rate is set by the phase that bounds
it. Its basis is the least direct source among the figures those two phases sum: the current split's
bounding phase is ``measured`` where the pool was seen saturated in it, otherwise the weakest source of the
groups serving it; the best split's, the weakest source of the groups that would serve its bounding phase.
Where no move is recommended and the loss is 0, every other split was compared and none was likely
enough better, so the basis is the weakest capacity of the whole comparison; where the move was held back
only because its gain is not sure (a supply-limited pool), the loss is that split's gain and rests on its
figures. Reasoning:
docs/analyzer.md#split_search
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analyzer.pools.capacity_types import GroupCapacity, RoleCapacity
from analyzer.pools.plan_rates import Plan
from analyzer.pools.split_search import PlacementResult
from analyzer.results.summary import LossBasisName

# From the most direct evidence to the least: the fleet's own evidence outranks the model.
ORDER: tuple[LossBasisName, ...] = ("measured", "calibrated", "transferred", "model")


@dataclass(frozen=True)
class LossBasis:
    """The least direct source the loss rests on and which figure it is."""

    source: LossBasisName
    detail: str


def _rank(source: str) -> int:
    """Position in :data:`ORDER`; an unknown source ranks as the model (never as measured)."""
    names: tuple[str, ...] = ORDER
    return names.index(source) if source in names else len(names) - 1


def _weakest(figures: Sequence[tuple[str, str]]) -> tuple[LossBasisName, str]:
    """The (source, what) of ``figures`` with the least direct source; the first of equals."""
    source, what = max(figures, key=lambda f: _rank(f[0]))
    return ORDER[_rank(source)], what


def _role(group: GroupCapacity, role: str) -> RoleCapacity:
    return group.prefill if role == "prefill" else group.decode


def _phase_figures(
    groups: Sequence[GroupCapacity], sizes: Sequence[int], plan: Plan, role: str
) -> list[tuple[str, str]]:
    """(source, what) of each group serving ``role`` under ``plan``."""
    out = []
    for g, group in enumerate(groups):
        workers = plan.prefill[g] if role == "prefill" else sizes[g] - plan.prefill[g]
        if workers > 0:
            out.append((_role(group, role).source, f"{group.group.key} {role}"))
    return out


def _side(pl: PlacementResult, plan: Plan, name: str, measured: bool) -> tuple[LossBasisName, str] | None:
    """The basis of one split's rate: its bounding phase's figures (None where no group serves it)."""
    role = plan.bound
    if measured:
        return "measured", f"the {name} split's {role} throughput, seen saturated"
    figures = _phase_figures(pl.groups, pl.sizes, plan, role)
    if not figures:
        return None
    source, what = _weakest(figures)
    return source, f"the {name} split's {role} rate: the {what} capacity"


def loss_basis(pl: PlacementResult | None) -> LossBasis | None:
    """The basis of the placement's loss; None where the loss was not estimated (no placement)."""
    if pl is None or not pl.groups:
        return None
    bound_measured = pl.current_measured[0 if pl.current.bound == "prefill" else 1]
    current = _side(pl, pl.current, "current", bound_measured)
    if pl.best.prefill == pl.current.prefill and pl.unsure is None:  # no move, no loss: every split compared
        every = [
            (_role(g, r).source, f"{g.group.key} {r}")
            for g in pl.groups
            for r in ("prefill", "decode")
            if _role(g, r).fits
        ]
        source, what = _weakest(every + ([current] if current else []))
        return LossBasis(source, f"no move recommended; the splits were compared on the {what} capacity")
    best = _side(pl, pl.counted, "best" if pl.unsure is None else "held-back", False)
    sides = [s for s in (current, best) if s is not None]
    if not sides:
        return None
    source, _ = _weakest(sides)
    return LossBasis(source, "; ".join(f"{what} ({src})" for src, what in sides))
