from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from analyzer.pipeline import input_from_samples
from analyzer.pools.pool import build_pools
from analyzer.pools.workload import PoolTraffic, acting_roles, pool_traffic
from analyzer.telemetry.frames import ROLES
from analyzer.telemetry.grid import aggregate_engine_samples, aggregate_gpu_samples, build_grid
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, Worker, workers

CATALOG = load_catalog()


def _traffic(fleet: Fleet):  # type: ignore[no-untyped-def]
    return _traffic_of(*fleet.columns())


def _traffic_of(gpu: dict[str, Any], engine: dict[str, Any]):  # type: ignore[no-untyped-def]
    data = input_from_samples(gpu, engine)
    inventory = data.inventory
    grid = build_grid(
        inventory.worker_ids,
        inventory.gpu_worker(),
        data.gpu_buckets,
        data.engine_buckets,
        start=data.start,
        end=data.end,
    )
    (pool,) = build_pools(inventory, {w: i for i, w in enumerate(grid.workers)}, CATALOG)
    return pool_traffic(pool, grid), grid


def _relabel(engine: dict[str, Any], roles: dict[str, str]) -> None:
    """Replace the engine roles of ``roles``' workers in the engine columns."""
    engine["role"] = [roles.get(w, r) for w, r in zip(engine["worker_id"], engine["role"], strict=True)]


def _pool_and_grid(gpu: dict[str, Any], engine: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The fleet's one pool and its grid, from the sample columns."""
    _, grid = _traffic_of(gpu, engine)
    (pool,) = build_pools(
        input_from_samples(gpu, engine).inventory, {w: i for i, w in enumerate(grid.workers)}, CATALOG
    )
    return pool, grid


def test_disaggregated_traffic_counts_tokens_where_they_are_real() -> None:
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    traffic, _ = _traffic(fleet)
    assert traffic.requests_counted
    full = slice(0, 6)
    # Prompt tokens from prefill workers only (decode workers' prompt counters hold received KV).
    assert np.allclose(traffic.prompt_rate[full], 50.0 * 1300.0, rtol=0.03)
    assert np.allclose(traffic.output_rate[full], 50.0 * 180.0, rtol=0.03)
    assert np.allclose(traffic.request_rate[full], 50.0, rtol=0.03)
    assert np.allclose(traffic.isl[full], 1300.0, rtol=1e-3)
    assert np.allclose(traffic.osl[full], 180.0, rtol=1e-3)
    mix = traffic.window(0, 6)
    assert mix.isl == pytest.approx(1300.0, rel=1e-3)
    assert mix.osl == pytest.approx(180.0, rel=1e-3)
    assert mix.tokens_rate == pytest.approx(50.0 * 1480.0, rel=0.03)
    assert traffic.prefill_workers[0] == 3 and traffic.decode_workers[0] == 2


def _decode_counting(fleet: Fleet, prompts: float, outputs: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fleet's records with its decode workers' prompt and generated token counters scaled."""
    gpu, engine = fleet.columns()
    for key, share in (("prompt_tokens", prompts), ("generation_tokens", outputs)):
        engine[key] = [
            round(v * share) if role == "decode" else v
            for v, role in zip(engine[key], engine["role"], strict=True)
        ]
    return gpu, engine


def test_output_length_counts_only_the_requests_decode_admitted() -> None:
    # Prefill serves 50 requests/s; a backlog abandons a tenth before decode. Output per prefilled request
    # (162) would understate the 180 tokens each decoded request generates.
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    traffic, _ = _traffic_of(*_decode_counting(fleet, 0.9, 0.9))
    assert np.allclose(traffic.request_rate[:6], 50.0, rtol=0.03)  # arrivals prefilled: the demand
    assert np.allclose(traffic.admitted_share[:6], 0.9, rtol=1e-3)
    assert np.allclose(traffic.osl[:6], 180.0, rtol=1e-3)
    assert traffic.window(0, 6).osl == pytest.approx(180.0, rel=1e-3)
    assert traffic.window(0, 6).isl == pytest.approx(1300.0, rel=1e-3)


def test_a_backlog_that_loses_most_requests_at_peak_still_counts_the_output_per_admitted_request() -> None:
    # Decode counts whole prompts (it admits every request off-peak); at the two peak hours a backlog loses
    # 60% of the prefilled requests before decode. Output per prefilled request there (72 tokens) would
    # read as a traffic shift; per admitted request it stays 180.
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    gpu, engine = fleet.columns()
    first_hour = min(engine["ts"]) // 3600
    peak = [2 <= t // 3600 - first_hour < 4 for t in engine["ts"]]  # the third and fourth hourly buckets
    for key in ("prompt_tokens", "generation_tokens"):  # tokens counted in each window
        engine[key] = [
            round(v * 0.4) if role == "decode" and hot else v
            for v, role, hot in zip(engine[key], engine["role"], peak, strict=True)
        ]
    traffic, _ = _traffic_of(gpu, engine)
    assert np.allclose(traffic.admitted_share[2:4], 0.4, rtol=2e-2)
    assert np.allclose(traffic.osl[:6], 180.0, rtol=1e-2)
    assert traffic.window(2, 4).osl == pytest.approx(180.0, rel=1e-2)


def test_a_backlog_between_the_phases_that_builds_and_drains_leaves_the_mix_as_it_is() -> None:
    # Decode counts whole prompts. In the third and fourth hours a backlog builds between the phases: decode
    # admits (and generates for) 80% of what prefill serves; in the fifth and sixth it drains, decode
    # admitting 120%, the requests prefilled earlier. Tokens prefilled and generated in one hour then
    # belong to different requests: per prefilled request the drain would read 216 output tokens and a
    # prompt:output ratio of 6.0, a shift of the traffic where only the backlog moved.
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    gpu, engine = fleet.columns()
    first_hour = min(engine["ts"]) // 3600
    scale = {2: 0.8, 3: 0.8, 4: 1.2, 5: 1.2}
    for key in ("prompt_tokens", "generation_tokens"):
        engine[key] = [
            round(v * scale.get(t // 3600 - first_hour, 1.0)) if role == "decode" else v
            for v, role, t in zip(engine[key], engine["role"], engine["ts"], strict=True)
        ]
    traffic, _ = _traffic_of(gpu, engine)
    assert np.allclose(traffic.admitted_share[4:6], 1.2, rtol=2e-2)
    assert np.allclose(traffic.osl[:6], 180.0, rtol=1e-2)
    assert np.allclose(traffic.prompt_per_output[:6], 1300.0 / 180.0, rtol=1e-2)
    assert traffic.window(4, 6).osl == pytest.approx(180.0, rel=1e-2)
    assert traffic.window(0, 6).osl == pytest.approx(180.0, rel=1e-2)


@pytest.mark.parametrize("share", [0.0, 0.3])
def test_decode_workers_that_do_not_count_whole_prompts_leave_the_output_length_to_the_prefill_count(
    share: float,
) -> None:
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    traffic, _ = _traffic_of(*_decode_counting(fleet, share, 1.0))
    assert np.allclose(traffic.admitted_share[:6], 1.0)
    assert traffic.window(0, 6).osl == pytest.approx(180.0, rel=1e-3)


def test_a_decode_worker_labelled_prefill_is_counted_as_the_decode_worker_it_is() -> None:
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    gpu, engine = fleet.columns()
    stale = "node01/decode-1"
    _relabel(engine, {stale: "prefill"})
    labelled, _ = _traffic_of(gpu, engine)
    assert labelled.window(0, 6).isl < 1300.0 / 5  # its output read as prompts served: the lengths collapse
    pool, grid = _pool_and_grid(gpu, engine)
    acting, notes = acting_roles(pool, grid)
    row = grid.workers.index(stale)
    assert (grid.role[row, :6] == ROLES.index("prefill")).all()
    assert (acting.role[row, :6] == ROLES.index("decode")).all()
    assert [note.split(" ", 1)[0] for note in notes] == [stale]
    mix = pool_traffic(pool, acting).window(0, 6)
    assert mix.isl == pytest.approx(1300.0, rel=1e-3)
    assert mix.osl == pytest.approx(180.0, rel=1e-3)


def test_without_prefill_workers_keeping_the_convention_no_label_is_overruled() -> None:
    fleet = Fleet(workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)]), hours=3)
    gpu, engine = fleet.columns()
    engine["generation_tokens"] = [  # every prefill leg generates many tokens: no convention to judge by
        v + 200 * 60 if role == "prefill" else v
        for v, role in zip(engine["generation_tokens"], engine["role"], strict=True)
    ]
    pool, grid = _pool_and_grid(gpu, engine)
    acting, notes = acting_roles(pool, grid)
    assert acting is grid and notes == ()


def test_lengths_follow_the_mix_hour_by_hour() -> None:
    fleet = Fleet(workers([("node00", H100, 2, 2)]), hours=6, isl=lambda h: 1000.0 if h < 3 else 2000.0)
    traffic, _ = _traffic(fleet)
    assert traffic.isl[1] == pytest.approx(1000.0, rel=1e-3)
    assert traffic.isl[4] == pytest.approx(2000.0, rel=1e-3)
    assert traffic.prompt_per_output[4] == pytest.approx(2000.0 / 180.0, rel=1e-3)


def test_a_colocated_pool_does_not_count_requests() -> None:
    fleet = Fleet([Worker("node00/mixed-1", H100, "mixed"), Worker("node00/mixed-2", H100, "mixed")], hours=3)
    traffic, _ = _traffic(fleet)
    assert not traffic.requests_counted
    assert np.isnan(traffic.request_rate).all()
    assert traffic.mixed_workers[0] == 2


def test_rates_use_the_seconds_received_so_gaps_do_not_read_as_lower_traffic() -> None:
    fleet = Fleet(workers([("node00", H100, 2, 2)]), hours=2, rate_rps=lambda h: 40.0)
    gpu, engine = fleet.columns()
    keep = np.ones(len(engine["ts"]), dtype=bool)
    keep[: len(keep) // 4] = False  # the first half hour of every worker's windows went missing
    engine = {
        k: (v[keep] if isinstance(v, np.ndarray) else [x for x, k2 in zip(v, keep, strict=True) if k2])
        for k, v in engine.items()
    }
    buckets = aggregate_engine_samples(engine)
    assert sum(buckets["window_s_sum"]) < 2 * 4 * 3600
    data = input_from_samples(gpu, engine)
    grid = build_grid(
        data.inventory.worker_ids,
        data.inventory.gpu_worker(),
        aggregate_gpu_samples(gpu),
        buckets,
        start=data.start,
        end=data.end,
    )
    (pool,) = build_pools(data.inventory, {w: i for i, w in enumerate(grid.workers)}, CATALOG)
    traffic = pool_traffic(pool, grid)
    assert traffic.request_rate[0] == pytest.approx(40.0, rel=0.05)


def test_without_traffic_the_mix_is_0_where_engines_reported_and_unknown_where_none_did() -> None:
    nan = float("nan")
    traffic = PoolTraffic(
        pool="c/m",
        bucket_start=np.arange(4) * 3600.0,
        bucket_s=3600.0,
        prompt_rate=np.array([0.0, 0.0, nan, 0.0]),
        output_rate=np.array([0.0, 0.0, nan, 0.0]),
        request_rate=np.full(4, nan),
        prefill_workers=np.array([0.0, 1.0, 1.0, 0.0]),
        decode_workers=np.array([0.0, 1.0, 1.0, 0.0]),
        mixed_workers=np.zeros(4),
        requests_counted=False,
    )
    silent = traffic.window(0, 1)  # no engine reported: unknown, never 0
    assert np.isnan([silent.prompt_rate, silent.output_rate, silent.request_rate, silent.tokens_rate]).all()
    assert silent.buckets == 0
    mixed_up = traffic.window(2, 3)  # a worker changed role there: its tokens say nothing of the mix
    assert np.isnan(mixed_up.tokens_rate)
    for idle in (traffic.window(1, 2), traffic.window(0, 4)):  # engines reported no tokens: an idle pool
        assert (idle.prompt_rate, idle.output_rate, idle.request_rate) == (0.0, 0.0, 0.0)
        assert np.isnan(idle.isl) and np.isnan(idle.osl)


def test_workers_that_report_no_role_are_read_by_their_counters() -> None:
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6, rate_rps=lambda h: 50.0)
    gpu, engine = fleet.columns()
    unlabelled = {"node00/prefill-1", "node01/decode-1"}
    _relabel(engine, dict.fromkeys(unlabelled, "unknown"))
    pool, grid = _pool_and_grid(gpu, engine)
    acting, notes = acting_roles(pool, grid)
    prefill, decode = grid.workers.index("node00/prefill-1"), grid.workers.index("node01/decode-1")
    assert (grid.role[[prefill, decode], :6] == ROLES.index("unknown")).all()
    assert (acting.role[prefill, :6] == ROLES.index("prefill")).all()
    assert (acting.role[decode, :6] == ROLES.index("decode")).all()
    assert sorted(note.split(" ", 1)[0] for note in notes) == sorted(unlabelled)
    assert all("reports no role" in note for note in notes)
    assert any(note.endswith("counted as prefill") for note in notes)
    assert any(note.endswith("counted as decode") for note in notes)
    traffic = pool_traffic(pool, acting)
    assert traffic.prefill_workers[0] == 3 and traffic.decode_workers[0] == 2  # none left out
    mix = traffic.window(0, 6)
    assert mix.isl == pytest.approx(1300.0, rel=1e-3) and mix.osl == pytest.approx(180.0, rel=1e-3)


def test_a_worker_with_no_role_that_served_nothing_stays_unknown() -> None:
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=3)
    gpu, engine = fleet.columns()
    idle = "node00/prefill-2"
    _relabel(engine, {idle: "unknown"})
    for key in ("prompt_tokens", "generation_tokens"):
        engine[key] = [
            0 if worker == idle else v for v, worker in zip(engine[key], engine["worker_id"], strict=True)
        ]
    pool, grid = _pool_and_grid(gpu, engine)
    acting, notes = acting_roles(pool, grid)
    row = grid.workers.index(idle)
    assert (acting.role[row, :3] == ROLES.index("unknown")).all() and notes == ()


def test_a_worker_with_no_role_idle_for_hours_holds_the_phase_it_showed() -> None:
    fleet = Fleet(workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]), hours=6)
    gpu, engine = fleet.columns()
    quiet = "node00/prefill-3"
    first_hour = min(engine["ts"]) // 3600
    idle = [
        w == quiet and t // 3600 - first_hour >= 3
        for w, t in zip(engine["worker_id"], engine["ts"], strict=True)
    ]
    _relabel(engine, {quiet: "unknown"})
    for key in ("prompt_tokens", "generation_tokens"):  # up, but sent nothing for the last three hours
        engine[key] = [0 if off else v for v, off in zip(engine[key], idle, strict=True)]
    pool, grid = _pool_and_grid(gpu, engine)
    acting, notes = acting_roles(pool, grid)
    row = grid.workers.index(quiet)
    assert (acting.role[row, :6] == ROLES.index("prefill")).all()  # no role change at hour 3
    assert notes == (f"{quiet} reports no role; its counters are a prefill worker's: counted as prefill",)


def test_a_worker_with_no_role_answering_briefly_to_long_prompts_is_read_as_decode() -> None:
    """Long prompts with short answers (3,000 tokens in, 70 out: 2.3 generated per 100 prompt tokens) put a
    decode worker under the 5% a max_tokens=1 leg may generate; it still makes 70 tokens per request where
    the pool's prefill legs make 1, and is read as decode (it was read as prefill, and the mix's output
    length collapsed to a few tokens)."""
    fleet = Fleet(
        workers([("node00", H100, 3, 0), ("node01", H200, 0, 2)]),
        hours=6,
        rate_rps=lambda h: 20.0,
        isl=lambda h: 3000.0,
        osl=lambda h: 70.0,
    )
    gpu, engine = fleet.columns()
    unlabelled = "node01/decode-1"
    _relabel(engine, {unlabelled: "unknown"})
    pool, grid = _pool_and_grid(gpu, engine)
    acting, notes = acting_roles(pool, grid)
    row = grid.workers.index(unlabelled)
    assert (acting.role[row, :6] == ROLES.index("decode")).all()
    assert notes == (f"{unlabelled} reports no role; its counters are a decode worker's: counted as decode",)
    mix = pool_traffic(pool, acting).window(0, 6)
    assert mix.isl == pytest.approx(3000.0, rel=1e-3) and mix.osl == pytest.approx(70.0, rel=1e-3)
