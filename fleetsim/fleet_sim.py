"""The vectorised fleet engine: GPUs x windows, a chunk of windows at a time.

A chunk holds every window of a span of simulated time as numpy columns (windows x GPUs, windows x
workers). Chunks must be computed in order (queues carry over); their size depends only on the fleet's
size, so a run's output does not depend on how it is consumed (a file, or a stream window by window).
Randomness is keyed by (seed, stream, pool, chunk) or (seed, stream, day): the same seed gives the same
numbers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from fleet.catalog import Catalog
from fleet.contract import Role
from fleetsim.counters import DRAM_ACTIVE_CEILING, measured, power_w, worker_activity
from fleetsim.latency_histograms import HistogramColumns, histogram_columns, sigma_of
from fleetsim.layout import FleetLayout, build_layout
from fleetsim.life import LifeEvents
from fleetsim.physics_choice import Physics
from fleetsim.pool import (
    PREFILL,
    Capacities,
    PoolFlow,
    PoolModel,
    PoolTraffic,
    QueueState,
    latencies,
    pool_traffic,
)
from fleetsim.rng import STREAM_ENGINE_NOISE, STREAM_GPU_NOISE, rng_for
from fleetsim.role_changes import RoleSchedule
from fleetsim.scenario import Scenario

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_CELLS_PER_CHUNK = 400_000  # windows x GPUs per chunk: bounds memory, whatever the fleet's size
_BASELINE_MEM_BYTES = 450e6  # what NVML shows used on a GPU with no process (driver reservations)
_LATENCY_NOISE = 0.03


@dataclass(frozen=True)
class GpuColumns:
    """(windows, GPUs) columns; ``present`` false where the collector sent nothing."""

    present: BoolArray
    lost: BoolArray
    degraded: BoolArray  # reported "degraded", some fields null
    sm_active: FloatArray
    tensor_active: FloatArray
    dram_active: FloatArray
    gpu_util: FloatArray
    mem_used_bytes: IntArray
    power_w: FloatArray
    nvlink_tx_bytes: IntArray
    nvlink_rx_bytes: IntArray
    pcie_tx_bytes: IntArray
    pcie_rx_bytes: IntArray


@dataclass(frozen=True)
class EngineColumns:
    """(windows, workers) columns; ``present`` false where the engine is down or the collector silent.

    Latency quantiles are NaN where the engine observed no request in the window. The latency
    histograms (``fleetsim.latency_histograms``) are held as the lognormal behind each and its count.
    """

    present: BoolArray
    prompt_tokens: IntArray
    generation_tokens: IntArray
    requests_running: IntArray
    requests_waiting: IntArray
    kv_cache_usage: FloatArray
    preemptions: IntArray
    ttft_p50_s: FloatArray
    ttft_p99_s: FloatArray
    tpot_p50_s: FloatArray
    tpot_p99_s: FloatArray
    ttft_p90_s: FloatArray
    tpot_p90_s: FloatArray
    e2e_p90_s: FloatArray
    ttft_histogram: HistogramColumns
    tpot_histogram: HistogramColumns
    e2e_histogram: HistogramColumns


@dataclass(frozen=True)
class PoolChunk:
    """One pool's inputs for a chunk: traffic, per-role capacities, which workers are up and routed to,
    and their roles per window where scheduled changes concern the pool (None: the layout's)."""

    traffic: PoolTraffic
    capacities: Capacities
    up: BoolArray
    roles: IntArray | None = None


@dataclass(frozen=True)
class Chunk:
    index: int
    first_window: int
    window_end_epoch: FloatArray  # Unix seconds of each window's end
    gpu: GpuColumns
    engine: EngineColumns
    flows: tuple[PoolFlow, ...]


def chunk_windows_for(n_gpus: int) -> int:
    """Windows per chunk for a fleet of ``n_gpus``: about 400k GPU-windows, at least 32 windows."""
    return max(32, _CELLS_PER_CHUNK // max(n_gpus, 1))


def rfc3339(epoch_s: float) -> str:
    moment = datetime.fromtimestamp(epoch_s, UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class FleetSimulation:
    """A scenario's fleet under one seed; ``chunks`` yields its columns in time order."""

    def __init__(
        self,
        scenario: Scenario,
        catalog: Catalog,
        seed: int = 0,
        *,
        window_s: float | None = None,
        start: datetime | None = None,
        roles: Mapping[str, Role] | None = None,
        physics: Physics | None = None,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.window_s = float(window_s if window_s is not None else scenario.window_s)
        if self.window_s <= 0:
            raise ValueError(f"window_s must be positive, got {self.window_s}")
        self.start = start or scenario.start
        if self.start.tzinfo is None:
            raise ValueError("the simulation start must be timezone-aware")
        self.epoch0 = self.start.timestamp()
        self.layout: FleetLayout = build_layout(scenario, catalog, roles)
        self.life = LifeEvents(scenario, self.layout, seed, self.window_s)
        self.schedule = RoleSchedule(scenario, self.layout, self.window_s)
        self.physics = physics or Physics()
        self.models = tuple(PoolModel(self.layout, p.index, self.physics) for p in self.layout.pools)
        self.chunk_windows = chunk_windows_for(len(self.layout.gpus))
        self._gpu_worker = np.array([g.worker for g in self.layout.gpus], dtype=np.int64)
        self._gpu_node = np.array([g.node for g in self.layout.gpus], dtype=np.int64)
        self._worker_node = np.array([w.node for w in self.layout.workers], dtype=np.int64)
        self._tdp = np.array([g.sku.tdp_w or 700.0 for g in self.layout.gpus])
        self._basic = np.array([g.basic for g in self.layout.gpus], dtype=bool)
        self._mig = np.array([g.parent_uuid is not None for g in self.layout.gpus], dtype=bool)
        serving, loading = [], []
        for g in self.layout.gpus:
            if g.worker < 0:
                serving.append(_BASELINE_MEM_BYTES)
                loading.append(_BASELINE_MEM_BYTES)
                continue
            pool = self.layout.workers[g.worker].pool
            hbm = float(g.sku.hbm_bytes or 0)
            serving.append(
                min(hbm, hbm * self.models[pool].step.engine.hbm_utilization + _BASELINE_MEM_BYTES)
            )
            loading.append(self.models[pool].step.weights_gpu / 2 + _BASELINE_MEM_BYTES)  # weights loading
        self._serving_mem = np.array(serving)
        self._loading_mem = np.array(loading)
        self._states = [QueueState() for _ in self.layout.pools]
        self._next = 0

    def windows_in(self, days: float) -> int:
        return max(1, round(days * 86_400.0 / self.window_s))

    def window_start(self, first: int, count: int) -> FloatArray:
        return (first + np.arange(count, dtype=np.float64)) * self.window_s

    def pool_chunk(
        self, pool: int, chunk: int, first: int, count: int, up: BoolArray | None = None
    ) -> PoolChunk:
        """Traffic, capacities and availability of one pool for windows [first, first + count)."""
        starts = self.window_start(first, count)
        model = self.models[pool]
        traffic = pool_traffic(
            model.pool, self.epoch0, starts, window_s=self.window_s, seed=self.seed, chunk=chunk
        )
        if up is None:
            up = self.life.worker_up(starts)
        routed = up & ~self.life.drained(starts)
        roles = self.schedule.pool_roles(pool, starts)
        return PoolChunk(traffic, model.capacities(traffic), routed[:, list(model.pool.workers)], roles)

    def chunks(self, n_windows: int | None = None) -> Iterator[Chunk]:
        """Chunks from the next one on, until ``n_windows`` windows (None: forever)."""
        while n_windows is None or self._next * self.chunk_windows < n_windows:
            first = self._next * self.chunk_windows
            count = self.chunk_windows if n_windows is None else min(self.chunk_windows, n_windows - first)
            yield self._chunk(self._next, first, count)
            self._next += 1

    def _chunk(self, index: int, first: int, count: int) -> Chunk:
        layout = self.layout
        starts = self.window_start(first, count)
        up = self.life.worker_up(starts)
        restarting = self.life.restarting(starts)
        gap = self.life.collector_gap(starts)
        lost = self.life.gpu_lost(starts)
        n_workers = len(layout.workers)
        shape_w = (count, n_workers)
        cols: dict[str, FloatArray] = {
            name: np.zeros(shape_w)
            for name in (
                "tensor", "sm", "dram", "util", "nvlink", "pcie_tx", "pcie_rx", "prompt", "generation",
                "running", "waiting", "kv", "preempt", "ttft50", "ttft99", "tpot50", "tpot99", "ttft90",
                "tpot90", "e2e90", "did_work", "tokens_per_request",
            )
        }  # fmt: skip
        flows = []
        for p, model in enumerate(self.models):
            pc = self.pool_chunk(p, index, first, count, up)
            flow = model.flow(
                pc.traffic, pc.capacities, pc.up, self._states[p], window_s=self.window_s, roles=pc.roles
            )
            flows.append(flow)
            act = worker_activity(model, flow, pc.traffic)
            lat = latencies(model, flow, pc.traffic)
            idx = list(model.pool.workers)
            mean_p = pc.traffic.mix.mean_prompt[:, None]
            mean_o = pc.traffic.mix.mean_output[:, None]
            is_prefill = flow.roles == PREFILL
            cols["tensor"][:, idx] = act.tensor
            cols["sm"][:, idx] = act.sm
            cols["dram"][:, idx] = act.dram
            cols["util"][:, idx] = act.util
            cols["nvlink"][:, idx] = act.nvlink_bytes_s
            cols["pcie_tx"][:, idx] = act.pcie_tx_bytes_s
            cols["pcie_rx"][:, idx] = act.pcie_rx_bytes_s
            cols["prompt"][:, idx] = np.where(
                is_prefill | model.colocated, flow.prompt_rate, flow.received_prompt_rate
            )
            cols["generation"][:, idx] = np.where(is_prefill, flow.prompt_rate / mean_p, flow.output_rate)
            cols["running"][:, idx] = flow.batch
            cols["waiting"][:, idx] = flow.waiting
            cols["kv"][:, idx] = flow.kv_usage
            cols["preempt"][:, idx] = flow.preempt_rate
            cols["ttft50"][:, idx] = lat.ttft_p50
            cols["ttft99"][:, idx] = lat.ttft_p99
            cols["tpot50"][:, idx] = lat.tpot_p50
            cols["tpot99"][:, idx] = lat.tpot_p99
            cols["ttft90"][:, idx] = lat.ttft_p90
            cols["tpot90"][:, idx] = lat.tpot_p90
            cols["e2e90"][:, idx] = lat.e2e_p90
            cols["did_work"][:, idx] = np.where(is_prefill, flow.prompt_rate, flow.output_rate)
            # A prefill worker generates one token per request; the others a request's output.
            cols["tokens_per_request"][:, idx] = np.where(is_prefill, 1.0, mean_o)
        return Chunk(
            index=index,
            first_window=first,
            window_end_epoch=self.epoch0 + starts + self.window_s,
            gpu=self._gpu_columns(index, cols, restarting, gap, lost, starts),
            engine=self._engine_columns(index, cols, up, gap),
            flows=tuple(flows),
        )

    def _gpu_columns(
        self,
        index: int,
        cols: Mapping[str, FloatArray],
        restarting: BoolArray,
        gap: BoolArray,
        lost: BoolArray,
        starts: FloatArray,
    ) -> GpuColumns:
        rng = rng_for(self.seed, STREAM_GPU_NOISE, index)
        assigned = self._gpu_worker >= 0
        owner = np.where(assigned, self._gpu_worker, 0)
        count = restarting.shape[0]

        def per_gpu(name: str) -> FloatArray:
            return np.where(assigned, cols[name][:, owner], 0.0)

        tensor = measured(per_gpu("tensor"), rng)
        sm = np.maximum(measured(per_gpu("sm"), rng), tensor)
        dram = measured(per_gpu("dram"), rng, DRAM_ACTIVE_CEILING)
        util = np.maximum(measured(per_gpu("util"), rng), sm)
        power = power_w(self._tdp, sm, tensor, dram, rng)
        down = np.where(assigned, restarting[:, owner], False)
        mem = np.where(down, self._loading_mem, self._serving_mem) * np.ones((count, 1))
        window = self.window_s
        nvlink = per_gpu("nvlink") * window
        degraded = self.life.degraded(starts) & ~lost

        def reported(name: str, value: FloatArray, basic: bool = False) -> FloatArray:
            """NaN where the GPU is lost, the field missing from a degraded report, or not collected."""
            missing = lost | self.life.degraded(starts, name)
            if basic:
                missing = missing | self._basic
            return np.where(missing, np.nan, value)

        return GpuColumns(
            present=~gap[:, self._gpu_node],
            lost=lost,
            degraded=degraded,
            sm_active=reported("sm_active", sm, basic=True),
            tensor_active=reported("tensor_active", tensor, basic=True),
            dram_active=reported("dram_active", dram, basic=True),
            gpu_util=reported("gpu_util", util),
            mem_used_bytes=np.rint(mem).astype(np.int64),
            power_w=np.where(self._mig, np.nan, reported("power_w", power)),  # NVML: the parent's only
            nvlink_tx_bytes=np.rint(nvlink).astype(np.int64),
            nvlink_rx_bytes=np.rint(nvlink * (1.0 + 0.001 * rng.standard_normal(nvlink.shape))).astype(
                np.int64
            ),
            pcie_tx_bytes=np.rint(per_gpu("pcie_tx") * window + 2e6).astype(np.int64),
            pcie_rx_bytes=np.rint(per_gpu("pcie_rx") * window + 2e6).astype(np.int64),
        )

    def _engine_columns(
        self, index: int, cols: Mapping[str, FloatArray], up: BoolArray, gap: BoolArray
    ) -> EngineColumns:
        rng = rng_for(self.seed, STREAM_ENGINE_NOISE, index)
        window = self.window_s
        worked = cols["did_work"] > 0

        def quantile(name: str) -> FloatArray:
            noisy = cols[name] * np.exp(_LATENCY_NOISE * rng.standard_normal(cols[name].shape))
            return np.where(worked & np.isfinite(noisy), noisy, np.nan)

        # The draws keep their order (the p90s' come last): a seed's samples stay what they were before.
        ttft50, tpot50 = quantile("ttft50"), quantile("tpot50")
        kv = np.where(
            cols["kv"] > 0, np.clip(cols["kv"] + 0.005 * rng.standard_normal(cols["kv"].shape), 0, 1), 0.0
        )
        preemptions = rng.poisson(cols["preempt"] * window).astype(np.int64)
        ttft99 = np.fmax(quantile("ttft99"), ttft50)  # a p99 is never below its p50
        tpot99 = np.fmax(quantile("tpot99"), tpot50)
        ttft90 = np.fmin(np.fmax(quantile("ttft90"), ttft50), ttft99)  # a p90 lies between them
        tpot90 = np.fmin(np.fmax(quantile("tpot90"), tpot50), tpot99)
        e2e90 = quantile("e2e90")
        generation = np.rint(cols["generation"] * window).astype(np.int64)
        # Observations (fleetsim.latency_histograms): requests served for TTFT and end to end, output
        # tokens for TPOT; a family the role reports (a finite model quantile) is empty when idle.
        requests = np.divide(
            generation, cols["tokens_per_request"], out=np.zeros(generation.shape), where=generation > 0
        )
        ttft_sigma = sigma_of(ttft50, ttft99)
        return EngineColumns(
            present=up & ~gap[:, self._worker_node],
            prompt_tokens=np.rint(cols["prompt"] * window).astype(np.int64),
            generation_tokens=generation,
            requests_running=np.rint(cols["running"]).astype(np.int64),
            requests_waiting=np.rint(cols["waiting"]).astype(np.int64),
            kv_cache_usage=kv,
            preemptions=preemptions,
            ttft_p50_s=ttft50,
            ttft_p99_s=ttft99,
            tpot_p50_s=tpot50,
            tpot_p99_s=tpot99,
            ttft_p90_s=ttft90,
            tpot_p90_s=tpot90,
            e2e_p90_s=e2e90,
            ttft_histogram=histogram_columns(ttft90, ttft_sigma, requests, np.isfinite(cols["ttft50"])),
            tpot_histogram=histogram_columns(
                tpot90, sigma_of(tpot50, tpot99), generation.astype(np.float64), np.isfinite(cols["tpot50"])
            ),
            e2e_histogram=histogram_columns(e2e90, ttft_sigma, requests, np.isfinite(cols["e2e90"])),
        )
