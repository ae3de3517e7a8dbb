"""Wire-format records (JSON objects as collectors send them) and batches for the service tests."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def stamp(minute: float) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")


def gpu(gpu: int = 0, minute: float = 0, node: str | None = None, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": "gpu_sample",
        "ts": stamp(minute),
        "window_s": 60.0,
        "node": node or f"node-{gpu // 8}",
        "gpu_uuid": f"GPU-{gpu:04d}",
        "gpu_index": gpu % 8,
        "gpu_name": H200 if gpu % 2 else H100,
        "worker_id": f"worker-{gpu // 2}",
        "sm_active": 0.5,
        "tensor_active": 0.4,
        "dram_active": 0.3,
        "gpu_util": 0.9,
        "mem_used_bytes": 60 * 2**30,
        "power_w": 500.0,
        "source": "sim",
    }
    record.update(fields)
    return record


def engine(worker: int = 0, minute: float = 0, node: str | None = None, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": "engine_sample",
        "ts": stamp(minute),
        "window_s": 60.0,
        "worker_id": f"worker-{worker}",
        "node": node or f"node-{worker // 4}",
        "engine": "vllm",
        "role": "decode" if worker % 2 else "prefill",
        "role_source": "sim",
        "model": MODEL,
        "precision": "bf16",
        "tp": 2,
        "gpu_uuids": [f"GPU-{2 * worker:04d}", f"GPU-{2 * worker + 1:04d}"],
        "prompt_tokens": 1000,
        "generation_tokens": 3000,
        "requests_running": 12,
        "requests_waiting": 1,
        "kv_cache_usage": 0.7,
        "preemptions": 0,
    }
    record.update(fields)
    return record


def fleet_batch(minutes: int = 3, gpus: int = 4) -> list[dict[str, Any]]:
    """``gpus`` GPUs on node-0 and their workers (2 GPUs each), ``minutes`` windows."""
    records = []
    for minute in range(minutes):
        records += [gpu(g, minute) for g in range(gpus)]
        records += [engine(w, minute) for w in range(gpus // 2)]
    return records


def body(records: list[Any], *, compress: bool = False) -> bytes:
    raw = json.dumps({"records": records}).encode()
    return gzip.compress(raw) if compress else raw
