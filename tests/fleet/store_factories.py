"""Records for the store and ingest tests (valid by default; override any field)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fleet.contract import EngineSample, GpuSample

# The store_url fixture's PostgreSQL case alone, for what only PostgreSQL has (partitions, closed days).
POSTGRES_ONLY = pytest.mark.parametrize(
    "store_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday, on the hour
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def gpu_sample(gpu: int = 0, minute: float = 0, **fields: Any) -> GpuSample:
    values: dict[str, Any] = {
        "ts": T0 + timedelta(minutes=minute),
        "window_s": 60.0,
        "node": f"node-{gpu // 8}",
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
    values.update(fields)
    return GpuSample.model_validate(values)


def engine_sample(worker: int = 0, minute: float = 0, **fields: Any) -> EngineSample:
    values: dict[str, Any] = {
        "ts": T0 + timedelta(minutes=minute),
        "window_s": 60.0,
        "worker_id": f"worker-{worker}",
        "node": f"node-{worker // 4}",
        "engine": "vllm",
        "role": "decode",
        "role_source": "sim",
        "model": "meta-llama/Llama-3.1-70B-Instruct",
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
    values.update(fields)
    return EngineSample.model_validate(values)
