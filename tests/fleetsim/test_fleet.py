"""The fleet engine end to end: counters, life events, engine counters, records and determinism."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from fleet.catalog import Catalog
from fleet.contract import EngineSample, GpuSample, GpuState, parse_record
from fleetsim.fleet_sim import FleetSimulation
from fleetsim.physics_choice import draw_seed, resolve_physics
from fleetsim.records import RecordBuilder, to_records
from fleetsim.scenario import Scenario, load_scenario


def _jsonl(sim: FleetSimulation, days: float) -> bytes:
    builder = RecordBuilder(sim)
    return b"".join(builder.chunk_jsonl(chunk) for chunk in sim.chunks(sim.windows_in(days)))


def _with_rate(scenario: Scenario, rate: float) -> Scenario:
    pool = scenario.pools[0]
    traffic = pool.traffic.model_copy(update={"rate_rps": rate, "bursts_per_day": 0.0})
    return scenario.model_copy(update={"pools": [pool.model_copy(update={"traffic": traffic})]})


def _mean_counters(sim: FleetSimulation, role: str) -> dict[str, float]:
    gpus = [
        g.index for g in sim.layout.gpus if g.worker >= 0 and sim.layout.workers[g.worker].role.value == role
    ]
    chunk = next(sim.chunks(sim.windows_in(1.0)))
    g = chunk.gpu
    return {
        name: float(np.nanmean(getattr(g, name)[:, gpus]))
        for name in ("sm_active", "tensor_active", "dram_active", "gpu_util", "power_w")
    }


def test_counters_rise_with_load(catalog: Catalog) -> None:
    base = load_scenario("balanced")
    light = _mean_counters(FleetSimulation(_with_rate(base, 15.0), catalog, 1, window_s=300), "prefill")
    heavy = _mean_counters(FleetSimulation(_with_rate(base, 70.0), catalog, 1, window_s=300), "prefill")
    for name in ("sm_active", "tensor_active", "gpu_util", "power_w"):
        assert heavy[name] > light[name] * 1.5, name
    light_d = _mean_counters(FleetSimulation(_with_rate(base, 15.0), catalog, 1, window_s=300), "decode")
    heavy_d = _mean_counters(FleetSimulation(_with_rate(base, 70.0), catalog, 1, window_s=300), "decode")
    assert heavy_d["dram_active"] > light_d["dram_active"]
    assert heavy_d["tensor_active"] > light_d["tensor_active"]
    # The phases look like themselves: prefill compute-heavy, decode memory-heavy.
    assert heavy["tensor_active"] > 1.4 * heavy_d["tensor_active"]
    assert heavy_d["dram_active"] > 5 * heavy["dram_active"]


def test_counters_are_ratios_and_lost_gpus_report_nothing(catalog: Catalog) -> None:
    sim = FleetSimulation(load_scenario("demo"), catalog, 2, window_s=120)
    seen_lost = False
    for chunk in sim.chunks(sim.windows_in(7.0)):
        g = chunk.gpu
        ok = ~g.lost
        for name in ("sm_active", "tensor_active", "dram_active", "gpu_util"):
            values = getattr(g, name)[ok]
            assert np.all((values >= 0) & (values <= 1)), name
            assert np.all(np.isnan(getattr(g, name)[g.lost]))
        assert np.all(g.dram_active[ok] <= 0.8)
        assert np.all(g.sm_active[ok] >= g.tensor_active[ok])
        assert np.all(g.gpu_util[ok] >= g.sm_active[ok])
        seen_lost |= bool(g.lost.any())
    assert seen_lost  # demo loses a GPU (Xid 79) late in the week


def test_records_parse_and_both_paths_agree(catalog: Catalog) -> None:
    sim = FleetSimulation(load_scenario("demo"), catalog, 4, window_s=60)
    builder = RecordBuilder(sim)
    chunk = next(sim.chunks(sim.windows_in(0.2)))
    lines = builder.chunk_jsonl(chunk).splitlines()
    parsed = [parse_record(line) for line in lines]
    assert parsed == to_records(builder.chunk_dicts(chunk))
    gpus = [r for r in parsed if isinstance(r, GpuSample)]
    engines = [r for r in parsed if isinstance(r, EngineSample)]
    assert {g.gpu_name for g in gpus} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert {g.source.value for g in gpus} == {"dcgm"}
    assert {e.engine for e in engines} == {"vllm"}
    assert {e.model for e in engines} == {"meta-llama/Llama-3.1-70B-Instruct"}
    assert {e.role_source.value for e in engines} == {"sim"}
    assert "node03/decode-1" in {e.worker_id for e in engines}
    # Time order: every window's records share one timestamp and windows never go back.
    stamps = [r.ts for r in parsed]
    assert stamps == sorted(stamps)


def test_engine_records_report_the_kv_cache_the_simulator_gives_each_worker(catalog: Catalog) -> None:
    sim = FleetSimulation(load_scenario("demo"), catalog, 3, window_s=60)
    builder = RecordBuilder(sim)
    chunk = next(sim.chunks(sim.windows_in(0.05)))
    parsed = [parse_record(line) for line in builder.chunk_jsonl(chunk).splitlines()]
    assert parsed == to_records(builder.chunk_dicts(chunk))  # both paths, through the contract
    reported = {r.worker_id: r.kv_capacity_tokens for r in parsed if isinstance(r, EngineSample)}
    capacity = {w: v for w, v in reported.items() if v is not None}
    assert capacity == reported  # every engine says how much KV it holds, as vLLM and SGLang do
    # The budget the physics caps each worker's batch with (over a sequence's tokens), in whole tokens.
    budget = {
        worker.worker_id: float(model.step.kv_capacity_tokens[i])
        for model in sim.models
        for i, worker in enumerate(model.workers)
    }
    assert capacity.keys() == budget.keys()
    assert all(budget[w] - 1 < v <= budget[w] and v >= 1024 for w, v in capacity.items())
    for model in sim.models:
        limits = model.step.batch_limits(np.full(len(model.workers), 1000.0), 0.0)
        by_kv = [capacity[w.worker_id] / 1000.0 for w in model.workers]
        np.testing.assert_allclose(limits.by_kv, by_kv, rtol=0, atol=1e-3)  # within the floored token
    # Per worker, not per pool: a pool's H100 and H200 workers hold different budgets.
    assert any(len({capacity[w.worker_id] for w in model.workers}) > 1 for model in sim.models)


@pytest.mark.parametrize("physics", ["model", "perturbed"])
def test_engine_records_report_the_concurrency_cap_each_engine_runs_with(
    catalog: Catalog, physics: str
) -> None:
    scenario = load_scenario("tp-mix")  # SGLang and vLLM pools, capped at 256 and 1024
    spec_caps = {p.max_batch for p in scenario.pools}
    chosen = resolve_physics(physics)
    if physics == "perturbed":  # a draw no pool's scenario cap equals, so the two cannot be confused
        draws = (resolve_physics(physics, draw_seed("tp-mix", s)) for s in range(50))
        chosen = next(
            d for d in draws if d.perturbation and d.perturbation.max_running_requests not in spec_caps
        )
    sim = FleetSimulation(scenario, catalog, 3, window_s=60, physics=chosen)
    builder = RecordBuilder(sim)
    chunk = next(sim.chunks(sim.windows_in(0.05)))
    parsed = [parse_record(line) for line in builder.chunk_jsonl(chunk).splitlines()]
    assert parsed == to_records(builder.chunk_dicts(chunk))  # both paths, through the contract
    engines = [r for r in parsed if isinstance(r, EngineSample)]
    assert {r.engine for r in engines} == {"vllm", "sglang"}
    reported = {r.worker_id: r.max_running_requests for r in engines}
    runs_with = {w.worker_id: m.step.engine.max_batch for m in sim.models for w in m.workers}
    assert reported == runs_with  # every worker, the cap its engine's physics runs with
    for model in sim.models:  # ... which is what bounds its batch where KV and tokens leave room
        limits = model.step.batch_limits(np.full(len(model.workers), 1.0), 0.0)
        caps = [reported[w.worker_id] for w in model.workers]
        np.testing.assert_array_equal(limits.batch, np.asarray(caps, dtype=np.float64))
    if chosen.perturbation is None:
        assert set(reported.values()) == spec_caps == {256, 1024}
        assert reported == {w.worker_id: m.pool.spec.max_batch for m in sim.models for w in m.workers}
    else:
        assert set(reported.values()) == {chosen.perturbation.max_running_requests}
        assert not set(reported.values()) & spec_caps


def test_engine_counters_follow_the_engines_conventions(catalog: Catalog) -> None:
    sim = FleetSimulation(load_scenario("balanced"), catalog, 1, window_s=300)
    builder = RecordBuilder(sim)
    records = [
        r
        for r in to_records(builder.chunk_dicts(next(sim.chunks(sim.windows_in(1.0)))))
        if isinstance(r, EngineSample)
    ]
    prefill = [r for r in records if r.role.value == "prefill" and r.prompt_tokens > 0]
    decode = [r for r in records if r.role.value == "decode" and r.generation_tokens > 0]
    # A prefill worker generates one token per request it prefills: ~mean prompt length per token.
    per_request = sum(r.prompt_tokens for r in prefill) / sum(r.generation_tokens for r in prefill)
    assert 1000 < per_request < 1700
    # A decode worker's prompt-token counter counts the KV it received (vLLM #33289).
    received = sum(r.prompt_tokens for r in decode) / sum(r.generation_tokens for r in decode)
    assert 5 < received < 12
    assert all(r.tpot_p50_s is None for r in prefill)
    assert all(
        r.tpot_p50_s is not None and r.tpot_p99_s is not None and r.tpot_p99_s >= r.tpot_p50_s for r in decode
    )
    assert all(
        r.ttft_p99_s is not None and r.ttft_p50_s is not None and r.ttft_p99_s >= r.ttft_p50_s
        for r in prefill
    )
    # The p90s lie between the p50s and the p99s; a prefill engine's requests end with their first token,
    # a decode engine's after their output, so its end-to-end p90 is many TPOTs past its TTFT.
    assert all(r.tpot_p90_s is None and r.e2e_p90_s == pytest.approx(r.ttft_p90_s, rel=0.3) for r in prefill)
    for r in decode:
        assert r.tpot_p50_s is not None and r.tpot_p90_s is not None and r.tpot_p99_s is not None
        assert r.tpot_p50_s <= r.tpot_p90_s <= r.tpot_p99_s
        assert r.ttft_p90_s is not None and r.e2e_p90_s is not None
        assert r.e2e_p90_s > r.ttft_p90_s + 10 * r.tpot_p50_s
    for r in prefill:
        assert r.ttft_p50_s is not None and r.ttft_p90_s is not None and r.ttft_p99_s is not None
        assert r.ttft_p50_s <= r.ttft_p90_s <= r.ttft_p99_s


def test_restarts_gaps_and_lost_gpus_show_in_the_records(catalog: Catalog) -> None:
    scenario = load_scenario("demo")
    life = scenario.life.model_copy(
        update={"restarts_per_worker_week": 20.0, "collector_gaps_per_node_week": 20.0}
    )
    sim = FleetSimulation(scenario.model_copy(update={"life": life}), catalog, 3, window_s=60)
    chunk = next(sim.chunks(sim.windows_in(1.0)))
    engine_missing = ~chunk.engine.present
    gpu_missing = ~chunk.gpu.present
    assert engine_missing.any() and gpu_missing.any()
    # A collector gap silences a whole node: all its GPUs at once.
    node_of = np.array([g.node for g in sim.layout.gpus])
    for w in np.flatnonzero(gpu_missing.any(axis=1))[:20]:
        silent = set(node_of[gpu_missing[w]].tolist())
        for node in silent:
            assert gpu_missing[w, node_of == node].all()
    # A restarting engine sends nothing, while its GPUs report (idle) when the collector is up.
    restarting = sim.life.restarting(sim.window_start(0, len(chunk.window_end_epoch)))
    assert (engine_missing | ~restarting).all()


def test_lost_gpu_record(catalog: Catalog) -> None:
    sim = FleetSimulation(load_scenario("demo"), catalog, 0, window_s=600)
    builder = RecordBuilder(sim)
    lost = []
    for chunk in sim.chunks(sim.windows_in(7.0)):
        for line in builder.chunk_jsonl(chunk).splitlines():
            if b'"lost"' in line:
                lost.append(parse_record(line))
    assert lost and all(isinstance(r, GpuSample) and r.state is GpuState.LOST for r in lost)
    record = lost[0]
    assert isinstance(record, GpuSample)
    assert (
        record.sm_active is None and record.mem_used_bytes is None and record.worker_id == "node01/prefill-2"
    )


def test_same_seed_gives_identical_bytes(catalog: Catalog) -> None:
    scenario = load_scenario("demo")
    first = _jsonl(FleetSimulation(scenario, catalog, 11, window_s=60), 0.3)
    again = _jsonl(FleetSimulation(scenario, catalog, 11, window_s=60), 0.3)
    other = _jsonl(FleetSimulation(scenario, catalog, 12, window_s=60), 0.3)
    assert first == again
    assert first != other
    assert orjson.loads(first.splitlines()[0])["kind"] == "gpu_sample"


def test_window_and_start_options(catalog: Catalog) -> None:
    from datetime import UTC, datetime

    sim = FleetSimulation(
        load_scenario("balanced"), catalog, 0, window_s=15, start=datetime(2025, 1, 6, 12, tzinfo=UTC)
    )
    chunk = next(sim.chunks(4))
    assert len(chunk.window_end_epoch) == 4
    record = to_records(RecordBuilder(sim).chunk_dicts(chunk, slice(0, 1)))[0]
    assert record.ts == datetime(2025, 1, 6, 12, 0, 15, tzinfo=UTC) and record.window_s == 15
    with pytest.raises(ValueError, match="timezone"):
        FleetSimulation(load_scenario("balanced"), catalog, 0, start=datetime(2025, 1, 6))
