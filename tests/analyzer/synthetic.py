"""A small, hand-written fleet for the analyzer's unit tests: raw sample columns with simple, known physics.

Not the simulator (fleetsim/examine.py runs that): here every number is chosen by the test, so a
test can say exactly what the analyzer must find. Prefill workers share the prompt tokens equally and are
busy in proportion; each prefill leg generates one token per request (max_tokens=1). Decode workers share
the output tokens; their batch follows from a linear step time (``tpot = a + b x batch``) and their KV use
from the batch and the mean context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
H100_1G = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"  # a MIG instance, as NVML names it
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
START = 1_717_372_800.0  # 2024-06-03T00:00:00Z, a Monday
HBM = {H100: 80e9, H200: 141e9, H100_1G: 10e9}
STEP = {H100: (0.020, 60e-6), H200: (0.0157, 50e-6), H100_1G: (0.16, 480e-6)}  # tpot = a + b x batch
KV_TOKENS = {H100: 400_000.0, H200: 1_100_000.0, H100_1G: 1.0}
# GPU counters a fleet reports: DCGM profiling fields (with GPU_UTIL), or dcgm-exporter's default without
# them (GPU_UTIL and MEM_COPY_UTIL), or GPU_UTIL alone (source "nvml-basic" also means this).
PROFILING, UTILISATION, BUSY_ONLY = "profiling", "utilisation", "busy-only"


@dataclass(frozen=True)
class Worker:
    worker_id: str
    gpu_name: str
    role: str  # prefill, decode, mixed
    tp: int = 2
    parent_gpu: str | None = None  # a MIG instance's physical GPU (its instances are index 0..tp-1 of it)
    mig_profile: str | None = None

    @property
    def node(self) -> str:
        return self.worker_id.split("/")[0]


@dataclass
class Fleet:
    workers: Sequence[Worker]
    hours: float = 24.0
    window_s: float = 600.0
    rate_rps: Callable[[float], float] = lambda hour: 60.0
    isl: Callable[[float], float] = lambda hour: 1300.0
    osl: Callable[[float], float] = lambda hour: 180.0
    prefill_speed: float = 13_000.0  # prompt tokens per busy second, any SKU
    model: str = MODEL
    precision: str = "fp8"
    source: str = "dcgm"
    counters: str = PROFILING  # PROFILING, UTILISATION or BUSY_ONLY (what the GPUs report)
    decode_waiting: float = 0.0  # requests queued at each decode worker (a supply-limited pool queues)
    prefill_waiting: float = 0.0  # prompts queued at each prefill worker
    # (worker_id, first hour, last hour) -> override applied to that worker's windows
    silent: list[tuple[str, float, float]] = field(default_factory=list)  # engine up, no tokens
    lost: list[tuple[str, float, float]] = field(default_factory=list)  # GPUs lost, engine gone
    gpu_override: dict[str, dict[str, float]] = field(default_factory=dict)  # worker -> GPU values
    seed: int = 0

    def columns(self) -> tuple[dict[str, Any], dict[str, Any]]:
        rng = np.random.default_rng(self.seed)
        gpu: dict[str, list[Any]] = {k: [] for k in _GPU_KEYS}
        eng: dict[str, list[Any]] = {k: [] for k in _ENGINE_KEYS}
        n_windows = round(self.hours * 3600 / self.window_s)
        prefill = [w for w in self.workers if w.role == "prefill"]
        decode = [w for w in self.workers if w.role == "decode"]
        mixed = [w for w in self.workers if w.role == "mixed"]
        for k in range(n_windows):
            ts = START + (k + 1) * self.window_s
            hour = k * self.window_s / 3600.0
            rate = self.rate_rps(hour) * (1.0 + 0.01 * rng.normal())
            isl, osl = self.isl(hour), self.osl(hour)
            for w in self.workers:
                if _within(self.lost, w.worker_id, hour):
                    for i in range(w.tp):
                        _gpu_row(gpu, w, i, ts, self.window_s, self.source, self.counters, state="lost")
                    continue
                silent = _within(self.silent, w.worker_id, hour)
                serving = [
                    x
                    for x in (prefill if w.role == "prefill" else decode if w.role == "decode" else mixed)
                    if not _within(self.silent, x.worker_id, hour)
                    and not _within(self.lost, x.worker_id, hour)
                ]
                share = 0.0 if silent or not serving else rate / len(serving)
                row = self._engine_values(w, share, isl, osl)
                row["gpu"].update(self.gpu_override.get(w.worker_id, {}))
                for i in range(w.tp):
                    _gpu_row(gpu, w, i, ts, self.window_s, self.source, self.counters, **row["gpu"])
                _engine_row(eng, w, ts, self.window_s, self.model, self.precision, **row["engine"])
        gpu_cols: dict[str, Any] = dict(gpu)
        eng_cols: dict[str, Any] = dict(eng)
        gpu_cols["ts"] = np.asarray(gpu["ts"], dtype=np.float64)
        eng_cols["ts"] = np.asarray(eng["ts"], dtype=np.float64)
        return gpu_cols, eng_cols

    def _engine_values(self, w: Worker, requests: float, isl: float, osl: float) -> dict[str, dict[str, Any]]:
        win = self.window_s
        hbm = HBM[w.gpu_name]
        if w.role == "prefill":
            busy = min(1.0, requests * isl / self.prefill_speed)
            return {
                "gpu": {
                    "util": busy,
                    "tensor": 0.5 * busy,
                    "sm": 0.9 * busy,
                    "dram": 0.02,
                    "mem_copy": 0.3 * busy,
                    "mem": 0.9 * hbm,
                },
                "engine": {
                    "prompt": requests * isl * win,
                    "generation": requests * win,
                    "running": 4 * busy,
                    "waiting": self.prefill_waiting,
                    "kv": 0.01,
                    "tpot": None,
                    "ttft": 0.3,
                },
            }
        a, b = STEP[w.gpu_name]
        tokens = requests * osl
        if tokens * b >= 0.9:
            raise ValueError(f"{w.worker_id}: {tokens:,.0f} tokens/s is beyond this decode worker")
        batch = tokens * a / max(1e-9, 1.0 - tokens * b)
        tpot = a + b * batch if batch > 0 else None
        context = isl + osl / 2.0
        kv = min(1.0, batch * context / KV_TOKENS[w.gpu_name])
        prompt = requests * isl * win
        waiting = self.decode_waiting if batch > 0 else 0.0
        return {
            "gpu": {
                "util": 1.0 if batch > 0 else 0.0,
                "tensor": 0.1,
                "sm": 0.8,
                "dram": 0.55 if batch else 0.0,
                "mem_copy": 0.75 if batch else 0.0,
                "mem": 0.9 * hbm,
            },
            "engine": {
                "prompt": prompt,
                "generation": tokens * win,
                "running": batch,
                "waiting": waiting,
                "kv": kv,
                "tpot": tpot,
                "ttft": 0.03,
            },
        }


def _within(spans: list[tuple[str, float, float]], worker_id: str, hour: float) -> bool:
    return any(w == worker_id and first <= hour < last for w, first, last in spans)


_GPU_KEYS = (
    "ts",
    "window_s",
    "node",
    "gpu_uuid",
    "gpu_index",
    "gpu_name",
    "worker_id",
    "sm_active",
    "tensor_active",
    "dram_active",
    "gpu_util",
    "gr_engine_active",
    "mem_copy_util",
    "mem_used_bytes",
    "state",
    "source",
    "parent_gpu_uuid",
    "mig_profile",
)
_ENGINE_KEYS = (
    "ts",
    "window_s",
    "worker_id",
    "node",
    "engine",
    "role",
    "role_source",
    "model",
    "precision",
    "tp",
    "gpu_uuids",
    "prompt_tokens",
    "generation_tokens",
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "preemptions",
    "ttft_p50_s",
    "tpot_p50_s",
)


def gpu_uuid(worker: Worker, index: int) -> str:
    return f"GPU-{worker.worker_id.replace('/', '-')}-{index}"


def _gpu_row(
    cols: dict[str, list[Any]],
    w: Worker,
    index: int,
    ts: float,
    window_s: float,
    source: str,
    counters: str = PROFILING,
    *,
    util: float = 0.0,
    tensor: float = 0.0,
    sm: float = 0.0,
    dram: float = 0.0,
    mem_copy: float = 0.0,
    mem: float = 0.0,
    state: str = "ok",
) -> None:
    lost = state == "lost"
    profiling = counters == PROFILING and source != "nvml-basic"
    mig = w.parent_gpu is not None
    values = {
        "ts": ts,
        "window_s": window_s,
        "node": w.node,
        "gpu_uuid": gpu_uuid(w, index),
        "gpu_index": index,
        "gpu_name": w.gpu_name,
        "worker_id": w.worker_id,
        "sm_active": None if lost or not profiling else sm,
        "tensor_active": None if lost or not profiling else tensor,
        "dram_active": None if lost or not profiling else dram,
        # GPU_UTIL is not supported on a MIG instance: its own activity is GR_ENGINE_ACTIVE.
        "gpu_util": None if lost or mig else util,
        "gr_engine_active": util if mig and not lost else None,
        "mem_copy_util": mem_copy if counters == UTILISATION and not lost else None,
        "mem_used_bytes": None if lost else int(mem),
        "state": state,
        "source": source,
        "parent_gpu_uuid": w.parent_gpu,
        "mig_profile": w.mig_profile,
    }
    for key, value in values.items():
        cols[key].append(value)


def _engine_row(
    cols: dict[str, list[Any]],
    w: Worker,
    ts: float,
    window_s: float,
    model: str,
    precision: str,
    *,
    prompt: float,
    generation: float,
    running: float,
    waiting: float,
    kv: float,
    tpot: float | None,
    ttft: float,
) -> None:
    values = {
        "ts": ts,
        "window_s": window_s,
        "worker_id": w.worker_id,
        "node": w.node,
        "engine": "vllm",
        "role": w.role,
        "role_source": "engine",
        "model": model,
        "precision": precision,
        "tp": w.tp,
        "gpu_uuids": [gpu_uuid(w, i) for i in range(w.tp)],
        "prompt_tokens": round(prompt),
        "generation_tokens": round(generation),
        "requests_running": round(running),
        "requests_waiting": round(waiting),
        "kv_cache_usage": min(1.0, kv),
        "preemptions": 0,
        "ttft_p50_s": ttft,
        "tpot_p50_s": tpot,
    }
    for key, value in values.items():
        cols[key].append(value)


def workers(spec: Sequence[tuple[str, str, int, int]]) -> list[Worker]:
    """[(node, gpu_name, prefill workers, decode workers)] -> workers named ``<node>/<role>-<k>``."""
    out = []
    for node, gpu_name, n_prefill, n_decode in spec:
        out += [Worker(f"{node}/prefill-{k + 1}", gpu_name, "prefill") for k in range(n_prefill)]
        out += [Worker(f"{node}/decode-{k + 1}", gpu_name, "decode") for k in range(n_decode)]
    return out


def diurnal(mean: float, amplitude: float = 0.3) -> Callable[[float], float]:
    return lambda hour: mean * (1.0 + amplitude * math.sin(2 * math.pi * (hour - 10.0) / 24.0))
