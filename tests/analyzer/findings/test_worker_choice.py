"""Which workers of a group change role (by telemetry, never by id), severity by what the loss means, and the
loss in output tokens and requests."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from analyzer.findings.loss import SeverityParams, loss_fields, severity, severity_basis, supply_limited
from analyzer.findings.recommend import pair_swaps, worker_recommendation
from analyzer.pools.analysis import SegmentAnalysis
from analyzer.pools.capacity import GroupCapacity, RoleCapacity
from analyzer.pools.pool import SkuGroup
from analyzer.pools.pool_state import PoolState, StateEvidence
from analyzer.pools.split_search import PlacementResult, place
from analyzer.pools.worker_choice import WorkerLoad
from analyzer.pools.workload import TrafficMix
from fleet.catalog import load_catalog
from fleet.contract import Finding, FindingKind, Severity

CATALOG = load_catalog()
ISL, OSL = 600.0, 600.0  # two of the four H100 decoders and three of the four H200 prefill workers move


def _group(sku_key: str, rows: range, decode: float, *, uncertainty: float = 0.03) -> GroupCapacity:
    return GroupCapacity(
        SkuGroup(CATALOG.gpus.get(sku_key), 2, tuple(rows), None),
        RoleCapacity(13_000.0, 0.03, "measured", shared=0.03),
        RoleCapacity(decode, uncertainty, "transferred" if uncertainty > 0.03 else "measured"),
        kv_bytes=60e9,
    )


def _inverted(
    loads: dict[int, WorkerLoad] | None = None, *, h200_uncertainty: float = 0.03, peak: float = 1.0
) -> PlacementResult:
    """Rows 0-3 decode on H100s, rows 4-7 prefill on H200s: the best plan moves some of each."""
    return place(
        [
            _group("H100-SXM", range(0, 4), 6_500.0),
            _group("H200-SXM", range(4, 8), 9_000.0, uncertainty=h200_uncertainty),
        ],
        [[(r, "decode") for r in range(0, 4)], [(r, "prefill") for r in range(4, 8)]],
        isl=ISL,
        osl=OSL,
        demand_tokens_per_s=1.0,
        peak_demand_tokens_per_s=peak,
        loads=loads,
    )


def _moved(result: PlacementResult, role: str) -> list[int]:
    return sorted(c.row for c in result.changes if c.to_role == role)


def test_the_decode_worker_under_most_kv_pressure_moves_to_prefill() -> None:
    baseline = _inverted()
    n = len(_moved(baseline, "prefill"))
    assert 0 < n < 4  # some, not all, of the H100 decoders move: the choice matters
    kv = {0: 0.40, 1: 0.55, 2: 0.97, 3: 0.70}
    result = _inverted({r: WorkerLoad(kv_usage=v, in_flight=10.0) for r, v in kv.items()})
    assert result.best == baseline.best  # the telemetry chooses workers, never the plan's counts
    expected = sorted(sorted(kv, key=lambda r: -kv[r])[:n])
    assert _moved(result, "prefill") == expected
    top = next(c for c in result.changes if c.row == 2)
    assert "KV cache 97% full" in top.reason and "of the 4 H100 SXM decode workers" in top.reason


def test_among_equal_kv_pressure_the_fewest_sessions_in_flight_move() -> None:
    n = len(_moved(_inverted(), "prefill"))
    sessions = {0: 30.0, 1: 3.0, 2: 12.0, 3: 7.0}
    loads = {r: WorkerLoad(kv_usage=0.9, in_flight=v) for r, v in sessions.items()}
    # Prefill workers: the fewest requests in flight move to decode.
    in_flight = {4: 9.0, 5: 1.0, 6: 4.0, 7: 2.0}
    loads.update({r: WorkerLoad(in_flight=v) for r, v in in_flight.items()})
    result = _inverted(loads)
    assert _moved(result, "prefill") == sorted(sorted(sessions, key=lambda r: sessions[r])[:n])
    m = len(_moved(result, "decode"))
    assert _moved(result, "decode") == sorted(sorted(in_flight, key=lambda r: in_flight[r])[:m])
    first = next(c for c in result.changes if c.row == 1)
    assert "fewest sessions in flight (3) of the 4 H100 SXM decode workers" in first.reason
    # Neither choice follows the ids: the id-order conventions would have picked rows 0.. and ..7.
    assert _moved(result, "prefill") != list(range(n))


def test_a_decode_and_a_prefill_worker_on_one_node_swap_in_place_first() -> None:
    n = len(_moved(_inverted(), "prefill"))
    # Row 3 would be the last choice by KV pressure, but it shares a node with prefill row 6.
    loads = {r: WorkerLoad(kv_usage=0.9 - 0.1 * r, in_flight=5.0, node=f"n{r}") for r in range(4)}
    loads.update({r: WorkerLoad(in_flight=1.0, node=f"n{r}") for r in range(4, 8)})
    loads[6] = WorkerLoad(in_flight=8.0, node="n3")
    result = _inverted(loads)
    assert 3 in _moved(result, "prefill") and 6 in _moved(result, "decode")
    change = next(c for c in result.changes if c.row == 3)
    assert change.partner == 6 and change.node == "n3"
    assert pair_swaps(result.changes, result.groups)[3] == 6
    ids = tuple(f"w{r}" for r in range(8))
    recommendation, options = worker_recommendation(change, result, ids, 6, 5.0)
    assert "swap in place with w6 on the same node (n3)" in recommendation.detail
    assert options["chosen_because"] == "swap in place with w6 on the same node (n3): no data moves"
    assert len(_moved(result, "prefill")) == n


def test_the_loss_in_output_tokens_and_requests_is_consistent() -> None:
    result = _inverted()
    assert result.lost_tokens_per_s > 0
    for bound in ("", "low", "high"):
        assert result.lost_output_tokens(bound) == pytest.approx(result.lost_requests(bound) * OSL)
    change = result.changes[0]
    fields = loss_fields(result, change.share)
    assert fields["lost_requests_per_s"] == pytest.approx(
        result.lost_tokens_per_s * change.share / (ISL + OSL)
    )
    assert fields["lost_output_tokens_per_s"] == pytest.approx(fields["lost_requests_per_s"] * OSL)
    for name in ("lost_output_tokens_per_s", "lost_requests_per_s"):
        low, value, high = fields[f"{name}_low"], fields[name], fields[f"{name}_high"]
        assert low is not None and value is not None and high is not None
        assert 0 <= low <= value <= high
    recommendation, _ = worker_recommendation(change, result, tuple(f"w{r}" for r in range(8)), None, None)
    assert f"+{fields['lost_output_tokens_per_s']:,.0f} output tokens/s" in recommendation.detail
    assert "requests/s" in recommendation.detail and "prompt + output tokens/s" in recommendation.detail
    now = datetime(2024, 6, 3, tzinfo=UTC)
    Finding(kind=FindingKind.DECODE_ON_LOW_BANDWIDTH, first_seen=now, last_seen=now, **fields)  # validates


def test_a_range_down_to_zero_names_its_cause() -> None:
    groups = [
        _group("H100-SXM", range(0, 4), 6_500.0),
        _group("H200-SXM", range(4, 8), 9_000.0, uncertainty=0.3),
    ]
    roles = [[(r, "decode") for r in range(0, 4)], [(r, "prefill") for r in range(4, 8)]]
    # The current decode pool was seen saturated well above the model's figure: the measured gain is small
    # and the draws of the counterfactual plan take its low end to 0.
    result = place(
        groups,
        roles,
        isl=ISL,
        osl=OSL,
        demand_tokens_per_s=1.0,
        peak_demand_tokens_per_s=1.0,
        measured=(None, 34_000.0),
    )
    assert result.lost_tokens_per_s > 0 and result.lost_low == 0.0
    assert result.range_cause.startswith("the current placement's measured throughput")
    assert "with the model's figure instead, the low end would be" in result.range_cause
    # Where the low end stays above 0 there is nothing to explain.
    assert _inverted().range_cause == ""


def _segment(state: PoolState, evidence: str = "") -> SegmentAnalysis:
    mix = TrafficMix(prompt_rate=1.0, output_rate=1.0, request_rate=1.0, isl=1.0, osl=1.0, buckets=1)
    return SegmentAnalysis(0, 1, 0.0, 3600.0, mix, {}, (), None, 0.0, state=StateEvidence(state, evidence))


def test_a_demand_limited_pool_is_never_critical() -> None:
    p = SeverityParams()
    served = _inverted(peak=1.0)
    huge = served.current.tokens_per_s  # a loss as large as the pool itself
    demand = _segment(PoolState.DEMAND_LIMITED, "0.0 requests waiting")
    assert not supply_limited(demand)
    assert severity(huge, huge, p, supply_limited=supply_limited(demand)) is Severity.WARNING
    assert severity_basis(demand).startswith("demand-limited (0.0 requests waiting)")
    small = served.current.tokens_per_s * p.warning_share / 2
    assert severity(small, served.current.tokens_per_s, p, supply_limited=False) is Severity.INFO


def test_critical_only_on_a_supply_limited_pool() -> None:
    p = SeverityParams()
    short = _inverted(peak=1e9)
    capacity = short.current.tokens_per_s
    lost = capacity * p.critical_share * 2
    supply = _segment(PoolState.SUPPLY_LIMITED, "its decode phase seen saturated")
    assert supply_limited(supply)
    assert severity(lost, capacity, p, supply_limited=supply_limited(supply)) is Severity.CRITICAL
    # Unknown (no queue reported, or requests waiting with nothing at its limit): never critical.
    unknown = _segment(PoolState.UNKNOWN, "no engine reports a queue")
    assert not supply_limited(unknown)
    assert severity(lost, capacity, p, supply_limited=supply_limited(unknown)) is Severity.WARNING
    assert severity_basis(unknown).startswith("pool state unknown (no engine reports a queue)")
