"""The ``nvml`` source: inventory and per-window GPU readings through pynvml, GPM first.

Per window and GPU: GPM metrics (Hopper and newer) from two sample buffers swapped each tick, after
``nvmlGpmQueryDeviceSupport`` said yes, honouring each metric's own return code; else
``nvmlDeviceGetUtilizationRates`` marked ``source=nvml-basic`` ("a kernel was running" is not compute
pressure, so the ratios stay null); memory used, power, SM clock; the host PIDs of compute processes.
Busy-time counters beside them: GPM graphics utilisation -> ``gr_engine_active`` (per MIG slice too) and
``nvmlDeviceGetUtilizationRates().memory`` -> ``mem_copy_util`` (whole GPUs only: NVML does not support it
on MIG).  ``activity_evidence`` is ``profiling`` when GPM measured SM, tensor or DRAM activity,
``utilisation`` when only busy-time counters were read, none when neither.

Failures stay local (reliability.md §3): GPU_IS_LOST / RESET_REQUIRED mark that GPU lost and it is only
re-probed slowly; NOT_SUPPORTED (and FUNCTION_NOT_FOUND, version mismatches) is cached per (GPU, call)
and re-probed every ``reprobe_s``; NO_PERMISSION names the missing capability once; a call that does not
return within its deadline marks the GPU's window incomplete (state degraded, reason call_timeout).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collector import nvml_api as nv
from collector.call_guard import Call, CallGuard, CallTimeoutError, DriverUnresponsiveError
from collector.failures import REASON_NO_GPUS, STAGE_NVML, Failure
from collector.window import (
    REASON_CALL_TIMEOUT,
    REASON_DRIVER_UNRESPONSIVE,
    REASON_GPM_UNSUPPORTED,
    REASON_METRIC_MISSING,
    REASON_NO_PERMISSION,
    REASON_NVML_ERROR,
    GpuStatus,
    SourceWindow,
)
from fleet.clock import Clock
from fleet.contract import ActivityEvidence, GpuSample, GpuState, TelemetrySource

log = logging.getLogger(__name__)

GPM_METRICS = (
    nv.GPM_GRAPHICS_UTIL,
    nv.GPM_SM_UTIL,
    nv.GPM_ANY_TENSOR_UTIL,
    nv.GPM_DRAM_BW_UTIL,
    nv.GPM_PCIE_TX_PER_SEC,
    nv.GPM_PCIE_RX_PER_SEC,
    nv.GPM_NVLINK_TOTAL_TX_PER_SEC,
    nv.GPM_NVLINK_TOTAL_RX_PER_SEC,
)
MIB = 1024 * 1024

# What a NO_PERMISSION on each call means for the operator.
CAPABILITIES: dict[str, str] = {
    "nvmlDeviceGetComputeRunningProcesses": "listing the GPU's compute processes (run as root, or with "
    "hostPID and CAP_SYS_ADMIN; in MIG mode only per-instance handles work): its worker stays unattributed",
    "nvmlGpmSampleGet": "GPM profiling counters (run as root, or load the driver with "
    "NVreg_RestrictProfilingToAdminUsers=0): falling back to utilization rates",
    "nvmlGpmMigSampleGet": "GPM profiling counters of MIG instances (run as root, or load the driver with "
    "NVreg_RestrictProfilingToAdminUsers=0)",
    "nvmlGpmQueryDeviceSupport": "querying GPM support (run as root)",
    "nvmlDeviceGetPowerUsage": "reading power draw",
    "nvmlDeviceGetMemoryInfo": "reading memory use (MIG parent handles need privileges)",
    "nvmlDeviceGetUtilizationRates": "reading utilization rates",
    "nvmlDeviceGetClockInfo": "reading clocks",
}


# Degradation reasons that are collector failures (counted, exported with the GPU as target), not limits.
_FAILURE_REASONS = (REASON_DRIVER_UNRESPONSIVE, REASON_CALL_TIMEOUT, REASON_NVML_ERROR)
_UNREAD_REASONS = frozenset({REASON_DRIVER_UNRESPONSIVE, REASON_CALL_TIMEOUT})  # the GPU's window is empty


class NvmlStartError(RuntimeError):
    """NVML cannot be used on this host; the message names the cause."""


@dataclass(frozen=True)
class GpuInventory:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_bytes: int | None
    mig_enabled: bool
    architecture: int | None = None
    parent_uuid: str | None = None  # set on MIG instances
    mig_profile: str | None = None
    gpu_instance_id: int | None = None


@dataclass(frozen=True)
class NvmlInventory:
    driver_version: str
    gpus: tuple[GpuInventory, ...]


@dataclass
class _Gpu:
    inv: GpuInventory
    handle: Any
    parent_handle: Any = None
    gpm: bool = False
    gpm_samples: list[Any] = field(default_factory=list)
    gpm_primed: bool = False
    metrics_get: Any = None
    lost: bool = False
    lost_probe_at: float = -math.inf
    unsupported: dict[str, float] = field(default_factory=dict)  # call -> when found unsupported
    denied: dict[str, float] = field(default_factory=dict)  # call -> when NO_PERMISSION was seen
    last_end: float = 0.0


@dataclass
class _Reading:
    gpm: dict[int, float] = field(default_factory=dict)
    util_gpu: float | None = None
    util_mem: float | None = None
    mem_used: int | None = None
    power_w: float | None = None
    sm_clock: float | None = None
    pids: tuple[int, ...] = ()
    reasons: set[str] = field(default_factory=set)
    details: list[str] = field(default_factory=list)
    lost: bool = False


class _GpuLostError(Exception):
    pass


def normalise_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:53:00.0`` -> ``0000:53:00.0`` (the sysfs / Kubernetes form), lower case."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3 and len(parts[0]) == 8:
        parts[0] = parts[0][4:]
    return ":".join(parts)


def mig_profile_of(name: str) -> str | None:
    match = re.search(r"\bMIG\s+(\S+)\s*$", name)
    return match.group(1) if match else None


class NvmlSource:
    name = "nvml"

    def __init__(
        self,
        api: nv.NvmlApi,
        node: str,
        clock: Clock,
        *,
        call_timeout_s: float = 2.0,
        reprobe_s: float = 600.0,
        lost_reprobe_s: float = 30.0,
    ) -> None:
        self.api = api
        self.node = node
        self.clock = clock
        self.guard = CallGuard(call_timeout_s, max_stuck=2)
        self.reprobe_s = reprobe_s
        self.lost_reprobe_s = lost_reprobe_s
        self.inventory: NvmlInventory | None = None
        self._gpus: list[_Gpu] = []
        self._told: set[tuple[str, str]] = set()
        self._started = False

    # --- start / stop ------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.guard.run(lambda call: call(self.api.nvmlInit))
        except CallTimeoutError as exc:
            raise NvmlStartError(f"cannot start NVML: {exc} (driver hung?)") from exc
        except Exception as exc:
            code = nv.error_code(exc)
            cause = nv.INIT_FAILURE_CAUSES.get(code or -1, f"{exc} (NVML error code {code})")
            raise NvmlStartError(f"cannot start NVML: {cause}") from exc
        self._started = True
        try:
            self.inventory = self.guard.run(self._take_inventory)
        except CallTimeoutError as exc:
            raise NvmlStartError(f"cannot read the GPU inventory: {exc}") from exc
        except Exception as exc:
            raise NvmlStartError(f"cannot read the GPU inventory: {exc}") from exc
        self._run_all(self._setup_gpm)

    def close(self) -> None:
        if not self._started:
            return
        self._started = False
        samples = [sample for gpu in self._gpus for sample in gpu.gpm_samples]

        def release(call: Call) -> None:
            for sample in samples:
                call(self.api.nvmlGpmSampleFree, sample)
            call(self.api.nvmlShutdown)

        try:
            self.guard.run(release)
        except Exception as exc:
            log.warning("NVML shutdown failed: %s", exc)
        self.guard.close()

    def _take_inventory(self, call: Call) -> NvmlInventory:
        api = self.api
        driver = str(call(api.nvmlSystemGetDriverVersion))
        now = self.clock.monotonic()
        found: list[GpuInventory] = []
        for index in range(int(call(api.nvmlDeviceGetCount))):
            try:
                handle = call(api.nvmlDeviceGetHandleByIndex, index)
                parent = self._describe(call, index, handle)
            except Exception as exc:
                if isinstance(exc, CallTimeoutError):
                    raise
                log.error("GPU %d is not accessible at start (%s); it is skipped", index, exc)
                continue
            instances = self._mig_instances(call, index, handle, parent) if parent.mig_enabled else []
            if instances:
                found.extend(gpu.inv for gpu in instances)
                self._gpus.extend(instances)
            else:
                found.append(parent)
                self._gpus.append(_Gpu(parent, handle, last_end=now))
        return NvmlInventory(driver, tuple(found))

    def _describe(self, call: Call, index: int, handle: Any) -> GpuInventory:
        api = self.api
        name = str(call(api.nvmlDeviceGetName, handle))
        uuid = str(call(api.nvmlDeviceGetUUID, handle))
        bus_id = normalise_bus_id(str(call(api.nvmlDeviceGetPciInfo, handle).busId))
        total = self._optional(call, api.nvmlDeviceGetMemoryInfo, handle)
        arch = self._optional(call, api.nvmlDeviceGetArchitecture, handle)
        mig = self._optional(call, api.nvmlDeviceGetMigMode, handle)
        return GpuInventory(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=bus_id,
            memory_total_bytes=int(total.total) if total is not None else None,
            mig_enabled=bool(mig) and mig[0] == nv.NVML_DEVICE_MIG_ENABLE,
            architecture=int(arch) if arch is not None else None,
        )

    def _mig_instances(self, call: Call, index: int, handle: Any, parent: GpuInventory) -> list[_Gpu]:
        api = self.api
        out: list[_Gpu] = []
        for slot in range(int(call(api.nvmlDeviceGetMaxMigDeviceCount, handle))):
            try:
                mig = call(api.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            except Exception as exc:
                if nv.error_code(exc) == nv.NVML_ERROR_NOT_FOUND:
                    continue  # an unpopulated slot
                raise
            name = str(call(api.nvmlDeviceGetName, mig))
            memory = self._optional(call, api.nvmlDeviceGetMemoryInfo, mig)
            inv = GpuInventory(
                index=index,
                uuid=str(call(api.nvmlDeviceGetUUID, mig)),
                name=name,
                pci_bus_id=parent.pci_bus_id,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                mig_enabled=True,
                architecture=parent.architecture,
                parent_uuid=parent.uuid,
                mig_profile=mig_profile_of(name),
                gpu_instance_id=int(call(api.nvmlDeviceGetGpuInstanceId, mig)),
            )
            out.append(_Gpu(inv, mig, parent_handle=handle, last_end=self.clock.monotonic()))
        return out

    @staticmethod
    def _optional(call: Call, fn: Callable[..., Any], *args: Any) -> Any:
        """For inventory: the value, or None when the device does not support the call."""
        try:
            return call(fn, *args)
        except Exception as exc:
            code = nv.error_code(exc)
            if code in nv.UNSUPPORTED_CODES or code == nv.NVML_ERROR_NO_PERMISSION:
                return None
            raise

    def _setup_gpm(self, gpu: _Gpu, call: Call, reading: _Reading) -> None:
        api = self.api
        device = gpu.parent_handle or gpu.handle
        support = self._field(gpu, call, reading, api.nvmlGpmQueryDeviceSupport, device)
        if support is None or not support.isSupportedDevice:
            gpu.gpm = False
            return
        if not gpu.gpm_samples:
            gpu.gpm_samples = [call(api.nvmlGpmSampleAlloc), call(api.nvmlGpmSampleAlloc)]
            gpu.metrics_get = api.c_nvmlGpmMetricsGet_t()
        gpu.gpm = True
        gpu.gpm_primed = False
        self._read_gpm(gpu, call, reading)  # takes the first sample

    # --- per window --------------------------------------------------------------------------------
    def collect(self) -> SourceWindow:
        readings = self._run_all(self._read)
        window = SourceWindow()
        failed: list[Failure] = []
        for gpu in self._gpus:
            reading = readings[gpu.inv.uuid]
            sample, status = self._to_record(gpu, reading)
            window.gpu_samples.append(sample)
            window.gpu_status[sample.gpu_uuid] = status
            faults = [r for r in _FAILURE_REASONS if r in reading.reasons]
            if faults:
                detail = "; ".join(dict.fromkeys(reading.details)) or faults[0]
                failed.append(Failure(STAGE_NVML, gpu.inv.uuid, faults[0], detail, partial=True))
            else:
                window.reached.append((STAGE_NVML, gpu.inv.uuid))
        window.failures.extend(failed)
        if not self._gpus:
            window.failures.append(
                Failure(STAGE_NVML, "nvml", REASON_NO_GPUS, "NVML lists no GPU on this node")
            )
        elif sum(f.reason in _UNREAD_REASONS for f in failed) == len(self._gpus):
            detail = f"no GPU could be read this window ({failed[0].detail})"
            window.failures.append(Failure(STAGE_NVML, "nvml", failed[0].reason, detail))
        else:
            window.reached.append((STAGE_NVML, "nvml"))
        return window

    def _run_all(self, work: Callable[[_Gpu, Call, _Reading], None]) -> dict[str, _Reading]:
        """``work`` for every GPU in one job on the NVML worker (one thread hand-off per window).  When a
        call hangs, that GPU's reading is marked and the GPUs after it continue on a fresh worker."""
        readings: dict[str, _Reading] = {}
        pending = list(self._gpus)
        while pending:
            position = [0]
            batch = pending

            def job(call: Call, batch: list[_Gpu] = batch, position: list[int] = position) -> None:
                for i, gpu in enumerate(batch):
                    position[0] = i
                    reading = _Reading()
                    try:
                        work(gpu, call, reading)
                    except _GpuLostError:
                        reading.lost = True
                    except Exception as exc:
                        reading.reasons.add(REASON_NVML_ERROR)
                        reading.details.append(f"{type(exc).__name__}: {exc}")
                        log.warning("GPU %s: unexpected error while collecting: %s", gpu.inv.uuid, exc)
                    readings[gpu.inv.uuid] = reading

            try:
                self.guard.run(job)
                pending = []
            except CallTimeoutError as exc:
                hung = batch[position[0]]
                reading = _Reading(reasons={REASON_CALL_TIMEOUT}, details=[str(exc)])
                hung.gpm_primed = False  # its sample buffers are in an unknown state: take a fresh first one
                self._tell(hung, "timeout", f"GPU {hung.inv.uuid}: {exc}; its window is incomplete")
                readings[hung.inv.uuid] = reading
                pending = batch[position[0] + 1 :]
            except DriverUnresponsiveError as exc:
                for gpu in batch:
                    if gpu.inv.uuid not in readings:
                        unpolled = _Reading(reasons={REASON_DRIVER_UNRESPONSIVE}, details=[str(exc)])
                        readings[gpu.inv.uuid] = unpolled
                        gpu.gpm_primed = False
                pending = []
        return readings

    def _read(self, gpu: _Gpu, call: Call, reading: _Reading) -> None:
        api = self.api
        if gpu.lost:
            now = self.clock.monotonic()
            if now - gpu.lost_probe_at < self.lost_reprobe_s:
                reading.lost = True
                return
            gpu.lost_probe_at = now
            # raises _GpuLostError while it is still lost
            self._field(gpu, call, reading, api.nvmlDeviceGetUUID, gpu.handle)
            log.warning("GPU %s answers again after being lost", gpu.inv.uuid)
            gpu.lost = False
            self._setup_gpm(gpu, call, reading)
            return
        for name in gpu.denied:  # a capability found missing stays reported until it is re-probed
            reading.reasons.add(REASON_NO_PERMISSION)
            reading.details.append(self._capability(name))
        if gpu.gpm:
            self._read_gpm(gpu, call, reading)
        elif not gpu.inv.mig_enabled:
            reading.reasons.add(REASON_GPM_UNSUPPORTED)
        if not gpu.inv.mig_enabled:  # "not currently supported" on MIG GPUs: do not even ask
            util = self._field(gpu, call, reading, api.nvmlDeviceGetUtilizationRates, gpu.handle)
            reading.util_gpu = util.gpu / 100.0 if util is not None else None
            reading.util_mem = util.memory / 100.0 if util is not None else None
            power = self._field(gpu, call, reading, api.nvmlDeviceGetPowerUsage, gpu.handle)
            reading.power_w = power / 1000.0 if power is not None else None
            clock = self._field(gpu, call, reading, api.nvmlDeviceGetClockInfo, gpu.handle, nv.NVML_CLOCK_SM)
            reading.sm_clock = float(clock) if clock is not None else None
        memory = self._field(gpu, call, reading, api.nvmlDeviceGetMemoryInfo, gpu.handle)
        reading.mem_used = int(memory.used) if memory is not None else None
        procs = self._field(gpu, call, reading, api.nvmlDeviceGetComputeRunningProcesses, gpu.handle)
        reading.pids = tuple(int(p.pid) for p in procs) if procs is not None else ()

    def _read_gpm(self, gpu: _Gpu, call: Call, reading: _Reading) -> None:
        api = self.api
        previous, current = gpu.gpm_samples
        if gpu.inv.gpu_instance_id is not None:
            fn: Callable[..., Any] = api.nvmlGpmMigSampleGet
            args: tuple[Any, ...] = (gpu.parent_handle, gpu.inv.gpu_instance_id, current)
        else:
            fn, args = api.nvmlGpmSampleGet, (gpu.handle, current)
        if self._field(gpu, call, reading, fn, *args) is None:
            if fn.__name__ in gpu.unsupported or fn.__name__ in gpu.denied:
                gpu.gpm = False  # fall back for good (re-probed with the other capabilities)
                reading.reasons.add(REASON_GPM_UNSUPPORTED)
            gpu.gpm_primed = False
            return
        gpu.gpm_samples = [current, previous]
        if not gpu.gpm_primed:
            gpu.gpm_primed = True
            return
        mg = gpu.metrics_get
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRICS)
        mg.sample1, mg.sample2 = previous, current
        for i, metric_id in enumerate(GPM_METRICS):
            mg.metrics[i].metricId = metric_id
        if self._field(gpu, call, reading, api.nvmlGpmMetricsGet, mg) is None:
            return
        for i, metric_id in enumerate(GPM_METRICS):
            metric = mg.metrics[i]
            value = float(metric.value)
            if metric.nvmlReturn == 0 and math.isfinite(value):
                reading.gpm[metric_id] = value
            else:
                self._tell(
                    gpu,
                    f"gpm{metric_id}",
                    f"GPU {gpu.inv.uuid}: GPM metric {metric_id} returned "
                    f"NVML code {metric.nvmlReturn}; it is reported as missing",
                )

    def _field(self, gpu: _Gpu, call: Call, reading: _Reading, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call with the error policy of the module docstring; None when there is no value."""
        name = getattr(fn, "__name__", "nvml")
        now = self.clock.monotonic()
        for cache in (gpu.unsupported, gpu.denied):
            seen = cache.get(name)
            if seen is not None:
                if now - seen < self.reprobe_s:
                    if cache is gpu.denied:
                        reading.reasons.add(REASON_NO_PERMISSION)
                        reading.details.append(self._capability(name))
                    return None
                del cache[name]
        try:
            return call(fn, *args)
        except Exception as exc:
            code = nv.error_code(exc)
            if code is None:
                raise
            if code in nv.LOST_CODES:
                gpu.lost, gpu.lost_probe_at = True, now
                self._tell(gpu, "lost", f"GPU {gpu.inv.uuid} is lost ({exc}): marked lost, others continue")
                raise _GpuLostError from exc
            if code in nv.UNSUPPORTED_CODES:
                gpu.unsupported[name] = now
                self._tell(gpu, name, f"GPU {gpu.inv.uuid}: {name} not supported ({exc}); field left empty")
                return None
            if code == nv.NVML_ERROR_NO_PERMISSION:
                gpu.denied[name] = now
                reading.reasons.add(REASON_NO_PERMISSION)
                reading.details.append(self._capability(name))
                self._tell(gpu, name, f"GPU {gpu.inv.uuid}: no permission for {self._capability(name)}")
                return None
            reading.reasons.add(REASON_NVML_ERROR)
            reading.details.append(f"{name}: {exc}")
            return None

    @staticmethod
    def _capability(name: str) -> str:
        return f"missing capability: {CAPABILITIES.get(name, name)} (NVML_ERROR_NO_PERMISSION on {name})"

    def _tell(self, gpu: _Gpu, topic: str, message: str) -> None:
        """Log a condition once per (GPU, topic), not every window."""
        key = (gpu.inv.uuid, topic)
        if key not in self._told:
            self._told.add(key)
            log.warning("%s", message)

    # --- records -----------------------------------------------------------------------------------
    def _to_record(self, gpu: _Gpu, r: _Reading) -> tuple[GpuSample, GpuStatus]:
        end = self.clock.monotonic()
        window_s = max(end - gpu.last_end, 1e-3)
        gpu.last_end = end
        inv = gpu.inv
        base: dict[str, Any] = {
            "ts": self.clock.now(),
            "window_s": window_s,
            "node": self.node,
            "gpu_uuid": inv.uuid,
            "gpu_index": inv.index,
            "gpu_name": inv.name,
            "parent_gpu_uuid": inv.parent_uuid,
            "mig_profile": inv.mig_profile,
        }
        source = TelemetrySource.NVML_GPM if gpu.gpm else TelemetrySource.NVML_BASIC
        if r.lost or gpu.lost:
            lost = GpuSample(**base, state=GpuState.LOST, source=source)
            return lost, GpuStatus(inv.uuid, frozenset(r.reasons), tuple(r.details))
        gpm = r.gpm
        sm, tensor, dram = (
            _ratio(gpm.get(m)) for m in (nv.GPM_SM_UTIL, nv.GPM_ANY_TENSOR_UTIL, nv.GPM_DRAM_BW_UTIL)
        )
        busy = (_ratio(gpm.get(nv.GPM_GRAPHICS_UTIL)), _clamp(r.util_gpu), _clamp(r.util_mem))
        evidence = (
            ActivityEvidence.PROFILING
            if any(v is not None for v in (sm, tensor, dram))
            else ActivityEvidence.UTILISATION
            if any(v is not None for v in busy)
            else None
        )
        sample = GpuSample(
            **base,
            sm_active=sm,
            tensor_active=tensor,
            dram_active=dram,
            gr_engine_active=busy[0],
            gpu_util=busy[1],
            mem_copy_util=busy[2],
            activity_evidence=evidence,
            mem_used_bytes=r.mem_used,
            power_w=r.power_w,
            sm_clock_mhz=r.sm_clock,
            nvlink_tx_bytes=_bytes(gpm.get(nv.GPM_NVLINK_TOTAL_TX_PER_SEC), window_s),
            nvlink_rx_bytes=_bytes(gpm.get(nv.GPM_NVLINK_TOTAL_RX_PER_SEC), window_s),
            pcie_tx_bytes=_bytes(gpm.get(nv.GPM_PCIE_TX_PER_SEC), window_s),
            pcie_rx_bytes=_bytes(gpm.get(nv.GPM_PCIE_RX_PER_SEC), window_s),
            source=source,
            state=GpuState.OK,
        )
        reasons = set(r.reasons)
        ratios_missing = sample.tensor_active is None or sample.dram_active is None
        if source is TelemetrySource.NVML_GPM and ratios_missing:
            reasons.add(REASON_METRIC_MISSING)
        if reasons:
            sample = sample.model_copy(update={"state": GpuState.DEGRADED})
        return sample, GpuStatus(inv.uuid, frozenset(reasons), tuple(dict.fromkeys(r.details)), r.pids)


def _clamp(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, value))


def _ratio(percent: float | None) -> float | None:
    return _clamp(percent / 100.0) if percent is not None else None


def _bytes(mib_per_s: float | None, window_s: float) -> int | None:
    if mib_per_s is None or not math.isfinite(mib_per_s) or mib_per_s < 0:
        return None
    return round(mib_per_s * MIB * window_s)
