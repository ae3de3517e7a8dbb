"""Ground truth of carried-out role changes: what each scheduled change realized, on the same traffic.

For each pool and change time (the scenario's ``changes`` that start in the same window, grouped), the
placement before and after are both re-simulated saturated over the traffic of the segment just before
the change and of the segment just after it, in the same passes and under the same extra seeds as the
truth's other placements (``fleetsim.truth``). Comparing them on the same traffic keeps the traffic's
own changes (drift, diurnal phase, weekends) out of the gain. The primary figure is on the
after-segment's traffic: what the change delivers on the traffic it actually meets. The noise is
measured as the truth measures it: twice the largest standard deviation among either placement's
seed-to-seed spread and the standard error of its batch means. The restart minutes of a change fall in
the after-segment for both placements (the up/down history is the run's): a negligible share of it.

The entries of the truth's ``changes`` (their schema is in ``fleetsim.truth``'s docstring) are per
(pool, change time); ``after_among_best`` on a traffic: the after placement within the segment's
equivalence noise of the highest re-simulated placement there; ``beyond_noise``: the primary gain's
magnitude exceeds its noise. Changes in the run's first window or beyond its end are not reported.

Each entry's ``workers`` name every moved worker by ``worker_id``, the id it reported until the change,
and ``new_worker_id``, the id of the pod that replaced it (``replace_pods``; null when the change kept the
id), so a scorer can match a change seen under either id; ``key`` is its scenario key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fleetsim.layout import FleetLayout
from fleetsim.pool import ROLE_CODE
from fleetsim.role_changes import RoleSchedule, Switch

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PRIMARY = "after"
_ROLE = {code: role.value for role, code in ROLE_CODE.items()}


@dataclass
class PlanRuns:
    """Placements re-simulated on one segment besides its candidates, with their measurements."""

    plans: list[IntArray] = field(default_factory=list)
    runs: list[FloatArray] = field(default_factory=list)  # (windows, 3): tokens, requests, output per s
    seeds: list[list[float]] = field(default_factory=list)  # tokens/s under each extra seed

    def add(self, roles: IntArray) -> int:
        self.plans.append(roles.copy())
        return len(self.plans) - 1


class SegmentView(Protocol):
    """What a change's figures read of a truth segment."""

    pool: int
    first: int
    last: int
    current: IntArray
    means: FloatArray | None
    top: int
    noise: float
    now: int
    equivalent: list[int]
    extra: PlanRuns


@dataclass(frozen=True)
class ChangeEvent:
    """The changes of one pool at one window, the segments around it and where its plans are."""

    pool: int
    window: int
    switches: tuple[Switch, ...]
    before: int  # segment indices
    after: int
    plans: tuple[tuple[int, int], tuple[int, int]]  # per segment (before, after): extra index of each plan


def change_events(schedule: RoleSchedule, segments: Sequence[SegmentView]) -> list[ChangeEvent]:
    """Every change inside the run, its plans (the placement before and after) added to both segments."""
    out = []
    for pool in sorted({s.pool for s in schedule.switches}):
        for window in schedule.cuts(pool):
            ahead = [i for i, s in enumerate(segments) if s.pool == pool and s.last == window]
            behind = [i for i, s in enumerate(segments) if s.pool == pool and s.first == window]
            if not ahead or not behind:
                continue  # in the first window or past the run
            before, after = ahead[0], behind[0]
            old, new = segments[before].current, segments[after].current
            on_before = (segments[before].extra.add(old), segments[before].extra.add(new))
            on_after = (segments[after].extra.add(old), segments[after].extra.add(new))
            switches = tuple(
                s for s in schedule.switches if s.pool == pool and schedule.first_window(s) == window
            )
            out.append(ChangeEvent(pool, window, switches, before, after, (on_before, on_after)))
    return out


def _noise(extra: PlanRuns, indices: Sequence[int], batches: int) -> float:
    """Twice the largest std. dev.: seed-to-seed spread and batch-mean standard error of each plan."""
    sigmas = [0.0]
    for j in indices:
        tokens = extra.runs[j][:, 0]
        values = [*extra.seeds[j], float(tokens.mean())]
        if len(values) > 1:
            sigmas.append(float(np.std(values, ddof=1)))
        means = [b.mean() for b in np.array_split(tokens, min(batches, len(tokens)))]
        if len(means) > 1:
            sigmas.append(float(np.std(means, ddof=1) / np.sqrt(len(means))))
    return 2.0 * max(sigmas)


def _on_traffic(
    seg: SegmentView, index: int, plans: tuple[int, int], batches: int, time: Callable[[int], str]
) -> dict[str, Any]:
    """Both placements' saturated throughput on one segment's traffic, the gain and its noise."""
    assert seg.means is not None
    before, after = (seg.extra.runs[j].mean(axis=0) for j in plans)
    best = max(float(seg.means[seg.top, 0]), float(before[0]), float(after[0]))
    out: dict[str, Any] = {"segment": index, "start": time(seg.first), "end": time(seg.last)}
    for name, column, digits in (("tokens", 0, 1), ("output_tokens", 2, 1), ("requests", 1, 3)):
        out[f"before_{name}_per_s"] = round(float(before[column]), digits)
        out[f"after_{name}_per_s"] = round(float(after[column]), digits)
        out[f"gain_{name}_per_s"] = round(float(after[column] - before[column]), digits)
    out["noise_tokens_per_s"] = round(_noise(seg.extra, plans, batches), 1)
    out["best_tokens_per_s"] = round(best, 1)
    out["after_among_best"] = bool(after[0] >= best - seg.noise)
    return out


def change_report(
    events: Sequence[ChangeEvent],
    segments: Sequence[SegmentView],
    layout: FleetLayout,
    *,
    restart_minutes: Sequence[float],
    placement: Callable[[int, IntArray], dict[str, dict[str, int]]],
    time: Callable[[int], str],
    at: Callable[[float], str],
    batches: int,
) -> list[dict[str, Any]]:
    """The truth's ``changes`` section (module docstring)."""
    out = []
    for e in events:
        before, after = segments[e.before], segments[e.after]
        traffic = {
            "before": _on_traffic(before, e.before, e.plans[0], batches, time),
            "after": _on_traffic(after, e.after, e.plans[1], batches, time),
        }
        primary = traffic[PRIMARY]
        workers = []
        for s in sorted(e.switches, key=lambda s: s.worker_id):
            w = layout.workers[s.worker]
            workers.append(
                {
                    "worker_id": s.worker_id,
                    "new_worker_id": s.new_worker_id,
                    "key": w.key,
                    "sku": w.sku.key,
                    "from_role": _ROLE[int(before.current[s.position])],
                    "to_role": _ROLE[s.role],
                    "restart_minutes": restart_minutes[s.spec_index],
                }
            )
        out.append(
            {
                "pool": layout.pools[e.pool].spec.pool_id,
                "at": at(min(s.at_s for s in e.switches)),
                "window_start": time(e.window),
                "workers": workers,
                "before_placement": placement(e.pool, before.current),
                "after_placement": placement(e.pool, after.current),
                "by_traffic": traffic,
                "primary": PRIMARY,
                "realized_gain_tokens_per_s": primary["gain_tokens_per_s"],
                "realized_gain_output_tokens_per_s": primary["gain_output_tokens_per_s"],
                "realized_gain_requests_per_s": primary["gain_requests_per_s"],
                "noise_tokens_per_s": primary["noise_tokens_per_s"],
                "beyond_noise": abs(primary["gain_tokens_per_s"]) > primary["noise_tokens_per_s"],
                "before_was_best": before.now in before.equivalent,
                "after_is_best": after.now in after.equivalent,
            }
        )
    return out
