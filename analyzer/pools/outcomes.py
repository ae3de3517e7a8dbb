"""Did a placement change pay off? The model's prediction at the time against what the pool did afterwards.

A change is a segment boundary where the pool's split by GPU group and role changed (in place or by
replacing workers). Predicted and realized gains are both taken at the traffic mix of the segment before.
The realized gain is measured, never modelled: the capacity the bounding phase delivered while seen
saturated before and after the change, else, where the pool fell short of its demand before (its queues
grew), the change in the share of arriving requests it served, at the demand before (a lower bound where
it served all of it after). Otherwise the verdict is "not measurable yet". Reasoning:
docs/analyzer.md#outcomes
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from analyzer.pools.analysis import SegmentAnalysis
from analyzer.pools.plan_rates import capacity_draws, draw_rates, evaluate
from analyzer.pools.split_search import DECISION_SEED, PlacementResult
from analyzer.results.changes import ChangeOutcome, MovedWorker
from analyzer.results.summary import iso
from analyzer.results.totals import num
from analyzer.tunable import tunable


class Verdict(StrEnum):
    AS_PREDICTED = "paid off as predicted"
    MORE = "paid off more than predicted"
    PART = "paid off in part"
    NOTHING = "did not pay off"
    WORSE = "made things worse"
    NONE_EXPECTED = "no gain predicted, none seen"
    TOO_EARLY = "too early to tell"
    NOT_MEASURABLE = "not measurable yet"
    UNSCORED = "not comparable"
    NOT_CARRIED_OUT = "not carried out"


SCORED = (Verdict.AS_PREDICTED, Verdict.MORE, Verdict.PART, Verdict.NOTHING, Verdict.WORSE)


@dataclass(frozen=True)
class OutcomeParams:
    min_hours_after: float = tunable(
        6.0, "Hours of traffic a change needs afterwards before its outcome is scored."
    )
    no_change_share: float = tunable(
        0.02, "A realized change within this share of the pool's capacity is no change (the noise floor)."
    )
    transition_hours: float = tunable(
        4.0,
        "A segment shorter than this between two others is a transition (restarts, roles changing one "
        "by one): a change is judged from the longer segment before it to the one after.",
    )


def _rate(prompt: float, generated: float, isl: float, osl: float) -> float:
    return min(prompt / isl, generated / osl) if isl > 0 and osl > 0 else math.nan


def _prefill_per_group(placement: PlacementResult, roles: dict[int, str]) -> dict[str, int]:
    return {
        g.group.key: sum(1 for row in g.group.members if roles.get(row) == "prefill")
        for g in placement.groups
    }


def _serving_per_group(placement: PlacementResult, roles: dict[int, str]) -> dict[str, int]:
    return {g.group.key: sum(1 for row in g.group.members if row in roles) for g in placement.groups}


def _followed(before: np.ndarray, after: np.ndarray, best: np.ndarray) -> str:
    if np.array_equal(before, best):
        return "no recommendation was open"
    if np.array_equal(after, best):
        return "as recommended"
    if np.abs(after - best).sum() < np.abs(before - best).sum():
        return "part of the recommendation"
    return "against the recommendation"


def _group_of(placement: PlacementResult | None) -> dict[int, str]:
    if placement is None:
        return {}
    return {row: g.group.sku.key for g in placement.groups for row in g.group.members}


def replaced(
    before: SegmentAnalysis,
    after: SegmentAnalysis,
    workers: Sequence[str],
    gpus: Mapping[str, frozenset[str]] | None = None,
) -> list[MovedWorker]:
    """Role changes made by replacing workers (a Deployment rollout: old pods gone, new pods on the same
    GPUs): a worker that left in one role paired with one that arrived in the other role on the same GPU
    group, on a GPU the two share where both report theirs (``gpus``: worker -> GPU UUIDs). The split by
    group and role is what changed, whatever the ids; a replacement in the same role is a restart."""
    held = gpus or {}
    group = _group_key(before.placement) | _group_key(after.placement)
    left = sorted(row for row in before.roles.keys() - after.roles.keys() if row in group)
    arrived = sorted(row for row in after.roles.keys() - before.roles.keys() if row in group)

    def same_gpus(old: int, new: int) -> bool:
        a, b = held.get(workers[old], frozenset()), held.get(workers[new], frozenset())
        return not a or not b or bool(a & b)

    out = []
    for old in left:
        match = next(
            (
                new
                for new in arrived
                if group.get(new) == group[old]
                and after.roles[new] != before.roles[old]
                and {after.roles[new], before.roles[old]} <= {"prefill", "decode"}
                and same_gpus(old, new)
            ),
            None,
        )
        if match is not None:
            arrived.remove(match)
            moved = MovedWorker(
                worker_id=workers[old],
                from_role=before.roles[old],
                to_role=after.roles[match],
                new_worker_id=workers[match],
            )
            out.append(moved)
    return out


def _group_key(placement: PlacementResult | None) -> dict[int, str]:
    if placement is None:
        return {}
    return {row: g.group.key for g in placement.groups for row in g.group.members}


def _outcome(
    before: SegmentAnalysis,
    after: SegmentAnalysis,
    workers: Sequence[str],
    p: OutcomeParams,
    skus: Mapping[str, tuple[str, str]] | None = None,
    gpus: Mapping[str, frozenset[str]] | None = None,
) -> ChangeOutcome | None:
    """``skus``: worker -> (GPU model before, after) for workers that moved across GPU models; ``gpus``:
    worker -> its GPU UUIDs, to pair a replaced worker with its replacement."""
    moved = _moved_workers(before, after, workers, skus or {}) + replaced(before, after, workers, gpus)
    if not moved:
        return None
    at, hours = iso(after.start), after.hours
    pb, pa = before.placement, after.placement
    why_not = _not_comparable(before, after)
    if why_not is not None or pb is None or pa is None:
        return ChangeOutcome(
            at=at, moved=moved, followed="unknown", verdict=Verdict.UNSCORED.value,
            reason=why_not or "no placement was modelled", hours_after=hours,
        )  # fmt: skip
    keys = [g.group.key for g in pb.groups]
    x_before = np.array(pb.current.prefill, dtype=np.int64)
    counted = _prefill_per_group(pa, after.roles)
    x_after = np.minimum(np.array([counted[k] for k in keys], dtype=np.int64), np.array(pb.sizes))
    followed = _followed(x_before, x_after, np.array(pb.best.prefill, dtype=np.int64))
    isl, osl = pb.isl, pb.osl
    predicted_rate, gains = _predicted(pb, x_before, x_after)
    rate_before = _rate(pb.current.prefill_tokens_per_s, pb.current.decode_tokens_per_s, isl, osl)
    rate_after = _rate(pa.current.prefill_tokens_per_s, pa.current.decode_tokens_per_s, isl, osl)
    unmeasured = [
        name
        for name, seg, plan in (("before", before, pb), ("after", after, pa))
        if not _bound_measured(seg, plan, isl, osl)
    ]
    realized_rate = math.nan if unmeasured else rate_after - rate_before
    served = served_gain(before, after, p.no_change_share) if unmeasured else None
    if served is not None:
        realized_rate = served[0]
    tokens = isl + osl
    outcome = ChangeOutcome(
        at=at,
        moved=moved,
        followed=followed,
        verdict=Verdict.UNSCORED.value,
        reason="",
        predicted_tokens_per_s=num(predicted_rate * tokens),
        predicted_tokens_per_s_low=num(float(np.quantile(gains, 0.1)) * tokens),
        predicted_tokens_per_s_high=num(float(np.quantile(gains, 0.9)) * tokens),
        recommended_tokens_per_s=num(pb.recommended_gain),
        realized_tokens_per_s=num(realized_rate * tokens),
        predicted_output_tokens_per_s=num(predicted_rate * osl),
        realized_output_tokens_per_s=num(realized_rate * osl),
        predicted_requests_per_s=num(predicted_rate, 3),
        realized_requests_per_s=num(realized_rate, 3),
        delivered_output_tokens_per_s_before=num(before.mix.output_rate),
        delivered_output_tokens_per_s_after=num(after.mix.output_rate),
        hours_after=round(hours, 2),
    )
    if served is not None:
        return _judged_by_service(outcome, served[1], realized_rate * tokens, rate_before * tokens, p)
    if unmeasured and outcome.hours_after >= p.min_hours_after:
        served_all = "; the pool served all its demand after it" if pa.demand_limited else ""
        reason = (
            f"the phase bounding the pool was not seen saturated {' or '.join(unmeasured)} the change: what "
            f"it realized would be the model's own figure, not a measurement (predicted "
            f"{predicted_rate * tokens:+,.0f} tokens/s){served_all}"
        )
        return outcome.model_copy(update={"verdict": Verdict.NOT_MEASURABLE.value, "reason": reason})
    return _judge(outcome, rate_before * tokens, p)


def _moved_workers(
    before: SegmentAnalysis,
    after: SegmentAnalysis,
    workers: Sequence[str],
    moves: Mapping[str, tuple[str, str]],
) -> list[MovedWorker]:
    """The workers present on both sides whose role or GPU model changed."""
    return [
        MovedWorker(
            worker_id=workers[row],
            from_role=before.roles[row],
            to_role=after.roles[row],
            from_sku=moves[workers[row]][0] if workers[row] in moves else None,
            to_sku=moves[workers[row]][1] if workers[row] in moves else None,
        )
        for row in sorted(before.roles.keys() & after.roles.keys())
        if before.roles[row] != after.roles[row] or workers[row] in moves
    ]


def _not_comparable(before: SegmentAnalysis, after: SegmentAnalysis) -> str | None:
    """Why the two sides' placements cannot be compared (None: they can)."""
    pb, pa = before.placement, after.placement
    if pb is None or pa is None:
        return "no placement was modelled"
    if sorted(g.group.key for g in pb.groups) != sorted(g.group.key for g in pa.groups):
        return "the pool's GPU groups changed"
    if _serving_per_group(pb, before.roles) != _serving_per_group(pa, after.roles):
        return "the pool's serving workers changed with the roles"
    return None


def _predicted(
    pb: PlacementResult, x_before: npt.NDArray[np.int64], x_after: npt.NDArray[np.int64]
) -> tuple[float, npt.NDArray[np.float64]]:
    """The model's gain (requests/s) for the split adopted, model against model (a measured offset applies
    to both sides), and that gain under each capacity draw."""
    isl, osl = pb.isl, pb.osl
    sizes = np.array(pb.sizes, dtype=np.int64)
    cp = np.array([g.prefill.tokens_per_s if g.prefill.fits else 0.0 for g in pb.groups])
    cd = np.array([g.decode.tokens_per_s if g.decode.fits else 0.0 for g in pb.groups])
    modeled_now = float(evaluate(x_before, sizes, cp, cd, isl, osl, pb.routing)[0][0])
    predicted_rate = float(evaluate(x_after, sizes, cp, cd, isl, osl, pb.routing)[0][0]) - modeled_now
    draws_p, draws_d = capacity_draws(pb.groups, cp, cd, seed=DECISION_SEED)
    gains = draw_rates(x_after, sizes, draws_p, draws_d, isl, osl, pb.routing) - draw_rates(
        x_before, sizes, draws_p, draws_d, isl, osl, pb.routing
    )
    return predicted_rate, gains


def _judged_by_service(
    outcome: ChangeOutcome, all_served: bool, realized: float, before: float, p: OutcomeParams
) -> ChangeOutcome:
    """The verdict where the realized gain is measured from served/offered before and after (``realized``
    tokens/s; ``all_served``: the pool served all its demand after, so that figure is a lower bound)."""
    if all_served and outcome.hours_after >= p.min_hours_after:
        floor = min(outcome.predicted_tokens_per_s_low or 0.0, outcome.predicted_tokens_per_s or 0.0)
        if realized < floor:  # a lower bound short of the prediction's range decides nothing
            reason = (
                f"the pool served all its demand after the change: it realized at least "
                f"{realized:+,.0f} tokens/s (served/offered before and after, at the demand "
                f"before), short of the predicted range's low end {floor:+,.0f}; how much more is not "
                "measurable until it queues again"
            )
            return outcome.model_copy(update={"verdict": Verdict.NOT_MEASURABLE.value, "reason": reason})
        judged = _judge(outcome, before, p)
        return judged.model_copy(
            update={
                "realized_to_predicted": None,  # a lower bound: kept out of the running error
                "reason": judged.reason + "; realized is a lower bound: served/offered rose to all of it",
            }
        )
    judged = _judge(outcome, before, p)
    return judged.model_copy(
        update={
            "reason": judged.reason + "; realized from served/offered before and after, at the demand before"
        }
    )


def served_share(seg: SegmentAnalysis) -> float:
    """Share of the requests arriving in a segment that the pool served: served / (served + the queues'
    growth), both measured; NaN where either is unknown."""
    delivered, growth = seg.mix.request_rate, seg.backlog_growth
    if not (math.isfinite(delivered) and delivered > 0 and math.isfinite(growth)):
        return math.nan
    return delivered / (delivered + growth)


def served_gain(
    before: SegmentAnalysis, after: SegmentAnalysis, no_change: float
) -> tuple[float, bool] | None:
    """The realized gain in requests/s from what the pool served of what arrived, normalised to the demand
    before: (served share after - served share before) x requests arriving before. Only where the pool fell
    short before (its queues grew); None elsewhere. The flag: the pool served all of it after, so the gain
    is a lower bound (its capacity may have grown by more than the demand needed)."""
    share_before, share_after = served_share(before), served_share(after)
    if not (math.isfinite(share_before) and math.isfinite(share_after)) or share_before >= 1.0 - no_change:
        return None
    offered = before.mix.request_rate + before.backlog_growth
    return (share_after - share_before) * offered, share_after >= 1.0 - no_change


def _bound_measured(seg: SegmentAnalysis, plan: PlacementResult, isl: float, osl: float) -> bool:
    """Whether the phase that bounds the pool's rate (at this mix) was seen saturated in the segment: then
    the rate is a delivered throughput, not the model's."""
    prefill_bound = plan.current.prefill_tokens_per_s / isl <= plan.current.decode_tokens_per_s / osl
    return seg.measured[0 if prefill_bound else 1] is not None


def _judge(o: ChangeOutcome, capacity: float, p: OutcomeParams) -> ChangeOutcome:
    if o.hours_after < p.min_hours_after:
        reason = f"{o.hours_after:.1f} h of traffic since the change"
        return o.model_copy(update={"verdict": Verdict.TOO_EARLY.value, "reason": reason})
    realized, predicted = o.realized_tokens_per_s, o.predicted_tokens_per_s
    if realized is None or predicted is None or not capacity > 0:
        reason = "the pool's capacity could not be estimated"
        return o.model_copy(update={"verdict": Verdict.UNSCORED.value, "reason": reason})
    floor = p.no_change_share * capacity
    low = min(o.predicted_tokens_per_s_low or predicted, predicted)
    high = max(o.predicted_tokens_per_s_high or predicted, predicted)
    if predicted <= floor:
        verdict = Verdict.WORSE if realized < -floor else Verdict.NONE_EXPECTED
    elif realized < -floor:
        verdict = Verdict.WORSE
    elif realized <= floor:
        verdict = Verdict.NOTHING
    elif realized < low:
        verdict = Verdict.PART
    elif realized > high:
        verdict = Verdict.MORE
    else:
        verdict = Verdict.AS_PREDICTED
    reason = (
        f"predicted {predicted:+,.0f} tokens/s ({low:+,.0f} to {high:+,.0f}), realized {realized:+,.0f} "
        f"at the traffic mix before the change (noise floor {floor:,.0f})"
    )
    ratio = realized / predicted if verdict in SCORED and predicted > floor else None
    update = {"verdict": verdict.value, "reason": reason, "realized_to_predicted": num(ratio, 4)}
    return o.model_copy(update=update)


def _settled(segments: Sequence[SegmentAnalysis], p: OutcomeParams) -> list[SegmentAnalysis]:
    """The segments that are not a transition (the last always counts)."""
    return [s for i, s in enumerate(segments) if s.hours >= p.transition_hours or i == len(segments) - 1]


def change_outcome(
    before: Sequence[SegmentAnalysis],
    after: Sequence[SegmentAnalysis],
    workers: Sequence[str],
    p: OutcomeParams,
    skus: Mapping[str, tuple[str, str]],
) -> ChangeOutcome | None:
    """A change between two analyses of the same pool (before and after a move across GPU models): the
    last settled segment before against the first settled one after."""
    settled_after = [s for s in after if s.hours >= p.transition_hours] or list(after[-1:])
    return _outcome(_settled(before, p)[-1], settled_after[0], workers, p, skus)


def change_outcomes(
    segments: Sequence[SegmentAnalysis],
    workers: Sequence[str],
    p: OutcomeParams | None = None,
    gpus: Mapping[str, frozenset[str]] | None = None,
) -> list[ChangeOutcome]:
    """Every role change between settled segments, judged, in place or by replacing workers (``gpus``:
    worker -> GPU UUIDs, pairs them); then a recommendation left standing."""
    params = p or OutcomeParams()
    settled = _settled(segments, params)
    out = [
        o
        for a, b in itertools.pairwise(settled)
        if (o := _outcome(a, b, workers, params, gpus=gpus)) is not None
    ]
    out += _standing(segments, params)
    return out


def _standing(segments: Sequence[SegmentAnalysis], p: OutcomeParams) -> list[ChangeOutcome]:
    """The latest recommendation, when it has stood unchanged at least ``min_hours_after``."""
    run: list[SegmentAnalysis] = []
    splits: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for segment in reversed(segments):
        pl = segment.placement
        if pl is None or pl.best.prefill == pl.current.prefill:
            break
        splits.add((pl.current.prefill, pl.best.prefill))
        if len(splits) > 1:  # the split or the recommendation changed: the run ends there
            break
        run.append(segment)
    hours = sum(s.hours for s in run)
    if not run or hours < p.min_hours_after:
        return []
    first, latest = run[-1], run[0]
    assert latest.placement is not None
    return [
        ChangeOutcome(
            at=iso(first.start),
            moved=[],
            followed="not carried out",
            verdict=Verdict.NOT_CARRIED_OUT.value,
            reason=f"recommended for {hours:,.1f} h and not carried out",
            recommended_tokens_per_s=num(latest.placement.recommended_gain),
            hours_after=round(hours, 2),
        )
    ]


def running_error(outcomes: Sequence[ChangeOutcome]) -> tuple[int, float | None]:
    """How many changes were scored and the median of |realized / predicted - 1| over them."""
    ratios = [r for o in outcomes if (r := o.realized_to_predicted) is not None and math.isfinite(r)]
    return len(ratios), (statistics.median(abs(r - 1.0) for r in ratios) if ratios else None)
