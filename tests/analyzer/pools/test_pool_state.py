"""Pool state from the fleet's evidence: its queues and the phases seen at their limit, never the model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.pool_state import PoolState, pool_state, queued_share
from analyzer.telemetry.grid import WorkerGrid, aggregate_engine_samples, aggregate_gpu_samples, build_grid
from fleet.catalog import load_catalog
from fleetsim.examine import simulate
from fleetsim.scenario import builtin_scenarios

CATALOG = load_catalog()


def test_the_queues_decide_never_the_model() -> None:
    demand = pool_state(0.4, 0.0, (None, None))
    assert demand.state is PoolState.DEMAND_LIMITED and "served what arrived" in demand.evidence
    # Requests wait and the decode phase is seen at its limit, or the queues grow: supply-limited.
    assert pool_state(3.0, 0.0, (None, 9_000.0)).state is PoolState.SUPPLY_LIMITED
    growing = pool_state(3.0, 0.2, (None, None))
    assert growing.state is PoolState.SUPPLY_LIMITED and "growing by 0.20 requests/s" in growing.evidence
    # Requests wait but no phase is at its limit and nothing grows: not the GPUs; unknown, never healthy.
    held = pool_state(3.0, 0.0, (None, None))
    assert held.state is PoolState.UNKNOWN and "admission" in held.evidence
    # No queue reported: unknown, whatever the model would say.
    assert pool_state(math.nan, math.nan, (1.0, 1.0)).state is PoolState.UNKNOWN
    # A colocated pool has no phases of its own: its workers, seen at their limit with work waiting.
    colocated = pool_state(3.0, 0.0, (None, None), colocated_at_limit=True)
    assert colocated.state is PoolState.SUPPLY_LIMITED
    assert "colocated workers seen saturated" in colocated.evidence


def test_an_over_demanded_pool_is_supply_limited_and_a_diurnal_one_is_not() -> None:
    for scenario, expected in (("over-demand", False), ("demo", True)):
        run = simulate(scenario, CATALOG, days=1.0, window_s=300.0, seed=0, truth=False)
        result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
        (pool,) = result.typed_summary.pools
        assert [s.demand_limited for s in pool.segments] == [expected] * len(pool.segments), scenario


def test_a_backlog_scales_with_the_pool() -> None:
    """Sixteen engines holding a request or so each between iterations are not a backlog; two each are."""
    slack = pool_state(12.8, 0.1, (5_000.0, None), workers=16)
    assert slack.state is PoolState.DEMAND_LIMITED and "0.80 per serving worker" in slack.evidence
    assert pool_state(32.0, 0.1, (5_000.0, None), workers=16).state is PoolState.SUPPLY_LIMITED
    # One worker: a single waiting request is already a queue, as before.
    assert pool_state(1.0, 0.0, (None, 900.0), workers=1).state is PoolState.SUPPLY_LIMITED
    assert pool_state(12.8, 0.1, (5_000.0, None), workers=16, backlog_per_worker=0.5).state is (
        PoolState.SUPPLY_LIMITED
    )


def test_a_colocated_pool_has_a_state_from_its_queues_though_no_placement(tmp_path: Path) -> None:
    """``mixed`` (every worker serves both phases) as shipped, and offered almost three times as much."""
    shipped = Path(builtin_scenarios()["mixed"]).read_text()
    for rate, demand_limited in ((55, True), (150, False)):
        path = tmp_path / f"mixed-{rate}.yaml"
        path.write_text(shipped.replace("rate_rps: 55", f"rate_rps: {rate}"))
        run = simulate(str(path), CATALOG, days=1.0, window_s=300.0, seed=0)
        assert [s["demand_limited"] for s in run.truth["segments"]] == [demand_limited]
        result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
        (pool,) = result.typed_summary.pools
        assert pool.serving == "colocated"
        assert [s.demand_limited for s in pool.segments] == [demand_limited] * len(pool.segments)
        if not demand_limited:
            assert "colocated workers seen saturated" in pool.segments[0].pool_state_evidence


def test_a_queue_the_pool_clears_between_bursts_is_no_backlog() -> None:
    """Requests wait in the median bucket and the phases hit their limit in the bursts, but the typical
    window has no queue: the pool served what arrived (an outside probe at 81% load queued in 45%)."""
    bursty = pool_state(6.0, 0.01, (12_000.0, None), workers=4, queued=0.45)
    assert bursty.state is PoolState.DEMAND_LIMITED
    assert "only 45% of its windows" in bursty.evidence and "bursts" in bursty.evidence
    held = pool_state(6.0, 0.01, (12_000.0, None), workers=4, queued=0.97)
    assert held.state is PoolState.SUPPLY_LIMITED
    # Where no source says how often requests waited (a store rolled up before 0011), the size decides.
    assert pool_state(6.0, 0.01, (12_000.0, None), workers=4).state is PoolState.SUPPLY_LIMITED


def test_a_demand_limited_pool_that_fell_behind_at_its_peaks_says_so() -> None:
    """Its median window has no queue, so it stays demand-limited, but a backlog in 37% of its windows is
    not left unsaid."""
    peaks = pool_state(0.0, 0.0, (None, None), workers=9, queued=0.37, peak_waiting=48_000.0)
    assert peaks.state is PoolState.DEMAND_LIMITED
    assert "served what arrived; but at its peaks it fell behind" in peaks.evidence
    assert (
        "requests waited in 37% of its windows, 48,000 of them in its 90th-percentile bucket"
        in peaks.evidence
    )
    bursts = pool_state(20.0, 0.0, (None, None), workers=9, queued=0.3, peak_waiting=400.0)
    assert bursts.state is PoolState.DEMAND_LIMITED and "fell behind" in bursts.evidence
    # Rare queues, a peak within the pool's slack, or nothing known of either: nothing more to say.
    for queued, peak in ((0.05, 48_000.0), (0.37, 5.0), (math.nan, 48_000.0), (0.37, math.nan)):
        quiet = pool_state(0.0, 0.0, (None, None), workers=9, queued=queued, peak_waiting=peak)
        assert quiet.evidence.endswith("it served what arrived")


def _grid(waiting: dict[str, list[float | None]]) -> WorkerGrid:
    """One hour of one-minute engine windows per worker, with the requests waiting at each."""
    rows = [(worker, i, q) for worker, queue in waiting.items() for i, q in enumerate(queue)]
    engine = {
        "ts": [60.0 * i + 30.0 for _, i, _ in rows],
        "worker_id": [w for w, _, _ in rows],
        "role": ["decode"] * len(rows),
        "window_s": [60.0] * len(rows),
        "prompt_tokens": [0.0] * len(rows),
        "generation_tokens": [0.0] * len(rows),
        "requests_waiting": [q for _, _, q in rows],
    }
    return build_grid(
        tuple(waiting), {}, aggregate_gpu_samples({"ts": []}), aggregate_engine_samples(engine, 3600.0),
        start=0.0, end=3600.0, bucket_s=3600.0,
    )  # fmt: skip


def test_the_queued_share_is_of_windows_with_a_request_waiting_somewhere_in_the_pool() -> None:
    # Decode workers hold a backlog all hour; the prefill workers queue now and then, or never.
    backlog = _grid({
        "decode-0": [8.0] * 60, "decode-1": [9.0] * 60,
        "prefill-0": [1.0] * 6 + [0.0] * 54, "prefill-1": [0.0] * 60,
    })  # fmt: skip
    assert backlog.queued_share[:, 0].tolist() == [1.0, 1.0, 0.1, 0.0]
    assert queued_share(backlog, (0, 1, 2, 3), 0, 1) == 1.0
    assert queued_share(backlog, (2, 3), 0, 1) == pytest.approx(0.1)
    # Bursts: every worker queues in 27 of 60 windows.
    burst = [20.0] * 27 + [0.0] * 33
    assert queued_share(_grid({"a": burst, "b": burst}), (0, 1), 0, 1) == pytest.approx(0.45)
    # Windows that report no queue are left out of the share; a pool with none at all is unknown.
    assert _grid({"a": [3.0] * 30 + [None] * 30}).queued_share[0, 0] == 1.0
    assert math.isnan(queued_share(_grid({"a": [None] * 60}), (0,), 0, 1))
