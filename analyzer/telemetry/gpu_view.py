"""The GPU view: what a fleet with GPU telemetry and no serving engine still shows (dcgm-exporter alone).

Placement cannot be judged without an engine's token counts, queues and KV use, but the GPUs can be read:
per GPU and per SKU their SM, tensor and DRAM activity, the bottleneck class where the profiling fields
exist, idle GPUs and idle GPU-hours, degraded telemetry, and the exact engine metrics and labels that would
let phasefit judge placement.

Pure: it reads the bucketed GPU columns (:data:`analyzer.telemetry.grid.GPU_BUCKET_COLUMNS`, as both the
store and zero-agent reads produce them) and the GPU inventory. Unknown is never zero: a GPU without
profiling fields has ``null`` activity with ``activity_unknown_reason``; a GPU that reported nothing usable
has ``idle_gpu_hours`` null, never 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from analyzer.telemetry.bottleneck import BottleneckThresholds
from analyzer.telemetry.grid import Columns
from fleet.contract import Bottleneck, TelemetrySource
from fleet.inventory import GpuRecord

IDLE_BELOW = 0.05  # activity (SM active, else GPU_UTIL) under this share in a bucket: the GPU sat idle
# Where bucket columns come from a source the inventory does not name, DCGM's DRAM saturation applies.
_DEFAULT_SOURCE = TelemetrySource.DCGM

PROFILING_FIELDS = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
)
PROFILING_HELP = (
    "enable the DCGM profiling fields DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and "
    "DCGM_FI_PROF_DRAM_ACTIVE (with DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED): list them, uncommented, "
    "in the counters CSV dcgm-exporter loads (start from its etc/dcp-metrics-included.csv; upstream "
    "default-counters.csv has none of them) and point the exporter at that file with `dcgm-exporter -f "
    "FILE.csv` or DCGM_EXPORTER_COLLECTORS=FILE.csv (GPU Operator: a ConfigMap named by "
    "dcgmExporter.config.name plus that variable in dcgmExporter.env); profiling fields need SYS_ADMIN in "
    "the exporter. See docs/getting-started.md, step 1"
)
NO_ENGINE_REASON = (
    "no serving engine (vLLM, SGLang, TensorRT-LLM) reported in the range: placement cannot be judged, so "
    "this is the GPU view alone"
)


@dataclass(frozen=True)
class EngineMetrics:
    """What an engine must expose (and Prometheus or the collector must scrape) for placement to be judged."""

    engine: str
    metrics: tuple[str, ...]
    labels: tuple[str, ...]


# Names as fleet/vocabulary/engines.py reads them (the first of each field's aliases).
ENGINE_METRICS_NEEDED = (
    EngineMetrics(
        "vllm",
        (
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        ),
        ("model_name", "pod", "namespace"),
    ),
    EngineMetrics(
        "sglang",
        (
            "sglang:prompt_tokens_total",
            "sglang:generation_tokens_total",
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
        ),
        ("model_name", "engine_type", "pod", "namespace"),
    ),
    EngineMetrics(
        "trtllm",
        (
            "trtllm_prompt_tokens_total",
            "trtllm_generation_tokens_total",
            "trtllm_num_requests_running",
            "trtllm_num_requests_waiting",
        ),
        ("model_name", "pod", "namespace"),
    ),
)
ENGINE_JOIN_HELP = (
    "scrape each engine's /metrics with the pod and namespace labels of its pod (Prometheus kubernetes_sd "
    "relabelling, or a PodMonitor) so it joins the GPUs dcgm-exporter reports under that pod; a role "
    "label (e.g. llm-d.ai/role, or SGLang's engine_type) says prefill or decode. Without Kubernetes, run the "
    "phasefit collector on the GPU node with PHASEFIT_COLLECTOR_ENGINE_URLS"
)


@dataclass(frozen=True)
class GpuRow:
    """One GPU (or MIG instance) over the range. Ratios are 0..1 means over the buckets that reported them;
    None where never reported (``activity_unknown_reason`` says why)."""

    gpu_uuid: str
    node: str | None
    gpu_name: str | None
    sku: str | None
    worker_id: str | None
    hours: float  # hours of samples received
    sm_active: float | None
    tensor_active: float | None
    dram_active: float | None
    gpu_util: float | None
    mem_used_bytes_max: float | None
    profiling_share: float  # share of its hours with any profiling field
    activity_unknown_reason: str | None
    bottleneck: str  # fleet.contract.Bottleneck value; "unknown" without DRAM and SM/tensor activity
    bottleneck_reason: str | None
    idle_gpu_hours: float | None  # None: no activity of any kind reported
    idle: bool | None  # idle in every hour it reported; None: unknown
    degraded_share: float
    lost_share: float
    state: str | None


@dataclass(frozen=True)
class SkuRow:
    """One SKU's GPUs; activity means over its GPUs that reported it (None: none did)."""

    sku: str
    gpus: int
    gpu_hours: float
    sm_active: float | None
    tensor_active: float | None
    dram_active: float | None
    gpus_without_profiling: int
    idle_gpus: int
    idle_gpu_hours: float | None
    idle_unknown_gpus: int
    degraded_gpus: int
    bottlenecks: dict[str, int]


@dataclass(frozen=True)
class GpuTotals:
    """The view's fleet totals; ``idle_gpu_hours`` is None where no GPU reported an activity field."""

    gpus: int
    gpu_hours: float
    idle_gpus: int
    idle_gpu_hours: float | None
    idle_unknown_gpus: int
    gpus_without_profiling: int
    degraded_gpus: int
    silent_gpus: int
    idle_below: float


@dataclass(frozen=True)
class GpuView:
    """The JSON ``gpu_view`` of ``phasefit analyze`` when no engine reported."""

    from_: str
    to: str
    reason: str
    gpus: list[GpuRow]
    skus: list[SkuRow]
    totals: GpuTotals
    warnings: list[str] = field(default_factory=list)
    profiling_help: str | None = None
    engine_metrics_needed: list[EngineMetrics] = field(default_factory=lambda: list(ENGINE_METRICS_NEEDED))
    engine_join_help: str = ENGINE_JOIN_HELP

    def to_json_dict(self) -> dict[str, Any]:
        body = asdict(self)
        out = {"from": body.pop("from_"), **body}
        cleaned: dict[str, Any] = _finite(out)
        return cleaned


def _finite(value: Any) -> Any:
    """NaN never reaches JSON: it becomes null."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _floats(values: Sequence[Any] | np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _weighted(values: np.ndarray[Any, Any], weights: np.ndarray[Any, Any]) -> float | None:
    ok = ~np.isnan(values) & (weights > 0)
    if not ok.any():
        return None
    return round(float(np.average(values[ok], weights=weights[ok])), 4)


def _bucket_bottleneck(
    sm: float, tensor: float, dram: float, thresholds: BottleneckThresholds, source: TelemetrySource
) -> Bottleneck:
    """One bucket's class from its profiling means: the pressure nearer its saturation, if near a limit."""
    if math.isnan(dram):
        return Bottleneck.UNKNOWN
    if not math.isnan(tensor):
        compute = tensor / thresholds.tensor_saturation
    elif not math.isnan(sm):
        compute = sm / thresholds.sm_saturation
    else:
        return Bottleneck.UNKNOWN
    memory = dram / thresholds.dram_saturation.get(source, 0.8)
    if max(compute, memory) < thresholds.busy:
        return Bottleneck.UNDERUTILISED
    return Bottleneck.COMPUTE if compute >= memory else Bottleneck.MEMORY_BANDWIDTH


def _gpu_row(
    uuid: str,
    rows: list[int],
    cols: Mapping[str, np.ndarray[Any, Any]],
    record: GpuRecord | None,
    thresholds: BottleneckThresholds,
) -> GpuRow:
    idx = np.array(rows, dtype=np.int64)
    hours_each = cols["window_s_sum"][idx] / 3600.0
    samples = cols["samples"][idx]
    sm, tensor, dram = (
        cols["sm_active_avg"][idx],
        cols["tensor_active_avg"][idx],
        cols["dram_active_avg"][idx],
    )
    util = cols["gpu_util_avg"][idx]
    gr = cols["gr_engine_active_avg"][idx]
    profiled = ~(np.isnan(sm) & np.isnan(tensor) & np.isnan(dram))
    hours = float(hours_each.sum())
    source = _DEFAULT_SOURCE
    if record is not None:
        try:
            source = TelemetrySource(record.source)
        except ValueError:
            source = _DEFAULT_SOURCE
    # Activity per bucket: SM active (else GR engine active) where profiling exists, else GPU_UTIL.
    activity = np.where(~np.isnan(sm), sm, np.where(~np.isnan(gr), gr, util))
    known = ~np.isnan(activity)
    idle_each = known & (np.nan_to_num(activity, nan=1.0) < IDLE_BELOW)
    idle_hours = round(float(hours_each[idle_each].sum()), 4) if known.any() else None
    idle = bool(idle_each[known].all()) if known.any() else None
    reason = None
    if not profiled.any():
        reason = (
            "no DCGM profiling field ("
            + ", ".join(PROFILING_FIELDS)
            + ") reported: "
            + (
                "only GPU_UTIL, which says a kernel ran, not how hard"
                if (~np.isnan(util)).any()
                else "no activity field at all"
            )
        )
    elif not (~np.isnan(dram)).any():
        reason = "DCGM_FI_PROF_DRAM_ACTIVE not reported: memory pressure unknown"
    verdicts = [
        _bucket_bottleneck(float(a), float(b), float(c), thresholds, source)
        for a, b, c in zip(sm, tensor, dram, strict=True)
    ]
    weights: dict[Bottleneck, float] = defaultdict(float)
    for verdict, h in zip(verdicts, hours_each.tolist(), strict=True):
        if verdict is not Bottleneck.UNKNOWN:
            weights[verdict] += h
    if weights:
        bottleneck = max(weights, key=lambda b: weights[b])
        bottleneck_reason = None
    else:
        bottleneck = Bottleneck.UNKNOWN
        bottleneck_reason = reason or "no hour with both DRAM and SM or tensor activity"
    total = float(samples.sum())
    return GpuRow(
        gpu_uuid=uuid,
        node=record.node if record else None,
        gpu_name=record.gpu_name if record else None,
        sku=record.sku if record else None,
        worker_id=(record.worker_id if record else None),
        hours=round(hours, 4),
        sm_active=_weighted(sm, hours_each),
        tensor_active=_weighted(tensor, hours_each),
        dram_active=_weighted(dram, hours_each),
        gpu_util=_weighted(util, hours_each),
        mem_used_bytes_max=(
            float(np.nanmax(cols["mem_used_bytes_max"][idx]))
            if (~np.isnan(cols["mem_used_bytes_max"][idx])).any()
            else None
        ),
        profiling_share=round(float(hours_each[profiled].sum() / hours), 4) if hours > 0 else 0.0,
        activity_unknown_reason=reason,
        bottleneck=bottleneck.value,
        bottleneck_reason=bottleneck_reason,
        idle_gpu_hours=idle_hours,
        idle=idle,
        degraded_share=round(float(cols["degraded_samples"][idx].sum() / total), 4) if total else 0.0,
        lost_share=round(float(cols["lost_samples"][idx].sum() / total), 4) if total else 0.0,
        state=record.state if record else None,
    )


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def _sku_rows(gpus: Sequence[GpuRow]) -> list[SkuRow]:
    groups: dict[str, list[GpuRow]] = defaultdict(list)
    for gpu in gpus:
        groups[gpu.sku or gpu.gpu_name or "unknown"].append(gpu)
    out = []
    for sku, members in sorted(groups.items()):
        counted = [g.idle_gpu_hours for g in members if g.idle_gpu_hours is not None]
        classes: dict[str, int] = defaultdict(int)
        for g in members:
            classes[g.bottleneck] += 1
        out.append(
            SkuRow(
                sku=sku,
                gpus=len(members),
                gpu_hours=round(sum(g.hours for g in members), 4),
                sm_active=_mean(g.sm_active for g in members),
                tensor_active=_mean(g.tensor_active for g in members),
                dram_active=_mean(g.dram_active for g in members),
                gpus_without_profiling=sum(1 for g in members if g.profiling_share == 0.0),
                idle_gpus=sum(1 for g in members if g.idle),
                idle_gpu_hours=round(sum(counted), 4) if counted else None,
                idle_unknown_gpus=sum(1 for g in members if g.idle is None),
                degraded_gpus=sum(1 for g in members if g.degraded_share > 0 or g.lost_share > 0),
                bottlenecks=dict(sorted(classes.items())),
            )
        )
    return out


def build_gpu_view(
    gpu_buckets: Columns,
    gpus: Sequence[GpuRecord],
    *,
    start: str,
    end: str,
    thresholds: BottleneckThresholds | None = None,
    warnings: Sequence[str] = (),
    reason: str = NO_ENGINE_REASON,
) -> GpuView:
    """The GPU view of bucketed GPU columns over [start, end) (RFC 3339 strings); ``gpus``: the inventory's
    GPU records (their SKU, node, name), a GPU with samples but no record is still shown."""
    t = thresholds or BottleneckThresholds()
    names = ("samples", "window_s_sum", "sm_active_avg", "tensor_active_avg", "dram_active_avg",
             "gpu_util_avg", "gr_engine_active_avg", "mem_used_bytes_max", "lost_samples",
             "degraded_samples")  # fmt: skip
    cols = {name: _floats(gpu_buckets.get(name, [None] * len(gpu_buckets["ts"]))) for name in names}
    by_uuid: dict[str, list[int]] = defaultdict(list)
    for i, uuid in enumerate(gpu_buckets["gpu_uuid"]):
        by_uuid[str(uuid)].append(i)
    records = {g.gpu_uuid: g for g in gpus}
    rows = [_gpu_row(uuid, by_uuid[uuid], cols, records.get(uuid), t) for uuid in sorted(by_uuid)]
    silent = sorted(set(records) - set(by_uuid))
    skus = _sku_rows(rows)
    unprofiled = [g for g in rows if g.profiling_share == 0.0]
    notes = list(warnings)
    if silent:
        notes.append(f"{len(silent)} GPU(s) in the inventory sent no sample in the range")
    if unprofiled and not any(PROFILING_HELP in note for note in notes):
        notes.append(
            f"{len(unprofiled)} of {len(rows)} GPU(s) report no DCGM profiling field: their SM, tensor and "
            f"DRAM activity and bottleneck are unknown; {PROFILING_HELP}"
        )
    idle_known = [g.idle_gpu_hours for g in rows if g.idle_gpu_hours is not None]
    totals = GpuTotals(
        gpus=len(rows),
        gpu_hours=round(sum(g.hours for g in rows), 4),
        idle_gpus=sum(1 for g in rows if g.idle),
        idle_gpu_hours=round(sum(idle_known), 4) if idle_known else None,
        idle_unknown_gpus=sum(1 for g in rows if g.idle is None),
        gpus_without_profiling=len(unprofiled),
        degraded_gpus=sum(1 for g in rows if g.degraded_share > 0 or g.lost_share > 0),
        silent_gpus=len(silent),
        idle_below=IDLE_BELOW,
    )
    return GpuView(
        from_=start,
        to=end,
        reason=reason,
        gpus=rows,
        skus=skus,
        totals=totals,
        warnings=notes,
        profiling_help=PROFILING_HELP if unprofiled else None,
    )
