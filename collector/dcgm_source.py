"""The ``dcgm`` source: scrape an existing dcgm-exporter ``/metrics`` and map its fields to ``gpu_sample``.

Tolerant of the label drift in real fleets (telemetry.md §2.3): ``UUID``/``uuid``/``gpu_uuid``,
``modelName``/``model_name``, ``Hostname``/``hostname``, Kubernetes ``pod``/``namespace``/``container``
(and the ``-o`` names ``pod_name``/``pod_namespace``/``container_name``), sanitised pod labels (kept for
role resolution), MIG ``GPU_I_PROFILE``/``GPU_I_ID``.  Field names are matched case-insensitively, with the
1.x compatibility names and the DCGM 4.6 renames as aliases.  A field the exporter does not expose (its
default set mutes SM_ACTIVE) stays null.  "Profiling fields read 0 while GPU_UTIL > 0" is broken telemetry
(NVIDIA/dcgm-exporter#635, NVIDIA/DCGM#303): those ratios are nulled and the GPU marked degraded, never
reported as idle.  The node on records is the collector's own (a containerised exporter's ``Hostname`` is
its container id).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from collector.clock import Clock
from collector.promtext import Exposition
from collector.scrape import ScrapeError, scrape
from collector.window import (
    REASON_METRIC_MISSING,
    REASON_PROFILING_ZERO,
    REASON_SCRAPE_FAILED,
    GpuStatus,
    PodRef,
    SourceWindow,
)
from fleet.contract import GpuSample, GpuState, TelemetrySource

MIB = 1024 * 1024

# Exporter metric name (lower case) -> (contract field, unit).  Units: ratio (0-1), percent (0-100),
# ratio_or_percent (DCGM 4.6 renamed GPU_UTIL to GPU_UTIL_RATIO; the scale of its values is not documented,
# so a value above 1 is read as percent), mib (-> bytes), watts, mhz, rate (bytes/s -> bytes in the window).
ALIASES: dict[str, tuple[str, str]] = {
    "dcgm_fi_prof_sm_active": ("sm_active", "ratio"),
    "dcgm_fi_prof_sm_util_ratio": ("sm_active", "ratio"),
    "dcgm_fi_prof_pipe_tensor_active": ("tensor_active", "ratio"),
    "dcgm_fi_prof_tensor_util_ratio": ("tensor_active", "ratio"),
    "dcgm_fi_prof_pipe_tensor_util_ratio": ("tensor_active", "ratio"),
    "dcgm_fi_prof_dram_active": ("dram_active", "ratio"),
    "dcgm_fi_prof_dram_util_ratio": ("dram_active", "ratio"),
    "dcgm_fi_dev_gpu_util": ("gpu_util", "percent"),
    "dcgm_gpu_utilization": ("gpu_util", "percent"),
    "dcgm_fi_dev_gpu_util_ratio": ("gpu_util", "ratio_or_percent"),
    "dcgm_fi_dev_fb_used": ("mem_used_bytes", "mib"),
    "dcgm_fb_used": ("mem_used_bytes", "mib"),
    "dcgm_fi_dev_power_usage": ("power_w", "watts"),
    "dcgm_power_usage": ("power_w", "watts"),
    "dcgm_fi_dev_sm_clock": ("sm_clock_mhz", "mhz"),
    "dcgm_sm_clock": ("sm_clock_mhz", "mhz"),
    "dcgm_fi_prof_pcie_tx_bytes": ("pcie_tx_bytes", "rate"),
    "dcgm_fi_prof_pcie_rx_bytes": ("pcie_rx_bytes", "rate"),
    "dcgm_fi_prof_nvlink_tx_bytes": ("nvlink_tx_bytes", "rate"),
    "dcgm_fi_prof_nvlink_rx_bytes": ("nvlink_rx_bytes", "rate"),
}
_GR_ENGINE = ("dcgm_fi_prof_gr_engine_active", "dcgm_fi_prof_gr_engine_util_ratio")
PROFILING_FIELDS = ("sm_active", "tensor_active", "dram_active")

# Labels dcgm-exporter sets itself; any other label on a GPU series is a (sanitised) pod label or a CSV label.
_OWN_LABELS = frozenset(
    {
        "gpu", "uuid", "gpu_uuid", "pci_bus_id", "device", "modelname", "model_name", "hostname",
        "gpu_i_profile", "gpu_i_id", "dcgm_fi_driver_version", "container", "namespace", "pod", "pod_name",
        "pod_namespace", "container_name", "pod_uid", "err_code", "err_msg", "hpc_job", "dra_claim_name",
        "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name", "dra_mig_profile",
        "dra_mig_device_uuid", "nvlink", "nvswitch", "cpu", "cpucore",
    }
)  # fmt: skip


def _label(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return str(value)
    return None


@dataclass
class _Gpu:
    uuid: str
    index: int
    name: str
    parent_uuid: str | None = None
    mig_profile: str | None = None
    values: dict[str, tuple[str, float]] = field(default_factory=dict)  # field -> (unit, raw value)
    gr_engine: float | None = None
    pod: PodRef | None = None
    pod_labels: dict[str, str] = field(default_factory=dict)


def _gpu_key(labels: Mapping[str, str]) -> _Gpu | None:
    uuid = _label(labels, "UUID", "uuid", "gpu_uuid")
    if uuid is None:
        return None
    index_text = _label(labels, "gpu") or "0"
    name = _label(labels, "modelName", "model_name") or "unknown"
    gi_id = _label(labels, "GPU_I_ID")
    if gi_id is None:
        return _Gpu(uuid=uuid, index=int(index_text) if index_text.isdigit() else 0, name=name)
    profile = _label(labels, "GPU_I_PROFILE", "dra_mig_profile")
    mig_uuid = _label(labels, "dra_mig_device_uuid") or f"{uuid}/{gi_id}"
    return _Gpu(
        uuid=mig_uuid,
        index=int(index_text) if index_text.isdigit() else 0,
        name=f"{name} MIG {profile}" if profile and "MIG" not in name else name,
        parent_uuid=uuid,
        mig_profile=profile,
    )


_UNSEEN = _Gpu(uuid="", index=0, name="")


def _gpu_of(labels: Mapping[str, str], gpus: dict[str, _Gpu]) -> _Gpu | None:
    """The GPU a series belongs to (created on first sight), with its pod and pod labels."""
    key = _gpu_key(labels)
    if key is None:
        return None
    gpu = gpus.setdefault(key.uuid, key)
    if gpu.pod is None:
        pod = _label(labels, "pod", "pod_name")
        namespace = _label(labels, "namespace", "pod_namespace")
        if pod and namespace:
            gpu.pod = PodRef(namespace, pod, _label(labels, "container", "container_name"))
    for label, value in labels.items():
        if label.lower() not in _OWN_LABELS and not label.startswith("DCGM_") and value:
            gpu.pod_labels[label] = value
    return gpu


def _convert(unit: str, value: float, window_s: float) -> float | int | None:
    if not math.isfinite(value) or value < 0:
        return None
    if unit == "ratio":
        return min(value, 1.0)  # older DCGM reported SM_ACTIVE > 1 on MIG devices (NVIDIA/DCGM#152)
    if unit == "percent" or (unit == "ratio_or_percent" and value > 1.0):
        return min(value / 100.0, 1.0)
    if unit == "mib":
        return round(value * MIB)
    if unit == "rate":
        return round(value * window_s)
    return value


def dcgm_window(exposition: Exposition, node: str, ts: datetime, window_s: float) -> SourceWindow:
    """Pure mapping of one scrape to records and per-GPU status (no I/O)."""
    gpus: dict[str, _Gpu] = {}
    by_labels: dict[int, _Gpu | None] = {}  # the parser shares one label mapping across a GPU's series
    for sample in exposition.samples:
        lower = sample.name.lower()
        alias = ALIASES.get(lower)
        if alias is None and lower not in _GR_ENGINE:
            continue
        labels = sample.labels
        gpu = by_labels.get(id(labels), _UNSEEN)
        if gpu is _UNSEEN:
            gpu = _gpu_of(labels, gpus)
            by_labels[id(labels)] = gpu
        if gpu is None:
            continue
        if alias is not None:
            gpu.values[alias[0]] = (alias[1], sample.value)
        else:
            gpu.gr_engine = sample.value
    window = SourceWindow()
    for gpu in gpus.values():
        sample_fields: dict[str, Any] = {}
        for field_name, (unit, raw) in gpu.values.items():
            sample_fields[field_name] = _convert(unit, raw, window_s)
        reasons: set[str] = set()
        util = sample_fields.get("gpu_util")
        profiling = [sample_fields.get(f) for f in PROFILING_FIELDS if f in sample_fields]
        if gpu.gr_engine is not None:
            profiling.append(gpu.gr_engine)
        if util is not None and util > 0 and profiling and all(v == 0 for v in profiling):
            reasons.add(REASON_PROFILING_ZERO)
            for name in PROFILING_FIELDS:
                sample_fields[name] = None
        degraded = (
            bool(reasons)
            or sample_fields.get("tensor_active") is None
            or (sample_fields.get("dram_active") is None)
        )
        record = GpuSample(
            ts=ts,
            window_s=window_s,
            node=node,
            gpu_uuid=gpu.uuid,
            gpu_index=gpu.index,
            gpu_name=gpu.name,
            parent_gpu_uuid=gpu.parent_uuid,
            mig_profile=gpu.mig_profile,
            state=GpuState.DEGRADED if degraded else GpuState.OK,
            source=TelemetrySource.DCGM,
            **{k: v for k, v in sample_fields.items() if v is not None},
        )
        if degraded and not reasons:
            reasons.add(REASON_METRIC_MISSING)
        window.gpu_samples.append(record)
        window.gpu_status[gpu.uuid] = GpuStatus(
            gpu.uuid,
            frozenset(reasons),
            ("DCGM profiling fields read 0 while GPU_UTIL > 0: telemetry broken, not idle",)
            if REASON_PROFILING_ZERO in reasons
            else (),
            pod=gpu.pod,
            pod_labels=dict(gpu.pod_labels),
        )
    return window


class DcgmSource:
    name = "dcgm"

    def __init__(
        self,
        url: str,
        node: str,
        client: httpx.Client,
        clock: Clock,
        *,
        timeout_s: float = 3.0,
        default_window_s: float = 10.0,
    ) -> None:
        self.url = url
        self.node = node
        self.client = client
        self.clock = clock
        self.timeout_s = timeout_s
        self.default_window_s = default_window_s
        self._last: float | None = None
        self._known: set[str] = set()

    def start(self) -> None:
        self._last = self.clock.monotonic()

    def collect(self) -> SourceWindow:
        now = self.clock.monotonic()
        window_s = now - self._last if self._last is not None else self.default_window_s
        self._last = now
        try:
            exposition = scrape(self.client, self.url, self.timeout_s)
        except ScrapeError as exc:
            window = SourceWindow()
            window.errors["dcgm_scrape"] += 1
            for uuid in self._known:
                window.gpu_status[uuid] = GpuStatus(uuid, frozenset({REASON_SCRAPE_FAILED}), (str(exc),))
            return window
        window = dcgm_window(exposition, self.node, self.clock.now(), max(window_s, 1e-3))
        self._known = {s.gpu_uuid for s in window.gpu_samples}
        return window

    def close(self) -> None:
        return None
