"""Did a change pay off: the model's prediction at the time against what the pool showed afterwards."""

from __future__ import annotations

from dataclasses import replace

from analyzer.pools.analysis import SegmentAnalysis
from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.outcomes import SCORED, OutcomeParams, Verdict, change_outcomes, running_error
from analyzer.pools.pool import SkuGroup
from analyzer.pools.split_search import PlacementResult, place
from analyzer.pools.workload import TrafficMix
from fleet.catalog import load_catalog

CATALOG = load_catalog()
ISL, OSL = 600.0, 600.0
WORKERS = tuple(f"node{r // 4:02d}/w-{r % 4}" for r in range(8))
H100_ROWS, H200_ROWS = range(0, 4), range(4, 8)


def _group(sku: str, rows: range, decode: float) -> GroupCapacity:
    return GroupCapacity(
        SkuGroup(CATALOG.gpus.get(sku), 2, tuple(rows), None),
        RoleCapacity(13_000.0, 0.03, "measured", shared=0.03),
        RoleCapacity(decode, 0.03, "measured"),
        kv_bytes=60e9,
    )


def _segment(
    roles: dict[int, str],
    start_h: float,
    hours: float,
    h200_decode: float = 9_000.0,
    *,
    saturated: bool = True,
) -> SegmentAnalysis:
    """A segment of the pool; ``saturated``: both phases were seen saturated (their figures measured)."""
    groups = (_group("H100-SXM", H100_ROWS, 6_500.0), _group("H200-SXM", H200_ROWS, h200_decode))
    placement = place(
        groups,
        [[(r, roles[r]) for r in H100_ROWS], [(r, roles[r]) for r in H200_ROWS]],
        isl=ISL,
        osl=OSL,
        demand_tokens_per_s=1.0,
        peak_demand_tokens_per_s=1.0,
    )
    mix = TrafficMix(prompt_rate=1.0, output_rate=1.0, request_rate=1.0 / ISL, isl=ISL, osl=OSL, buckets=1)
    start = 1_717_372_800.0 + start_h * 3600.0
    return SegmentAnalysis(
        first=0,
        last=1,
        start=start,
        end=start + hours * 3600.0,
        mix=mix,
        roles=roles,
        capacities=groups,
        placement=placement,
        capacity_tokens_per_s=placement.current.tokens_per_s,
        measured=(
            (placement.current.prefill_tokens_per_s, placement.current.decode_tokens_per_s)
            if saturated
            else (None, None)
        ),
    )


INVERTED = {**dict.fromkeys(H100_ROWS, "decode"), **dict.fromkeys(H200_ROWS, "prefill")}


def _as_recommended(before: PlacementResult) -> dict[int, str]:
    roles = dict(INVERTED)
    roles.update({c.row: c.to_role for c in before.changes})
    return roles


def test_a_change_carried_out_as_recommended_pays_off_as_predicted() -> None:
    before = _segment(INVERTED, 0, 48)
    assert before.placement is not None and before.placement.changes
    after = _segment(_as_recommended(before.placement), 48, 48)
    (outcome,) = change_outcomes([before, after], WORKERS)
    assert outcome.followed == "as recommended" and outcome.verdict == Verdict.AS_PREDICTED
    assert outcome.predicted_tokens_per_s is not None and outcome.predicted_tokens_per_s > 0
    assert outcome.predicted_tokens_per_s == outcome.recommended_tokens_per_s
    assert outcome.realized_to_predicted is not None and abs(outcome.realized_to_predicted - 1.0) < 0.01
    assert {m.worker_id for m in outcome.moved} == {WORKERS[c.row] for c in before.placement.changes}
    assert running_error([outcome]) == (1, abs(outcome.realized_to_predicted - 1.0))


def test_a_change_that_delivered_less_than_predicted_is_said_plainly() -> None:
    before = _segment(INVERTED, 0, 48)
    assert before.placement is not None
    # After the swap the H200s decode at half the speed the model expected: the gain falls short.
    after = _segment(_as_recommended(before.placement), 48, 48, h200_decode=5_000.0)
    (outcome,) = [o for o in change_outcomes([before, after], WORKERS) if o.moved]
    assert outcome.verdict in {Verdict.PART, Verdict.NOTHING, Verdict.WORSE}
    assert outcome.realized_tokens_per_s is not None and outcome.predicted_tokens_per_s is not None
    assert outcome.realized_tokens_per_s < outcome.predicted_tokens_per_s


def test_a_change_against_the_recommendation_made_things_worse() -> None:
    right = {**dict.fromkeys(H100_ROWS, "prefill"), **dict.fromkeys(H200_ROWS, "decode")}
    before = _segment(right, 0, 48)
    after = _segment(INVERTED, 48, 48)
    (outcome,) = [o for o in change_outcomes([before, after], WORKERS) if o.moved]
    assert outcome.verdict == Verdict.WORSE and outcome.followed == "against the recommendation"
    assert outcome.realized_tokens_per_s is not None and outcome.realized_tokens_per_s < 0


def test_too_little_traffic_after_a_change_is_not_scored() -> None:
    before = _segment(INVERTED, 0, 48)
    assert before.placement is not None
    after = _segment(_as_recommended(before.placement), 48, 2)
    (outcome,) = change_outcomes([before, after], WORKERS, OutcomeParams(min_hours_after=6.0))
    assert outcome.verdict == Verdict.TOO_EARLY and outcome.realized_to_predicted is None
    assert running_error([outcome]) == (0, None)


def test_a_recommendation_left_standing_is_reported_as_not_carried_out() -> None:
    segments = [_segment(INVERTED, 0, 24), _segment(INVERTED, 24, 24)]
    (standing,) = change_outcomes(segments, WORKERS)
    assert standing.verdict == Verdict.NOT_CARRIED_OUT and standing.hours_after == 48.0
    assert standing.recommended_tokens_per_s is not None and standing.recommended_tokens_per_s > 0
    assert change_outcomes(segments[:1], WORKERS, OutcomeParams(min_hours_after=30.0)) == []


def test_a_short_transition_between_two_settled_segments_is_looked_through() -> None:
    before = _segment(INVERTED, 0, 48)
    assert before.placement is not None
    target = _as_recommended(before.placement)
    halfway = dict(INVERTED)  # the restarts: some workers already moved, the others not yet
    first = next(iter(sorted(r for r in target if target[r] != INVERTED[r])))
    halfway[first] = target[first]
    transition = _segment(halfway, 48, 1)
    after = _segment(target, 49, 48)
    outcomes = [o for o in change_outcomes([before, transition, after], WORKERS) if o.moved]
    assert len(outcomes) == 1 and outcomes[0].verdict == Verdict.AS_PREDICTED
    assert len(outcomes[0].moved) == len(before.placement.changes)


def test_a_change_is_not_measurable_while_the_pool_is_never_seen_saturated() -> None:
    """The realized gain is measured, never the model's: without a saturated bounding phase on both sides
    the verdict waits, and the change stays out of the running error."""
    before = _segment(INVERTED, 0, 48)
    assert before.placement is not None
    after = _segment(_as_recommended(before.placement), 48, 48, saturated=False)
    (outcome,) = change_outcomes([before, after], WORKERS)
    assert outcome.verdict == Verdict.NOT_MEASURABLE and "not seen saturated after" in outcome.reason
    assert outcome.realized_tokens_per_s is None and outcome.realized_to_predicted is None
    assert outcome.predicted_tokens_per_s is not None and outcome.predicted_tokens_per_s > 0
    assert running_error([outcome]) == (0, None)
    early = _segment(_as_recommended(before.placement), 48, 2, saturated=False)
    (waiting,) = change_outcomes([before, early], WORKERS)
    assert waiting.verdict == Verdict.TOO_EARLY


def _served(segment: SegmentAnalysis, requests_per_s: float, backlog_growth: float) -> SegmentAnalysis:
    """The segment with the requests/s its pool served and how fast its queues grew (both measured)."""
    mix = TrafficMix(
        prompt_rate=requests_per_s * ISL,
        output_rate=requests_per_s * OSL,
        request_rate=requests_per_s,
        isl=ISL,
        osl=OSL,
        buckets=1,
    )
    return replace(segment, mix=mix, backlog_growth=backlog_growth)


def test_a_pool_short_of_its_demand_measures_the_gain_by_what_it_served_of_what_arrived() -> None:
    """Not seen saturated at its limit, but queues growing before and still after: the realized gain is the
    rise in the share of arriving requests served, at the demand before, a measurement kept in the running
    error."""
    before = _served(_segment(INVERTED, 0, 48, saturated=False), 20.0, 5.0)  # 80% of 25 requests/s
    assert before.placement is not None
    after = _served(_segment(_as_recommended(before.placement), 48, 48, saturated=False), 23.0, 1.0)
    (outcome,) = change_outcomes([before, after], WORKERS)
    share_after = 23.0 / 24.0
    expected = (share_after - 0.8) * 25.0
    assert outcome.realized_requests_per_s == round(expected, 3)
    assert outcome.realized_tokens_per_s is not None
    assert abs(outcome.realized_tokens_per_s - expected * (ISL + OSL)) < 1.0
    assert outcome.verdict in {v.value for v in SCORED}
    assert "served/offered" in outcome.reason and outcome.realized_to_predicted is not None


def test_a_pool_that_then_served_all_its_demand_realized_at_least_the_backlog() -> None:
    before = _served(_segment(INVERTED, 0, 48, saturated=False), 20.0, 5.0)
    assert before.placement is not None
    after = _served(_segment(_as_recommended(before.placement), 48, 48, saturated=False), 25.0, 0.0)
    (outcome,) = change_outcomes([before, after], WORKERS)
    # At least 5 requests/s (all of the backlog): short of the prediction, it is a bound that decides nothing.
    assert outcome.realized_requests_per_s == 5.0
    assert outcome.predicted_tokens_per_s is not None and outcome.predicted_tokens_per_s > 5.0 * (ISL + OSL)
    assert outcome.verdict == Verdict.NOT_MEASURABLE and "at least" in outcome.reason
    assert running_error([outcome]) == (0, None)
    # A pool that served everything before too shows no shortfall to measure a gain by.
    full = _served(_segment(INVERTED, 0, 48, saturated=False), 25.0, 0.0)
    (unmeasured,) = change_outcomes([full, after], WORKERS)
    assert unmeasured.verdict == Verdict.NOT_MEASURABLE and "not seen saturated" in unmeasured.reason
