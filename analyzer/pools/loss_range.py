"""Why a loss's low end reaches 0: the capacity whose uncertainty takes it there.

Each capacity in turn is held at its central value; the one that lifts the low end most is named.
Reasoning: docs/analyzer.md#split_search
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from analyzer.pools.capacity import GroupCapacity

_ORIGIN = {
    "measured": "measured on this pool's workers, seen saturated",
    "calibrated": "calibrated on this pool's workers' telemetry (not seen saturated)",
    "transferred": "borrowed from another SKU's calibration (no worker of this SKU runs the role)",
    "model": "the performance model's figure, uncalibrated",
}


def _describe(group: GroupCapacity, role: str) -> str:
    c = group.prefill if role == "prefill" else group.decode
    text = f"the {group.group.key} {role} capacity ({_ORIGIN.get(c.source, c.source)}, +-{c.uncertainty:.0%}"
    if c.shared > 0:
        text += f", {c.shared:.0%} of it shared with the pool's other groups"
    if role == "decode" and c.batch:
        text += f", at a saturated batch of {c.batch:.0f} sequences"
    if role == "decode" and group.kv_budget is not None:
        text += f", KV budget {group.kv_budget.source}"
    return text + ")"


def range_cause(
    groups: Sequence[GroupCapacity],
    gains: npt.NDArray[np.float64],
    gain_at: Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], npt.NDArray[np.float64]],
    draws_p: npt.NDArray[np.float64],
    draws_d: npt.NDArray[np.float64],
    offset: float,
) -> str:
    """Which uncertainty takes the loss's low end to 0: each capacity in turn is held at its central value
    (and the current plan's measurement replaced by the model); the one that lifts the 10th percentile most
    is named, with what the low end would be without it."""
    options: list[tuple[float, str, str]] = []
    for g, group in enumerate(groups):
        for role, draws in (("prefill", draws_p), ("decode", draws_d)):
            if draws[0, g] <= 0 or np.all(draws[:, g] == draws[0, g]):
                continue
            fixed = draws.copy()
            fixed[:, g] = draws[0, g]
            trial = gain_at(fixed, draws_d) if role == "prefill" else gain_at(draws_p, fixed)
            options.append(
                (float(np.quantile(trial - offset, 0.1)), _describe(group, role), "held at its central value")
            )
    if offset > 0:
        options.append(
            (
                float(np.quantile(gains + offset, 0.1)),
                "the current placement's measured throughput, above what the model gives it",
                "with the model's figure instead",
            )
        )
    if not options:
        return ""
    low, what, how = max(options, key=lambda o: o[0])
    if low <= 0:
        return f"no single capacity: the uncertainties together (the largest: {what}) take the low end to 0"
    return f"{what}: {how}, the low end would be {low:,.0f} tokens/s"


def held_back_cause(
    wins: float,
    high: float,
    small_gain: float | None = None,
    min_gain: float = 0.0,
    lost: float = 0.0,
) -> str:
    """Why nothing is recommended though a split might help: its gain's low end is not positive (it
    sustains more in only ``wins`` of the capacity draws), or (``small_gain``, its expected gain as a share
    of the current rate) it is below ``min_gain``. ``lost``: the held-back split's gain at the central
    capacities where it is the loss (``PlacementResult.unsure``)."""
    if small_gain is not None:
        return (
            f"no move is recommended: the best other split would add {small_gain:.1%} on average (up to "
            f"{high:,.0f} tokens/s), under the {min_gain:.0%} a move must gain to be worth its role changes "
            "(pool.min_gain): the pool is at its best split within what matters"
        )
    if lost > 0:
        return (
            f"no move is recommended: the split held back would most likely add {lost:,.0f} tokens/s "
            f"(the loss; up to {high:,.0f}), but it sustains more in only {wins:.0%} of the capacity draws "
            "(the low end of its gain is not positive)"
        )
    return (
        f"no move is recommended: the best other split might add up to {high:,.0f} tokens/s, but "
        f"it sustains more in only {wins:.0%} of the capacity draws (the low end of its gain is not "
        "positive)"
    )


def larger_move_cause(lost: float, recommended: float, wins: float) -> str:
    """Why a pool's loss exceeds the gain of the move recommended: the loss counts a larger move, held back
    because it sustains more in only ``wins`` of the capacity draws (``PlacementResult.unsure``)."""
    return (
        f"the loss counts a larger move held back: it would most likely add {lost:,.0f} tokens/s, but it "
        f"sustains more in only {wins:.0%} of the capacity draws; the move recommended surely adds "
        f"{recommended:,.0f} of it"
    )
