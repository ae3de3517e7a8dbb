"""The ``dcgm`` source: scrape an existing dcgm-exporter ``/metrics`` and map its fields to ``gpu_sample``.

Tolerant of the label drift in real fleets (telemetry.md §2.3): ``UUID``/``uuid``/``gpu_uuid``,
``modelName``/``model_name``, ``Hostname``/``hostname``, Kubernetes ``pod``/``namespace``/``container``
(and the ``-o`` names ``pod_name``/``pod_namespace``/``container_name``), sanitised pod labels (kept for
role resolution).  Field names are matched case-insensitively, with the 1.x compatibility names and the
DCGM 4.6 renames as aliases.  A field the exporter does not expose (its default set mutes SM_ACTIVE) stays
null.  "Profiling fields read 0 while GPU_UTIL > 0" is broken telemetry (NVIDIA/dcgm-exporter#635,
NVIDIA/DCGM#303): those ratios are nulled and the GPU marked degraded, never reported as idle.  The node on
records is the collector's own (a containerised exporter's ``Hostname`` is its container id).

Activity evidence: ``profiling`` when SM, tensor or DRAM activity is exposed; ``utilisation`` when only the
busy-time counters are (``GPU_UTIL``, ``MEM_COPY_UTIL``, ``GR_ENGINE_ACTIVE``: dcgm-exporter's shipped
``etc/default-counters.csv`` selects no profiling field); none when neither is.

MIG: dcgm-exporter renders a MIG instance's series with the parent's ``UUID`` and ``GPU_I_PROFILE`` /
``GPU_I_ID`` (``gpu="0",UUID="GPU-…",pci_bus_id=…,device=…,modelName=…,GPU_I_PROFILE="1g.10gb",``
``GPU_I_ID="1"``: NVIDIA/dcgm-exporter ``internal/pkg/rendermetrics/render_metrics.go``).  Each instance is a
GPU record of its own, keyed ``<parent UUID>/<GPU_I_ID>`` unless a MIG device UUID label is present (DRA's
``dra_mig_device_uuid``), with ``parent_gpu_uuid`` and ``mig_profile``.  Series of the parent itself (no
``GPU_I_ID``: power, temperatures, Xid) never become a whole-GPU record when the parent has instances.

Lost GPUs: ``DCGM_FI_DEV_XID_ERRORS`` is the value of the last Xid; 79 ("GPU has fallen off the bus")
marks the GPU, and a MIG parent's instances, ``state=lost``.  The exporter does not reset that value after
the GPU recovers (NVIDIA/dcgm-exporter#500), so when the exporter also exposes its windowed
``DCGM_EXP_XID_ERRORS_COUNT{xid}`` (NVIDIA/dcgm-exporter#239), that count decides instead: no Xid 79 in
the window, not lost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from collector.failures import REASON_NO_GPU_SERIES, STAGE_DCGM, Failure
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
from fleet.clock import Clock
from fleet.contract import ActivityEvidence, GpuSample, GpuState, TelemetrySource
from fleet.vocabulary.dcgm import (
    DCGM_FIELDS,
    DCGM_NAME_PATTERN,
    GPU_INDEX_LABEL,
    MIG_DEVICE_UUID_LABEL,
    MIG_INSTANCE_LABEL,
    MIG_PROFILE_LABELS,
    MODEL_NAME_LABELS,
    POD_LABEL_SETS,
    PROFILING_FIELDS,
    STUCK_CHECK_FIELDS,
    UUID_LABELS,
    XID_COUNT_NAME,
    XID_GPU_FALLEN_OFF_BUS,
    XID_LABEL,
    dcgm_field,
    mig_gpu_name,
    mig_key,
)

MIB = 1024 * 1024

# Exporter metric name (lower case) -> (contract field, unit), from the vocabulary zero-agent mode reads too.
# Units: ratio (0-1), percent (0-100), ratio_or_percent (a value above 1 is a percent), mib (-> bytes), watts,
# mhz, rate (bytes/s -> bytes in the window).
ALIASES: dict[str, tuple[str, str]] = {
    name.lower(): (spec.field, unit.value)
    for spec in DCGM_FIELDS
    if spec.field != "xid"
    for name, unit in spec.names
}
UTILISATION_FIELDS = ("gpu_util", "mem_copy_util", "gr_engine_active")
XID_LAST = frozenset(name.lower() for name, _ in dcgm_field("xid").names)
XID_COUNT = XID_COUNT_NAME.lower()  # Xid errors within the exporter's window, label ``xid``
XID_GPU_LOST = XID_GPU_FALLEN_OFF_BUS  # "GPU has fallen off the bus": lost until reset
_DCGM_NAME = re.compile(DCGM_NAME_PATTERN.pattern.lower())

# Labels dcgm-exporter sets itself; any other label on a GPU series is a (sanitised) pod label or a CSV label.
_OWN_LABELS = frozenset(
    {
        "gpu", "uuid", "gpu_uuid", "pci_bus_id", "device", "modelname", "model_name", "hostname",
        "gpu_i_profile", "gpu_i_id", "dcgm_fi_driver_version", "container", "namespace", "pod", "pod_name",
        "pod_namespace", "container_name", "pod_uid", "err_code", "err_msg", "hpc_job", "dra_claim_name",
        "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name", "dra_mig_profile",
        "dra_mig_device_uuid", "nvlink", "nvswitch", "cpu", "cpucore", XID_LABEL, "window_size_in_ms",
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
    last_xid: float | None = None
    xid_counts: dict[str, float] | None = None  # xid -> errors in the exporter's window
    pod: PodRef | None = None
    pod_labels: dict[str, str] = field(default_factory=dict)


def _gpu_key(labels: Mapping[str, str]) -> _Gpu | None:
    uuid = _label(labels, *UUID_LABELS)
    if uuid is None:
        return None
    index_text = _label(labels, GPU_INDEX_LABEL) or "0"
    index = int(index_text) if index_text.isdigit() else 0
    name = _label(labels, *MODEL_NAME_LABELS) or "unknown"
    gi_id = _label(labels, MIG_INSTANCE_LABEL)
    if gi_id is None:
        return _Gpu(uuid=uuid, index=index, name=name)
    profile = _label(labels, *MIG_PROFILE_LABELS)
    return _Gpu(
        uuid=_label(labels, MIG_DEVICE_UUID_LABEL) or mig_key(uuid, gi_id),
        index=index,
        name=mig_gpu_name(name, profile),
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
    for pod_label, namespace_label, container_label in POD_LABEL_SETS if gpu.pod is None else ():
        pod, namespace = labels.get(pod_label), labels.get(namespace_label)
        if pod and namespace:
            gpu.pod = PodRef(namespace, pod, labels.get(container_label) or None)
            break
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


def _is_lost(gpu: _Gpu, windowed: bool) -> bool:
    """Xid 79 in the exporter's Xid window when it counts one (a GPU without a series there had none),
    else in the last-Xid field."""
    if windowed:
        return (gpu.xid_counts or {}).get(str(XID_GPU_LOST), 0.0) > 0
    return gpu.last_xid is not None and round(gpu.last_xid) == XID_GPU_LOST


def _counts_xids(exposition: Exposition) -> bool:
    if any(name.lower() == XID_COUNT for name in exposition.types):
        return True
    return any(sample.name.lower() == XID_COUNT for sample in exposition.samples)


def _read_samples(exposition: Exposition) -> dict[str, _Gpu]:
    gpus: dict[str, _Gpu] = {}
    by_labels: dict[int, _Gpu | None] = {}  # the parser shares one label mapping across a GPU's series
    for sample in exposition.samples:
        lower = sample.name.lower()
        alias = ALIASES.get(lower)
        if alias is None and lower not in XID_LAST and lower != XID_COUNT and not _DCGM_NAME.match(lower):
            continue  # not a dcgm-exporter series (its own go_* metrics, ...)
        labels = sample.labels
        gpu = by_labels.get(id(labels), _UNSEEN)
        if gpu is _UNSEEN:
            gpu = _gpu_of(labels, gpus)
            by_labels[id(labels)] = gpu
        if gpu is None:
            continue
        if alias is not None:
            gpu.values[alias[0]] = (alias[1], sample.value)
        elif lower not in XID_LAST and lower != XID_COUNT:
            continue  # a field we do not read (clocks, temperatures): the GPU is still a GPU
        elif lower == XID_COUNT:
            counts = gpu.xid_counts if gpu.xid_counts is not None else {}
            xid = labels.get(XID_LABEL)
            if xid and math.isfinite(sample.value):
                counts[xid] = counts.get(xid, 0.0) + sample.value
            gpu.xid_counts = counts
        elif math.isfinite(sample.value):
            gpu.last_xid = sample.value
    return gpus


def _evidence(fields: Mapping[str, Any]) -> ActivityEvidence | None:
    if any(fields.get(name) is not None for name in PROFILING_FIELDS):
        return ActivityEvidence.PROFILING
    if any(fields.get(name) is not None for name in UTILISATION_FIELDS):
        return ActivityEvidence.UTILISATION
    return None


def dcgm_window(exposition: Exposition, node: str, ts: datetime, window_s: float) -> SourceWindow:
    """Pure mapping of one scrape to records and per-GPU status (no I/O)."""
    gpus = _read_samples(exposition)
    windowed = _counts_xids(exposition)
    mig_parents = {gpu.parent_uuid for gpu in gpus.values() if gpu.parent_uuid is not None}
    lost_parents = {uuid for uuid in mig_parents if uuid in gpus and _is_lost(gpus[uuid], windowed)}
    window = SourceWindow()
    for gpu in gpus.values():
        if gpu.uuid in mig_parents:
            continue  # the parent of MIG instances: its instances are the GPUs, never the parent as well
        base: dict[str, Any] = {
            "ts": ts,
            "window_s": window_s,
            "node": node,
            "gpu_uuid": gpu.uuid,
            "gpu_index": gpu.index,
            "gpu_name": gpu.name,
            "parent_gpu_uuid": gpu.parent_uuid,
            "mig_profile": gpu.mig_profile,
            "source": TelemetrySource.DCGM,
        }
        if _is_lost(gpu, windowed) or gpu.parent_uuid in lost_parents:
            window.gpu_samples.append(GpuSample(**base, state=GpuState.LOST))
            why = f"Xid {XID_GPU_LOST} (GPU has fallen off the bus) on {gpu.parent_uuid or gpu.uuid}"
            window.gpu_status[gpu.uuid] = GpuStatus(
                gpu.uuid, frozenset(), (why,), pod=gpu.pod, pod_labels=dict(gpu.pod_labels)
            )
            continue
        sample_fields: dict[str, Any] = {}
        for field_name, (unit, raw) in gpu.values.items():
            sample_fields[field_name] = _convert(unit, raw, window_s)
        reasons: set[str] = set()
        util = sample_fields.get("gpu_util")
        profiling = [sample_fields.get(f) for f in STUCK_CHECK_FIELDS if f in sample_fields]
        if util is not None and util > 0 and profiling and all(v == 0 for v in profiling):
            reasons.add(REASON_PROFILING_ZERO)
            for name in STUCK_CHECK_FIELDS:
                sample_fields[name] = None
        degraded = (
            bool(reasons)
            or sample_fields.get("tensor_active") is None
            or (sample_fields.get("dram_active") is None)
        )
        record = GpuSample(
            **base,
            state=GpuState.DEGRADED if degraded else GpuState.OK,
            activity_evidence=_evidence(sample_fields),
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
            window.failures.append(Failure(STAGE_DCGM, self.url, exc.reason, exc.detail, exc.status))
            for uuid in self._known:
                window.gpu_status[uuid] = GpuStatus(uuid, frozenset({REASON_SCRAPE_FAILED}), (str(exc),))
            return window
        window = dcgm_window(exposition, self.node, self.clock.now(), max(window_s, 1e-3))
        if window.gpu_samples:
            window.reached.append((STAGE_DCGM, self.url))
        else:
            detail = f"answered with {len(exposition.samples)} samples and no per-GPU DCGM field we read"
            window.failures.append(Failure(STAGE_DCGM, self.url, REASON_NO_GPU_SERIES, detail, 200))
        self._known = {s.gpu_uuid for s in window.gpu_samples}
        return window

    def close(self) -> None:
        return None
