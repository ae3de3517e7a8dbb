"""What a zero-agent read produced: the GPU and engine frames, the GPUs and workers behind them, per-row facts
the frames have no column for (memory used, latency quantiles), and notes on what the read had to leave out
or could not join."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analyzer.sources.prometheus.series import TimeGrid
from analyzer.telemetry.frames import EngineFrame, FloatArray, GpuFrame, IntArray
from fleet.contract import GpuState, Role, RoleSource


@dataclass(frozen=True)
class PrometheusGpu:
    """A GPU (or MIG instance) as Prometheus reports it, once per worker it served in the range (``worker_id``
    None: no pod). ``windows`` counts the grid columns with any dcgm-exporter series for it, whether or not
    they carry an activity field."""

    gpu_uuid: str
    node: str
    gpu_index: int
    gpu_name: str
    sku: str | None  # catalog key, when a catalog was given
    parent_gpu_uuid: str | None
    mig_profile: str | None
    worker_id: str | None
    namespace: str | None
    pod: str | None
    container: str | None
    windows: int
    first_seen: float | None
    last_seen: float | None
    state: GpuState  # in its last window
    cluster: str | None = None


@dataclass(frozen=True)
class PrometheusWorker:
    """A serving worker: an engine target, with the GPUs its pod held in the range. ``tp`` is never a default:
    the distinct ``tp_rank`` labels where SGLang reports every scheduler, else the GPUs held (TP x DP, the
    split not observable here, as the collector counts them without a command line). ``pod`` is None for an
    engine target known only by its ``instance`` (its GPUs cannot be joined)."""

    worker_id: str
    node: str
    engine: str
    model: str | None
    role: Role
    role_source: RoleSource
    namespace: str | None
    pod: str | None
    gpu_uuids: tuple[str, ...]
    tp: int | None  # SGLang's tensor-parallel ranks where all report, else the GPUs held; None: unknown
    first_seen: float | None
    last_seen: float | None
    cluster: str | None = None
    deployment: str | None = None
    kv_capacity_tokens: int | None = None  # the KV cache its engine reports holding; None: not reported
    max_running_requests: int | None = None  # its engine's reported running-request cap; None: not reported


@dataclass(frozen=True)
class PrometheusFleet:
    """The frames and the inventory behind them. ``gpu_row_gpu`` indexes ``gpus`` for each GpuFrame row,
    ``gpu_row_mem_used_bytes`` carries FB_USED (bytes) and ``gpu_row_busy`` the busy-time counters
    (gpu_sample's ``gr_engine_active``, ``mem_copy_util``) per row; ``engine_row_latency`` carries the
    latency quantiles (engine_sample's ``ttft_p50_s``, ``tpot_p50_s``, ...) per EngineFrame row, NaN where
    unknown; ``engine_row_histograms`` the window's latency histograms behind them (``ttft_histogram``,
    ``tpot_histogram``, ``e2e_histogram``) per row, each per-bucket counts on the shared grid of
    :mod:`fleet.histograms` or None where unknown."""

    grid: TimeGrid
    gpu: GpuFrame
    engine: EngineFrame
    gpus: tuple[PrometheusGpu, ...]
    workers: tuple[PrometheusWorker, ...]
    gpu_row_gpu: IntArray
    gpu_row_mem_used_bytes: FloatArray
    gpu_row_busy: Mapping[str, FloatArray]
    engine_row_latency: Mapping[str, FloatArray]
    notes: tuple[str, ...]
    # Raw GPU sample columns of every GPU that reported (attributed or not), for the GPU view
    # (analyzer/telemetry/gpu_view.py); None where the fleet was built without them.
    all_gpu_columns: Mapping[str, Any] | None = None
    engine_row_histograms: Mapping[str, list[bytes | FloatArray | None]] = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        return self.grid.step

    @property
    def unattributed_gpus(self) -> tuple[str, ...]:
        """GPUs that reported in the range but never under a pod."""
        attributed = {g.gpu_uuid for g in self.gpus if g.worker_id is not None}
        return tuple(sorted({g.gpu_uuid for g in self.gpus if g.windows} - attributed))
