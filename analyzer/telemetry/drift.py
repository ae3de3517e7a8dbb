"""Change points in a pool's traffic mix and in its placement, and the segments between them.

The mix (prompt length, output length, their ratio) is cut by penalised binary segmentation; a worker state
held for ``min_size`` buckets cuts too. So each segment has one traffic mix and one set of available
workers. Reasoning: docs/analyzer.md#drift
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.frames import FloatArray
from analyzer.tunable import tunable

_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class DriftParams:
    min_size: int = tunable(3, "The fewest buckets a traffic segment between two change points holds.")
    min_shift: float = tunable(0.08, "Relative change of a traffic series' mean that counts as drift.")
    penalty_per_series: float = tunable(
        3.0, "Change-point penalty per series, in units of its noise: higher finds fewer, larger shifts."
    )
    noise_floor: float = tunable(0.01, "The least noise assumed of a series, in log units (1%).")


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first bucket of the new segment
    series: dict[str, tuple[float, float]]  # name -> (mean before, mean after), back in linear units

    @property
    def magnitude(self) -> float:
        """Largest relative change across the series."""
        return max(
            (abs(after / before - 1.0) for before, after in self.series.values() if before > 0), default=0.0
        )

    def describe(self) -> str:
        parts = [
            f"{name} {before:,.4g} -> {after:,.4g}"
            for name, (before, after) in self.series.items()
            if before > 0 and abs(after / before - 1.0) >= 0.02
        ]
        return ", ".join(parts) or "traffic mix shifted"


def _noise(x: FloatArray, floor: float) -> float:
    if x.size < 3:
        return floor
    return max(floor, _MAD_TO_SIGMA * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2.0))


def _best_split(z: FloatArray, min_size: int) -> tuple[int, float]:
    """Split index (within z's columns) with the largest drop in squared error, and that drop."""
    n = z.shape[1]
    if n < 2 * min_size:
        return -1, 0.0
    csum = np.cumsum(z, axis=1)
    total = csum[:, -1]
    k = np.arange(1, n)
    left_mean_sq = (csum[:, :-1] ** 2) / k
    right_mean_sq = ((total[:, None] - csum[:, :-1]) ** 2) / (n - k)
    gain = (left_mean_sq + right_mean_sq).sum(axis=0) - (total**2).sum() / n
    valid = (k >= min_size) & (n - k >= min_size)
    if not valid.any():
        return -1, 0.0
    gain = np.where(valid, gain, -np.inf)
    best = int(np.argmax(gain))
    return best + 1, float(gain[best])


def change_points(series: dict[str, FloatArray], params: DriftParams | None = None) -> list[ChangePoint]:
    """Change points of positive series (NaN where unobserved) that share one time axis."""
    p = params or DriftParams()
    names = list(series)
    if not names:
        return []
    stacked = np.vstack([series[name] for name in names]).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.log(np.where(stacked > 0, stacked, np.nan))
    observed = np.flatnonzero(~np.isnan(logs).any(axis=0))
    if observed.size < 2 * p.min_size:
        return []
    x = logs[:, observed]
    sigma = np.array([_noise(row, p.noise_floor) for row in x])
    z = x / sigma[:, None]
    penalty = p.penalty_per_series * len(names) * math.log(x.shape[1])
    threshold = math.log1p(p.min_shift)
    splits: list[int] = []
    stack = [(0, x.shape[1])]
    while stack:
        a, b = stack.pop()
        at, gain = _best_split(z[:, a:b], p.min_size)
        if at < 0 or gain <= penalty:
            continue
        shift = np.abs(x[:, a : a + at].mean(axis=1) - x[:, a + at : b].mean(axis=1))
        if float(shift.max()) < threshold:
            continue
        splits.append(a + at)
        stack += [(a, a + at), (a + at, b)]
    splits.sort()
    bounds = [0, *splits, x.shape[1]]
    points = []
    for i, split in enumerate(splits):
        before = x[:, bounds[i] : split].mean(axis=1)
        after = x[:, split : bounds[i + 2]].mean(axis=1)
        points.append(
            ChangePoint(
                index=int(observed[split]),
                series={
                    name: (float(np.exp(before[j])), float(np.exp(after[j]))) for j, name in enumerate(names)
                },
            )
        )
    return points


def state_changes(states: npt.NDArray[np.int64], min_size: int) -> list[int]:
    """Buckets where some worker's state (rows) changes and then holds for ``min_size`` buckets."""
    n = states.shape[1]
    out = []
    for t in range(1, n):
        changed = states[:, t] != states[:, t - 1]
        if not changed.any():
            continue
        if t + min_size > n:
            break  # too close to the end to tell a lasting change from a blip
        held = (states[changed, t : t + min_size] == states[changed, t][:, None]).all(axis=1)
        was = (states[changed, max(0, t - min_size) : t] == states[changed, t - 1][:, None]).all(axis=1)
        if (held & was).any():
            out.append(t)
    return out


def segments(n_buckets: int, cuts: list[int], min_size: int) -> list[tuple[int, int]]:
    """[first, last) bucket ranges between cuts, merging any piece shorter than ``min_size`` into its
    predecessor."""
    bounds = [0]
    for cut in sorted(set(cuts)):
        if 0 < cut < n_buckets and cut - bounds[-1] >= min_size:
            bounds.append(cut)
    if len(bounds) > 1 and n_buckets - bounds[-1] < min_size:
        bounds.pop()
    bounds.append(n_buckets)
    return list(itertools.pairwise(bounds))
