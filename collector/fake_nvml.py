# ruff: noqa: N802 - the methods carry pynvml's own names
"""A scriptable stand-in for ``pynvml``: same function names, argument order, return structures and errors.

It raises ``pynvml``'s own ``NVMLError`` subclasses (``pynvml.NVMLError(code)`` maps the code to
``NVMLError_GpuIsLost`` and so on) and returns ``pynvml``'s own ctypes structures (``nvmlPciInfo_t``,
``c_nvmlMemory_t``, ``c_nvmlUtilization_t``, ``c_nvmlGpmSupport_t``, ``c_nvmlGpmMetricsGet_t``), so code that
works against it works against the real library.  What it scripts, per GPU and per time (``clock`` is
injected, so tests run in simulated time):

* a load timeline (piecewise constant :class:`Load` phases); GPM metrics are the exact time-average of the
  load between the two samples, as NVML's ``nvmlGpmMetricsGet`` averages over ``[sample1, sample2]``;
* faults (:class:`Fault`): an error code or a hang, for one function or all, on one GPU or all, in a time
  range; per-metric GPM return codes;
* GPM support, MIG instances, architecture, running compute processes (host PIDs).

It is an instance, handed to :class:`collector.nvml_source.NvmlSource`; nothing global is patched.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from collector.nvml_api import (
    GPM_ANY_TENSOR_UTIL,
    GPM_DRAM_BW_UTIL,
    GPM_GRAPHICS_UTIL,
    GPM_NVLINK_TOTAL_RX_PER_SEC,
    GPM_NVLINK_TOTAL_TX_PER_SEC,
    GPM_PCIE_RX_PER_SEC,
    GPM_PCIE_TX_PER_SEC,
    GPM_SM_OCCUPANCY,
    GPM_SM_UTIL,
    NVML_DEVICE_ARCH_HOPPER,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
)

H100_SXM_NAME = "NVIDIA H100 80GB HBM3"
H200_SXM_NAME = "NVIDIA H200"
GIB = 1024**3


@dataclass(frozen=True)
class Load:
    """What a GPU is doing during one phase.  Percentages as NVML reports them (0-100), rates in MiB/s."""

    sm_util: float = 0.0
    sm_occupancy: float = 0.0
    tensor_util: float = 0.0
    dram_bw_util: float = 0.0
    graphics_util: float = 0.0
    pcie_tx_mib_s: float = 0.0
    pcie_rx_mib_s: float = 0.0
    nvlink_tx_mib_s: float = 0.0
    nvlink_rx_mib_s: float = 0.0
    util_gpu_pct: int = 0  # nvmlDeviceGetUtilizationRates().gpu: "a kernel was running"
    util_mem_pct: int = 0
    power_mw: int = 70_000
    sm_clock_mhz: int = 1980
    mem_used_bytes: int = 0

    def gpm_value(self, metric_id: int) -> float | None:
        return {
            GPM_GRAPHICS_UTIL: self.graphics_util,
            GPM_SM_UTIL: self.sm_util,
            GPM_SM_OCCUPANCY: self.sm_occupancy,
            GPM_ANY_TENSOR_UTIL: self.tensor_util,
            GPM_DRAM_BW_UTIL: self.dram_bw_util,
            GPM_PCIE_TX_PER_SEC: self.pcie_tx_mib_s,
            GPM_PCIE_RX_PER_SEC: self.pcie_rx_mib_s,
            GPM_NVLINK_TOTAL_TX_PER_SEC: self.nvlink_tx_mib_s,
            GPM_NVLINK_TOTAL_RX_PER_SEC: self.nvlink_rx_mib_s,
        }.get(metric_id)


IDLE = Load()


@dataclass
class FakeMigInstance:
    gpu_instance_id: int
    uuid: str
    profile: str  # e.g. "1g.10gb"
    memory_total: int = 10 * GIB
    timeline: list[tuple[float, Load]] = field(default_factory=lambda: [(0.0, IDLE)])
    pids: list[int] = field(default_factory=list)


@dataclass
class FakeGpu:
    index: int
    uuid: str
    name: str = H100_SXM_NAME
    bus_id: str = ""
    pci_device_id: int = 0x233010DE
    memory_total: int = 80 * GIB
    architecture: int = NVML_DEVICE_ARCH_HOPPER
    gpm_supported: bool = True
    mig_capable: bool = True
    mig_instances: list[FakeMigInstance] = field(default_factory=list)
    timeline: list[tuple[float, Load]] = field(default_factory=lambda: [(0.0, IDLE)])
    gpm_metric_errors: dict[int, int] = field(default_factory=dict)  # metric id -> per-metric nvmlReturn
    pids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.bus_id:
            self.bus_id = f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


@dataclass(frozen=True)
class Fault:
    """Make ``function`` (or every function when None) fail on ``gpu`` (or every GPU) in [start, end)."""

    code: int | None = None  # an nvmlReturn_t, raised as pynvml.NVMLError(code)
    function: str | None = None
    gpu: int | None = None
    start: float = -math.inf
    end: float = math.inf
    hang: bool = False  # block until FakeNvml.release_hangs() (or hang_limit_s), then proceed

    def applies(self, function: str, gpu: int | None, now: float) -> bool:
        return (
            (self.function is None or self.function == function)
            and (self.gpu is None or self.gpu == gpu)
            and self.start <= now < self.end
        )


@dataclass(frozen=True)
class FakeHandle:
    gpu: int
    gpu_instance_id: int | None = None  # set for MIG device handles


@dataclass
class _Sample:
    key: tuple[int, int | None] | None = None
    taken_at: float | None = None


def load_at(timeline: list[tuple[float, Load]], t: float) -> Load:
    current = timeline[0][1]
    for start, load in timeline:
        if start <= t:
            current = load
        else:
            break
    return current


def average_gpm(timeline: list[tuple[float, Load]], t1: float, t2: float, metric_id: int) -> float | None:
    """Exact time-average of a piecewise-constant metric over [t1, t2] (value at t2 when t1 == t2)."""
    if t2 <= t1:
        return load_at(timeline, t2).gpm_value(metric_id)
    total = 0.0
    for i, (start, load) in enumerate(timeline):
        begin = -math.inf if i == 0 else start  # the first phase also covers any time before it
        end = timeline[i + 1][0] if i + 1 < len(timeline) else math.inf
        lo, hi = max(begin, t1), min(end, t2)
        if hi > lo:
            value = load.gpm_value(metric_id)
            if value is None:
                return None
            total += value * (hi - lo)
    return total / (t2 - t1)


class FakeNvml:
    """pynvml's API over scripted GPUs.  ``clock`` gives the fake's notion of now, in seconds."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        clock: Callable[[], float],
        faults: list[Fault] | None = None,
        driver_version: str = "570.133.20",
        hang_limit_s: float = 30.0,
    ) -> None:
        self.gpus = gpus
        self.clock = clock
        self.faults: list[Fault] = list(faults or [])
        self.driver_version = driver_version
        self.hang_limit_s = hang_limit_s
        self.calls: Counter[str] = Counter()
        self.initialized = 0
        self._samples: dict[int, _Sample] = {}
        self._buffers: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self._lock = threading.Lock()
        self._release = threading.Event()

    # --- scripting ---------------------------------------------------------------------------------
    def release_hangs(self) -> None:
        """Let every hanging call return (tests call this in teardown so no thread outlives them)."""
        self._release.set()

    def _enter(self, function: str, handle: FakeHandle | None = None, *, needs_init: bool = True) -> None:
        gpu = handle.gpu if handle is not None else None
        with self._lock:
            self.calls[function] += 1
        now = self.clock()
        for fault in self.faults:
            if fault.applies(function, gpu, now):
                if fault.hang:
                    self._release.wait(self.hang_limit_s)
                    continue
                if fault.code is not None:
                    raise pynvml.NVMLError(fault.code)
        if needs_init and self.initialized <= 0:
            raise pynvml.NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> FakeGpu:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.gpu < len(self.gpus):
            raise pynvml.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle.gpu]

    def _mig(self, handle: FakeHandle) -> FakeMigInstance | None:
        if handle.gpu_instance_id is None:
            return None
        for mig in self._gpu(handle).mig_instances:
            if mig.gpu_instance_id == handle.gpu_instance_id:
                return mig
        raise pynvml.NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def _timeline(self, handle: FakeHandle) -> list[tuple[float, Load]]:
        mig = self._mig(handle)
        return mig.timeline if mig is not None else self._gpu(handle).timeline

    # --- init --------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit", needs_init=False)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    # --- inventory ---------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        handle = FakeHandle(index)
        self._enter("nvmlDeviceGetHandleByIndex", handle)
        self._gpu(handle)
        return handle

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        self._enter("nvmlDeviceGetName", handle)
        mig = self._mig(handle)
        gpu = self._gpu(handle)
        return f"{gpu.name} MIG {mig.profile}" if mig is not None else gpu.name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        mig = self._mig(handle)
        return mig.uuid if mig is not None else self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Any:
        self._enter("nvmlDeviceGetPciInfo", handle)
        gpu = self._gpu(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id.encode()
        domain, bus, device = gpu.bus_id.split(":")
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(device.split(".")[0], 16)
        info.pciDeviceId = gpu.pci_device_id
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        mig = self._mig(handle)
        total = mig.memory_total if mig is not None else self._gpu(handle).memory_total
        used = min(total, load_at(self._timeline(handle), self.clock()).mem_used_bytes)
        mem = pynvml.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = total, used, total - used
        return mem

    def nvmlDeviceGetArchitecture(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetArchitecture", handle)
        return self._gpu(handle).architecture

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise pynvml.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = 1 if gpu.mig_instances else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7 if self._gpu(handle).mig_capable else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        migs = self._gpu(handle).mig_instances
        if not 0 <= index < len(migs):
            raise pynvml.NVMLError(NVML_ERROR_NOT_FOUND)
        return FakeHandle(handle.gpu, migs[index].gpu_instance_id)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        if handle.gpu_instance_id is None:
            raise pynvml.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle.gpu_instance_id

    # --- per-window readings -----------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        if handle.gpu_instance_id is not None or self._gpu(handle).mig_instances:
            raise pynvml.NVMLError(NVML_ERROR_NOT_SUPPORTED)  # "not currently supported" on MIG GPUs
        load = load_at(self._timeline(handle), self.clock())
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = load.util_gpu_pct, load.util_mem_pct
        return util

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        if handle.gpu_instance_id is not None:
            raise pynvml.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return load_at(self._timeline(handle), self.clock()).power_mw

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle)
        return load_at(self._gpu(handle).timeline, self.clock()).sm_clock_mhz

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        mig = self._mig(handle)
        pids = mig.pids if mig is not None else self._gpu(handle).pids
        procs = []
        for pid in pids:
            info = pynvml.c_nvmlProcessInfo_t()
            info.pid, info.usedGpuMemory = pid, GIB
            info.gpuInstanceId = handle.gpu_instance_id if handle.gpu_instance_id is not None else 0xFFFFFFFF
            procs.append(pynvml.nvmlStructToFriendlyObject(info))
        return procs

    # --- GPM ---------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> Any:
        self._enter("nvmlGpmQueryDeviceSupport", handle)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self._gpu(handle).gpm_supported)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        buffer = ctypes.create_string_buffer(16)
        address = ctypes.addressof(buffer)
        with self._lock:
            self._buffers[address] = buffer
            self._samples[address] = _Sample()
        return ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        address = self._address(sample)
        with self._lock:
            self._samples.pop(address, None)
            self._buffers.pop(address, None)

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: Any) -> Any:
        self._enter("nvmlGpmSampleGet", handle)
        self._take(handle.gpu, None, sample)
        return sample

    def nvmlGpmMigSampleGet(self, handle: FakeHandle, gpu_instance_id: int, sample: Any) -> Any:
        self._enter("nvmlGpmMigSampleGet", handle)
        self._mig(FakeHandle(handle.gpu, gpu_instance_id))
        self._take(handle.gpu, gpu_instance_id, sample)
        return sample

    def _take(self, gpu: int, gpu_instance_id: int | None, sample: Any) -> None:
        if not self.gpus[gpu].gpm_supported:
            raise pynvml.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        record = self._samples.get(self._address(sample))
        if record is None:
            raise pynvml.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        record.key, record.taken_at = (gpu, gpu_instance_id), self.clock()

    def c_nvmlGpmMetricsGet_t(self) -> Any:
        return pynvml.c_nvmlGpmMetricsGet_t()

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        first = self._samples.get(self._address(metrics_get.sample1))
        second = self._samples.get(self._address(metrics_get.sample2))
        if (
            metrics_get.version != pynvml.NVML_GPM_METRICS_GET_VERSION
            or first is None
            or second is None
            or first.key is None
            or first.key != second.key
            or first.taken_at is None
            or second.taken_at is None
        ):
            raise pynvml.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu_index, gpu_instance_id = first.key
        handle = FakeHandle(gpu_index, gpu_instance_id)
        gpu = self.gpus[gpu_index]
        timeline = self._timeline(handle)
        for i in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[i]
            code = gpu.gpm_metric_errors.get(metric.metricId, 0)
            value = average_gpm(timeline, first.taken_at, second.taken_at, metric.metricId)
            if value is None:
                code = code or NVML_ERROR_NOT_SUPPORTED
            metric.nvmlReturn = code
            metric.value = 0.0 if code else value
        return metrics_get

    @staticmethod
    def _address(sample: Any) -> int:
        return ctypes.cast(sample, ctypes.c_void_p).value or 0


def fake_uuid(index: int, prefix: str = "GPU") -> str:
    """A UUID in NVML's format, stable per index."""
    return f"{prefix}-{index:08x}-1111-2222-3333-{index:012x}"


def fleet_node(
    count: int,
    clock: Callable[[], float],
    name: str = H100_SXM_NAME,
    load: Load = IDLE,
    faults: list[Fault] | None = None,
) -> FakeNvml:
    """``count`` identical GPUs under one constant load: the common test and benchmark setup."""
    gpus = [FakeGpu(index=i, uuid=fake_uuid(i), name=name, timeline=[(0.0, load)]) for i in range(count)]
    return FakeNvml(gpus, clock=clock, faults=faults)
