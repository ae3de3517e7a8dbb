"""Zero-agent mode's cost past the network: decoding query_range JSON, parsing matrices, mapping to frames.

Synthetic answers for N GPUs (4 DCGM ratio fields) over T windows, the shape Prometheus returns. The
baseline is the JSON decode alone (orjson where installed), so the figures read as "parse and map cost
x times the decode". Usage: python benchmarks/prometheus_source_bench.py [GPUS ...] [--windows T]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from analyzer.sources.prometheus.metrics import GPU_QUERIES
from analyzer.sources.prometheus.series import TimeGrid, parse_matrix
from analyzer.sources.prometheus.source import map_fleet


def loads(body: bytes) -> Any:
    try:
        import orjson
    except ImportError:
        return json.loads(body)
    return orjson.loads(body)


WIDTHS = (6, 10, 8, 9, 8, 7, 19)


def answer(n_gpus: int, times: list[float], rng: np.random.Generator) -> bytes:
    result = []
    for i in range(n_gpus):
        labels = {
            "UUID": f"GPU-{i:08d}", "gpu": str(i % 8), "Hostname": f"node-{i // 8}",
            "modelName": "NVIDIA H100 80GB HBM3", "namespace": "llm", "pod": f"worker-{i // 8}",
            "job": "dcgm-exporter", "instance": f"10.0.{i // 8}.1:9400",
        }  # fmt: skip
        values = rng.random(len(times))
        result.append(
            {"metric": labels, "values": [[t, repr(float(v))] for t, v in zip(times, values, strict=True)]}
        )
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("gpus", nargs="*", type=int, default=[64, 256])
    parser.add_argument(
        "--windows", type=int, default=2016, help="windows per series (2016 = a week at 5 min)"
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    grid = TimeGrid(1_768_000_000.0, 300.0, args.windows)
    times = grid.times().tolist()
    queries = [
        q
        for q in GPU_QUERIES
        if q.rank == 0 and q.column in ("sm_active", "tensor_active", "dram_active", "gpu_util")
    ]
    header = ("GPUs", "points", "JSON MB", "decode s", "parse s", "map s", "(parse+map)/decode")
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, WIDTHS, strict=True)))
    for n_gpus in args.gpus:
        raw = {q: answer(n_gpus, times, rng) for q in queries}
        t0 = time.perf_counter()
        decoded = {q: loads(body) for q, body in raw.items()}
        t1 = time.perf_counter()
        results = {q: parse_matrix(body)[0] for q, body in decoded.items()}
        t2 = time.perf_counter()
        fleet = map_fleet(results, grid)
        t3 = time.perf_counter()
        assert len(fleet.gpu) == n_gpus * args.windows
        points = n_gpus * args.windows * len(queries)
        megabytes = sum(len(b) for b in raw.values()) / 1e6
        ratio = (t3 - t1) / (t1 - t0)
        seconds = (f"{t1 - t0:.2f}", f"{t2 - t1:.2f}", f"{t3 - t2:.2f}")
        row = (f"{n_gpus}", f"{points}", f"{megabytes:.0f}", *seconds, f"{ratio:.1f}")
        print(" ".join(f"{c:>{w}}" for c, w in zip(row, WIDTHS, strict=True)))


if __name__ == "__main__":
    main()
