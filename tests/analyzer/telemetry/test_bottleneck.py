"""Measured bottleneck: the counters decide, the role is a prior, weak sources say so, noise and gaps do
not flip verdicts, and flapping workers yield one episode."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.findings.role_drift import RoleDriftParams
from analyzer.telemetry.bottleneck import (
    EVIDENCE,
    REASON_TEXT,
    BottleneckGrid,
    BottleneckThresholds,
    Reason,
    classify,
    episodes,
)
from analyzer.telemetry.frames import (
    ROLES,
    SOURCES,
    STATES,
    EngineFrame,
    GpuFrame,
    gpu_workers_from_engines,
    grouped_nanmedian,
)
from fleet.contract import (
    ActivityEvidence,
    Bottleneck,
    EngineSample,
    GpuSample,
    GpuState,
    Role,
    TelemetrySource,
)

START = 1_700_000_000.0
WINDOW = 60.0
RNG = np.random.default_rng(7)


def _noisy(level: float | None, n: int, noise: float = 0.04) -> np.ndarray:
    if level is None:
        return np.full(n, np.nan)
    return np.clip(level + RNG.normal(0.0, noise, n), 0.0, 1.0)


def gpu_frame(
    profiles: Mapping[str, Mapping[str, float | None]],
    windows: int = 30,
    gpus: int = 2,
    source: TelemetrySource = TelemetrySource.DCGM,
    drop: float = 0.0,
) -> GpuFrame:
    """Each worker's GPUs report every window at the profile's levels (plus noise); ``drop`` loses samples."""
    workers = tuple(sorted(profiles))
    ts, worker, tensor, sm, dram, util, state = [], [], [], [], [], [], []
    gr, mem_copy = [], []
    n = windows * gpus
    for i, name in enumerate(workers):
        p = profiles[name]
        keep = RNG.random(n) >= drop
        ts.append((START + WINDOW * (np.arange(n) // gpus + 1))[keep])
        worker.append(np.full(n, i)[keep])
        tensor.append(_noisy(p.get("tensor"), n)[keep])
        sm.append(
            _noisy(p.get("sm", (p.get("tensor") or 0.0) + 0.2 if p.get("tensor") is not None else None), n)[
                keep
            ]
        )
        dram.append(_noisy(p.get("dram"), n)[keep])
        util.append(_noisy(p.get("util"), n)[keep])
        gr.append(_noisy(p.get("gr"), n)[keep])
        mem_copy.append(_noisy(p.get("mem_copy"), n)[keep])
        lost = p.get("lost") is not None
        state.append(np.full(n, STATES.index(GpuState.LOST if lost else GpuState.OK))[keep])
    cat = np.concatenate
    return GpuFrame(
        workers=workers,
        ts=cat(ts),
        worker=cat(worker).astype(np.int64),
        sm_active=cat(sm),
        tensor_active=cat(tensor),
        dram_active=cat(dram),
        gpu_util=cat(util),
        source=np.full(sum(len(t) for t in ts), SOURCES.index(source), dtype=np.int64),
        state=cat(state).astype(np.int64),
        gr_engine_active=cat(gr),
        mem_copy_util=cat(mem_copy),
    )


def engine_frame(roles: dict[str, Role], windows: int = 30, **series: dict[str, np.ndarray]) -> EngineFrame:
    workers = tuple(sorted(roles))
    n = windows * len(workers)

    def column(name: str, default: float) -> np.ndarray:
        per = series.get(name, {})
        return np.concatenate(
            [np.asarray(per.get(w, np.full(windows, default)), dtype=float) for w in workers]
        )

    return EngineFrame(
        workers=workers,
        ts=np.tile(START + WINDOW * (np.arange(windows) + 1), len(workers)),
        worker=np.repeat(np.arange(len(workers)), windows).astype(np.int64),
        role=np.repeat([ROLES.index(roles[w]) for w in workers], windows).astype(np.int64),
        kv_cache_usage=column("kv", 0.4),
        requests_running=np.full(n, 8.0),
        requests_waiting=column("waiting", 0.0),
        preemptions=column("preemptions", 0.0),
        prompt_tokens=np.full(n, 1000.0),
        generation_tokens=np.full(n, 1000.0),
    )


def run(
    gpu: GpuFrame, engine: EngineFrame | None, windows: int = 30, smoothing_windows: int = 5
) -> BottleneckGrid:
    thresholds = BottleneckThresholds(smoothing_windows=smoothing_windows)
    return classify(gpu, engine, start=START, end=START + windows * WINDOW, thresholds=thresholds)


def last(grid: BottleneckGrid, worker: str) -> tuple[Bottleneck, float, str]:
    return grid.verdict(worker)


def test_counters_separate_compute_memory_and_idle() -> None:
    gpu = gpu_frame(
        {
            "prefill-0": {"tensor": 0.7, "dram": 0.3},
            "decode-0": {"tensor": 0.2, "dram": 0.7},
            "idle-0": {"tensor": 0.02, "dram": 0.03},
        }
    )
    engine = engine_frame({"prefill-0": Role.PREFILL, "decode-0": Role.DECODE, "idle-0": Role.DECODE})
    grid = run(gpu, engine)
    assert last(grid, "prefill-0")[0] is Bottleneck.COMPUTE
    assert last(grid, "decode-0")[0] is Bottleneck.MEMORY_BANDWIDTH
    assert last(grid, "idle-0")[0] is Bottleneck.UNDERUTILISED
    for worker in grid.workers:
        _, confidence, reason = last(grid, worker)
        assert confidence > 0.8, worker
        assert reason == REASON_TEXT[Reason.MEASURED]


def test_dcgm_dram_activity_is_read_against_its_08_ceiling() -> None:
    """DRAM 0.68 and tensor 0.62: saturated memory on DCGM (0.68/0.8 > 0.62/0.8), the same on a source
    whose DRAM ratio reaches 1.0 only if the threshold moves with it."""
    profile = {"w": {"tensor": 0.62, "dram": 0.68}}
    dcgm = run(gpu_frame(profile), None)
    assert last(dcgm, "w")[0] is Bottleneck.MEMORY_BANDWIDTH
    assert float(dcgm.memory_pressure[0, -1]) == pytest.approx(0.68 / 0.8, abs=0.05)
    gpm = run(gpu_frame(profile, source=TelemetrySource.NVML_GPM), None)
    assert float(gpm.memory_pressure[0, -1]) == pytest.approx(0.68 / 0.9, abs=0.05)


def test_kv_full_with_preemptions_or_a_growing_queue_is_capacity() -> None:
    windows = 30
    gpu = gpu_frame(
        {
            "a": {"tensor": 0.2, "dram": 0.6},
            "b": {"tensor": 0.2, "dram": 0.6},
            "c": {"tensor": 0.2, "dram": 0.6},
        }
    )
    engine = engine_frame(
        {"a": Role.DECODE, "b": Role.DECODE, "c": Role.DECODE},
        kv={"a": np.full(windows, 0.95), "b": np.full(windows, 0.96), "c": np.full(windows, 0.95)},
        preemptions={"a": np.full(windows, 2.0)},
        waiting={"b": np.linspace(1, 60, windows), "c": np.full(windows, 0.0)},
    )
    grid = run(gpu, engine)
    assert last(grid, "a")[0] is Bottleneck.CAPACITY
    assert last(grid, "b")[0] is Bottleneck.CAPACITY
    assert last(grid, "c")[0] is Bottleneck.MEMORY_BANDWIDTH  # a full cache alone is not a limit
    assert last(grid, "a")[2] == REASON_TEXT[Reason.KV_FULL]


def test_counters_override_the_role_and_the_role_breaks_ties() -> None:
    gpu = gpu_frame(
        {"labelled-decode": {"tensor": 0.75, "dram": 0.25}, "tie": {"tensor": 0.52, "dram": 0.46}}
    )
    agreeing = run(gpu_frame({"x": {"tensor": 0.75, "dram": 0.25}}), engine_frame({"x": Role.PREFILL}))
    grid = run(gpu, engine_frame({"labelled-decode": Role.DECODE, "tie": Role.DECODE}))
    verdict, confidence, _ = last(grid, "labelled-decode")
    assert verdict is Bottleneck.COMPUTE
    assert confidence < last(agreeing, "x")[1]
    tie, tie_confidence, reason = last(grid, "tie")
    assert (
        tie is Bottleneck.MEMORY_BANDWIDTH
    )  # 0.52/0.8 = 0.65 against 0.46/0.8 = 0.575: decode breaks the tie
    assert reason == REASON_TEXT[Reason.ROLE_TIEBREAK]
    assert tie_confidence <= 0.5


def test_utilization_only_sources_say_they_cannot_tell() -> None:
    busy = {"w": {"util": 0.95}}
    idle = {"w": {"util": 0.05}}
    for source in (
        TelemetrySource.NVML_BASIC,
        TelemetrySource.DCGM,
    ):  # dcgm-exporter without profiling fields
        verdict, confidence, reason = last(run(gpu_frame(busy, source=source), None), "w")
        assert verdict is Bottleneck.UNKNOWN
        assert reason == REASON_TEXT[Reason.UTILIZATION_ONLY]
        assert confidence == 0.0
        verdict, confidence, _ = last(run(gpu_frame(idle, source=source), None), "w")
        assert verdict is Bottleneck.UNDERUTILISED
        assert 0.0 < confidence <= 0.5


def test_sm_activity_without_tensor_counts_with_less_confidence() -> None:
    grid = run(gpu_frame({"w": {"sm": 0.9, "dram": 0.2}}), None)
    verdict, confidence, reason = last(grid, "w")
    assert verdict is Bottleneck.COMPUTE
    assert reason == REASON_TEXT[Reason.SM_ONLY]
    assert confidence <= 0.6 + 1e-6


def test_gaps_and_noise_do_not_flip_the_verdict() -> None:
    gpu = gpu_frame({"w": {"tensor": 0.2, "dram": 0.65}}, windows=120, drop=0.5)
    noisy = run(gpu, None, windows=120)
    assert {e.bottleneck for e in episodes(noisy) if e.bottleneck is not Bottleneck.UNKNOWN} == {
        Bottleneck.MEMORY_BANDWIDTH
    }
    assert len(episodes(noisy)) <= 2  # the warm-up and the verdict


def test_no_telemetry_and_lost_gpus_are_unknown_with_the_reason() -> None:
    gpu = gpu_frame({"lost": {"tensor": 0.5, "dram": 0.5, "lost": 1.0}})
    engine = engine_frame({"lost": Role.DECODE, "silent": Role.DECODE})
    grid = run(gpu, engine)
    assert last(grid, "lost")[0] is Bottleneck.UNKNOWN
    assert last(grid, "lost")[2] == REASON_TEXT[Reason.GPU_LOST]
    assert last(grid, "silent")[0] is Bottleneck.UNKNOWN
    assert last(grid, "silent")[2] == REASON_TEXT[Reason.NO_TELEMETRY]


def test_hysteresis_reports_a_flapping_worker_once_and_a_real_change_once() -> None:
    windows = 60
    t = np.arange(windows)
    flapping = np.where(t % 2 == 0, 0.75, 0.15)  # compute, memory, compute, ... every minute
    changing = np.where(t < 30, 0.75, 0.15)
    frames = []
    for name, tensor in (("flap", flapping), ("change", changing)):
        frames.append((name, tensor, 1.0 - tensor))
    gpu = GpuFrame(
        workers=("change", "flap"),
        ts=np.tile(START + WINDOW * (t + 1), 2),
        worker=np.repeat([0, 1], windows).astype(np.int64),
        sm_active=np.full(2 * windows, np.nan),
        tensor_active=np.concatenate([changing, flapping]),
        dram_active=np.concatenate([(1 - changing) * 0.8, (1 - flapping) * 0.8]),
        gpu_util=np.full(2 * windows, np.nan),
        source=np.full(2 * windows, SOURCES.index(TelemetrySource.DCGM), dtype=np.int64),
        state=np.zeros(2 * windows, dtype=np.int64),
    )
    grid = run(gpu, None, windows=windows, smoothing_windows=1)
    flap = [e for e in episodes(grid) if e.worker_id == "flap"]
    change = [e for e in episodes(grid) if e.worker_id == "change"]
    assert len(flap) == 1  # never held a verdict for 3 windows: one (unknown) episode, not 60
    assert [e.bottleneck for e in change] == [
        Bottleneck.UNKNOWN,
        Bottleneck.COMPUTE,
        Bottleneck.MEMORY_BANDWIDTH,
    ]
    switch = change[2]
    assert switch.start == START + WINDOW * (30 + 2)  # after 3 windows of the new verdict
    assert change[1].evidence["tensor_active"] == pytest.approx(0.75)


def test_from_samples_attributes_gpus_and_counts_the_rest() -> None:
    t0 = datetime.fromtimestamp(START, UTC)
    engines = [
        EngineSample(
            ts=t0 + timedelta(seconds=60 * (i + 1)),
            window_s=60,
            worker_id="w",
            node="n",
            engine="vllm",
            role=Role.DECODE,
            model="m",
            gpu_uuids=["GPU-a"],
            kv_cache_usage=0.5,
            requests_waiting=0,
            preemptions=0,
        )
        for i in range(10)
    ]
    samples = [
        GpuSample(
            ts=t0 + timedelta(seconds=60 * (i + 1)),
            window_s=60,
            node="n",
            gpu_uuid=uuid,
            gpu_index=0,
            gpu_name="NVIDIA H200",
            tensor_active=0.2,
            dram_active=0.7,
            source=TelemetrySource.NVML_GPM,
        )
        for i in range(10)
        for uuid in ("GPU-a", "GPU-orphan")
    ]
    frame, unattributed = GpuFrame.from_samples(samples, gpu_workers_from_engines(engines))
    assert frame.workers == ("w",) and len(frame) == 10 and unattributed == 10
    grid = classify(frame, EngineFrame.from_samples(engines), start=START, end=START + 600)
    assert grid.verdict("w")[0] is Bottleneck.MEMORY_BANDWIDTH
    assert episodes(grid)[-1].role is Role.DECODE


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.one_of(st.floats(0, 1), st.just(float("nan")))),
        min_size=0,
        max_size=60,
    ),
    st.sampled_from([1.0, 250.0]),  # ratios take the one-key sort, counts the two-key one
)
def test_grouped_nanmedian_matches_numpy(pairs: list[tuple[int, float]], scale: float) -> None:
    cells = np.array([c for c, _ in pairs], dtype=np.int64)
    values = np.array([v * scale for _, v in pairs], dtype=np.float64)
    got = grouped_nanmedian(cells, values, 8)
    for cell in range(8):
        members = values[cells == cell]
        members = members[~np.isnan(members)]
        if members.size:
            assert got[cell] == pytest.approx(float(np.median(members)), abs=1e-9 * scale)
        else:
            assert np.isnan(got[cell])


def _evidence(grid: BottleneckGrid, worker: str) -> ActivityEvidence | None:
    return EVIDENCE[int(grid.evidence[grid.workers.index(worker), -1])]


def test_busy_time_with_a_busy_memory_controller_reads_memory_bound_on_weak_evidence() -> None:
    """dcgm-exporter's default: GPU_UTIL and MEM_COPY_UTIL, no profiling fields."""
    grid = run(gpu_frame({"w": {"util": 0.97, "mem_copy": 0.8}}), engine_frame({"w": Role.DECODE}))
    verdict, confidence, reason = last(grid, "w")
    assert verdict is Bottleneck.MEMORY_BANDWIDTH
    assert reason == REASON_TEXT[Reason.UTILISATION_MEMORY]
    assert "not whether its bandwidth limited throughput" in reason
    assert 0.0 < confidence <= BottleneckThresholds().util_confidence + 1e-6  # float32
    assert confidence < RoleDriftParams().confidence  # weak evidence never drives a role drift
    assert _evidence(grid, "w") is ActivityEvidence.UTILISATION


def test_busy_time_that_cannot_decide_leaves_the_verdict_unknown_with_its_reason() -> None:
    profiles = {
        "half-memory": {"util": 0.97, "mem_copy": 0.35},  # busy, memory controller busy a third of it
        "busy-only": {"util": 0.97},  # GPU_UTIL alone
        "half-busy": {"util": 0.6, "mem_copy": 0.7},  # memory busy, but the GPU idles 40% of the time
    }
    grid = run(gpu_frame(profiles), None)
    for worker, why in (
        ("half-memory", Reason.UTILISATION_UNDECIDED),
        ("busy-only", Reason.UTILIZATION_ONLY),
        ("half-busy", Reason.UTILISATION_UNDECIDED),
    ):
        verdict, confidence, reason = last(grid, worker)
        assert verdict is Bottleneck.UNKNOWN, worker
        assert reason == REASON_TEXT[why], worker
        assert confidence == 0.0
        assert _evidence(grid, worker) is ActivityEvidence.UTILISATION
    assert "cannot decide" in REASON_TEXT[Reason.UTILISATION_UNDECIDED]


def test_compute_bound_is_never_called_from_busy_time() -> None:
    quiet_memory = {"w": {"util": 1.0, "mem_copy": 0.02}}  # a compute-bound GEMM would read like this
    verdicts = {e.bottleneck for e in episodes(run(gpu_frame(quiet_memory), None))}
    assert Bottleneck.COMPUTE not in verdicts


def test_idle_on_busy_time_is_under_utilised() -> None:
    grid = run(gpu_frame({"w": {"util": 0.05, "mem_copy": 0.02}}), None)
    verdict, confidence, reason = last(grid, "w")
    assert verdict is Bottleneck.UNDERUTILISED
    assert reason == REASON_TEXT[Reason.UTILISATION_IDLE]
    assert 0.0 < confidence <= 0.5


def test_a_mig_instance_reads_its_own_engine_activity() -> None:
    """GPU_UTIL is not supported on MIG: GR_ENGINE_ACTIVE is the instance's busy share."""
    grid = run(gpu_frame({"mig": {"gr": 0.95, "mem_copy": 0.8}, "idle-mig": {"gr": 0.04}}), None)
    assert last(grid, "mig")[0] is Bottleneck.MEMORY_BANDWIDTH
    assert last(grid, "idle-mig")[0] is Bottleneck.UNDERUTILISED
    profiled = run(gpu_frame({"mig": {"tensor": 0.7, "dram": 0.2, "gr": 0.95, "mem_copy": 0.9}}), None)
    # DCGM profiling fields work per MIG instance: they decide, the busy-time counters do not.
    assert last(profiled, "mig")[0] is Bottleneck.COMPUTE
    assert last(profiled, "mig")[2] == REASON_TEXT[Reason.MEASURED]
    assert _evidence(profiled, "mig") is ActivityEvidence.PROFILING


def test_busy_time_counters_in_frames_from_samples() -> None:
    ts = datetime(2026, 1, 5, tzinfo=UTC)
    samples = [
        GpuSample(
            ts=ts + timedelta(minutes=i),
            window_s=60.0,
            node="n",
            gpu_uuid="MIG-1",
            gpu_index=0,
            gpu_name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
            worker_id="w",
            gr_engine_active=0.9,
            mem_copy_util=0.7,
            source=TelemetrySource.NVML_GPM,
            parent_gpu_uuid="GPU-1",
            mig_profile="1g.10gb",
        )
        for i in range(3)
    ]
    frame, unattributed = GpuFrame.from_samples(samples)
    assert unattributed == 0
    assert np.allclose(frame.gr_engine_active, 0.9) and np.allclose(frame.mem_copy_util, 0.7)
    assert np.isnan(frame.gpu_util).all()  # unknown, never 0
