# ruff: noqa: N802 - the methods carry pynvml's own names
"""The slice of ``pynvml`` (PyPI ``nvidia-ml-py``) the collector calls, as a Protocol.

The real module and :class:`collector.fake_nvml.FakeNvml` both satisfy it, so the NVML source takes either
one as a constructor argument (no monkey-patching of a global module).  Error codes are NVML's own
(``nvml.h``, ``nvmlReturn_t``); errors are ``pynvml.NVMLError`` subclasses, whose ``.value`` is the code.
"""

from __future__ import annotations

from typing import Any, Protocol

# nvmlReturn_t codes the collector branches on (identical to pynvml's NVML_ERROR_* constants).
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_CLOCK_SM = 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_ARCH_HOPPER = 9

# nvmlGpmMetricId_t values (nvml.h); GPM reports percent 0-100 and MiB/s.
GPM_GRAPHICS_UTIL = 1
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10
GPM_PCIE_TX_PER_SEC = 20
GPM_PCIE_RX_PER_SEC = 21
GPM_NVLINK_TOTAL_RX_PER_SEC = 60
GPM_NVLINK_TOTAL_TX_PER_SEC = 61
NVML_GPM_METRICS_GET_VERSION = 1

# Codes that mean "this GPU is gone until reset or reboot" (Xid 79 and friends).
LOST_CODES = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED})
# Codes that mean "this call is not available here": a capability miss, cached, never a collector failure.
UNSUPPORTED_CODES = frozenset(
    {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)
# Codes at init that mean "no usable NVML on this host", with the cause to print.
INIT_FAILURE_CAUSES: dict[int, str] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "the NVML library (libnvidia-ml.so.1) was not found: is the NVIDIA driver "
    "installed and, in a container, is the NVIDIA container runtime injecting it?",
    NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded (nvidia.ko): check `lsmod | grep "
    "nvidia` and dmesg",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "the NVML library and the loaded kernel driver differ in version "
    "(driver upgraded without reboot or module reload)",
    NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA device files (/dev/nvidia*)",
    NVML_ERROR_OPERATING_SYSTEM: "the operating system blocked access to the GPU (device cgroup rules?)",
    NVML_ERROR_UNKNOWN: "NVML reported an unknown error at init; in a container this usually means the "
    "device cgroup rules were lost (systemctl daemon-reload) and the container must be recreated",
}


class NvmlApi(Protocol):
    """Functions of ``pynvml`` used by :mod:`collector.nvml_source` (same names and argument order)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetArchitecture(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any: ...
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleFree(self, sample: Any) -> None: ...
    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any: ...
    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance_id: int, sample: Any) -> Any: ...
    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any: ...
    def c_nvmlGpmMetricsGet_t(self) -> Any: ...


def error_code(exc: BaseException) -> int | None:
    """The nvmlReturn_t code of an NVMLError (its ``value``), or None for any other exception."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def load_pynvml() -> NvmlApi:
    """Import the real bindings.  Raises ImportError naming the package when nvidia-ml-py is absent."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - the collector extra installs it
        raise ImportError(
            "the Python package nvidia-ml-py (module pynvml) is not installed: "
            "pip install 'phasefit[collector]'"
        ) from exc
    api: NvmlApi = pynvml
    return api
