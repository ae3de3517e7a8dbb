"""Speed of the measured-bottleneck classifier: a week of N GPUs at 60-second windows.

Builds synthetic columnar frames (TP-2 workers: a third compute-bound, a third memory-bound, a sixth
capacity-bound, the rest idle; noise and 2% lost samples), then times ``classify`` and ``episodes``, and
prints rows/s and peak memory growth against a baseline that only sorts the same rows (the floor for
any grouped median).

    .venv/bin/python benchmarks/bottleneck_scale.py                 # 256 and 1,024 GPUs
    .venv/bin/python benchmarks/bottleneck_scale.py --gpus 4096     # needs ~8 GB of memory
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from analyzer.telemetry.bottleneck import BottleneckThresholds, classify, episodes
from analyzer.telemetry.frames import ROLES, SOURCES, EngineFrame, GpuFrame
from fleet.contract import Role, TelemetrySource

WEEK_S = 7 * 24 * 3600
WINDOW_S = 60.0
START = 1_700_000_000.0


def frames(gpus: int, seed: int = 0) -> tuple[GpuFrame, EngineFrame]:
    rng = np.random.default_rng(seed)
    windows = int(WEEK_S / WINDOW_S)
    workers = gpus // 2
    n = gpus * windows
    gpu_worker = np.repeat(np.arange(gpus) // 2, windows)
    ts = np.tile(START + WINDOW_S * (np.arange(windows) + 1), gpus)
    kind = gpu_worker % 6  # 0,1 compute; 2,3 memory; 4 capacity; 5 idle
    tensor = np.choose(kind, [0.7, 0.7, 0.2, 0.2, 0.2, 0.03]) + rng.normal(0, 0.05, n)
    dram = np.choose(kind, [0.3, 0.3, 0.7, 0.7, 0.6, 0.03]) + rng.normal(0, 0.05, n)
    keep = rng.random(n) > 0.02
    gpu = GpuFrame(
        workers=tuple(f"w{i:05d}" for i in range(workers)),
        ts=ts[keep],
        worker=gpu_worker[keep].astype(np.int64),
        sm_active=np.clip(tensor + 0.2, 0, 1)[keep],
        tensor_active=np.clip(tensor, 0, 1)[keep],
        dram_active=np.clip(dram, 0, 1)[keep],
        gpu_util=np.full(int(keep.sum()), np.nan),
        source=np.full(int(keep.sum()), SOURCES.index(TelemetrySource.DCGM), dtype=np.int64),
        state=np.zeros(int(keep.sum()), dtype=np.int64),
    )
    m = workers * windows
    e_worker = np.repeat(np.arange(workers), windows)
    capacity = e_worker % 6 == 4
    engine = EngineFrame(
        workers=gpu.workers,
        ts=np.tile(START + WINDOW_S * (np.arange(windows) + 1), workers),
        worker=e_worker.astype(np.int64),
        role=np.where(e_worker % 6 < 2, ROLES.index(Role.PREFILL), ROLES.index(Role.DECODE)).astype(np.int64),
        kv_cache_usage=np.where(capacity, 0.97, 0.5),
        requests_running=np.full(m, 32.0),
        requests_waiting=np.where(capacity, 5.0, 0.0),
        preemptions=np.where(capacity, 1.0, 0.0),
        prompt_tokens=np.full(m, 1e5),
        generation_tokens=np.full(m, 1e5),
    )
    return gpu, engine


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def run(gpus: int) -> None:
    started = time.perf_counter()
    gpu, engine = frames(gpus)
    built = time.perf_counter() - started
    rss_before = peak_rss_gb()
    started = time.perf_counter()
    baseline = np.lexsort((gpu.tensor_active, gpu.worker))
    baseline_s = time.perf_counter() - started
    del baseline
    started = time.perf_counter()
    grid = classify(
        gpu, engine, start=START, end=START + WEEK_S, thresholds=BottleneckThresholds(window_s=WINDOW_S)
    )
    classify_s = time.perf_counter() - started
    started = time.perf_counter()
    found = episodes(grid)
    episodes_s = time.perf_counter() - started
    labels = ", ".join(sorted({str(e.bottleneck) for e in found}))
    rate = len(gpu) / classify_s / 1e6
    print(f"{gpus:6d} GPUs  {len(gpu) / 1e6:6.2f} M samples  frames built in {built:5.1f} s")
    print(f"        classify {classify_s:6.2f} s ({rate:5.2f} M rows/s)")
    print(
        f"        baseline: one sort of the same rows {baseline_s:5.2f} s ({classify_s / baseline_s:4.1f}x)"
    )
    print(f"        episodes {episodes_s:5.2f} s: {len(found)} for {len(grid.workers)} workers ({labels})")
    print(f"        peak RSS {peak_rss_gb():5.2f} GB (after building the frames {rss_before:5.2f} GB)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, nargs="*", default=[256, 1024])
    for gpus in parser.parse_args().gpus:
        run(gpus)


if __name__ == "__main__":
    main()
