"""The fake NVML behaves like pynvml: same errors (classes and codes), same structures, GPM averaging."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from collector.fake_nvml import FakeGpu, FakeNvml, Fault, Load, average_gpm, fake_uuid, fleet_node
from collector.nvml_api import GPM_ANY_TENSOR_UTIL, GPM_DRAM_BW_UTIL, GPM_SM_UTIL
from fleet.clock import FakeClock


def test_errors_are_pynvml_subclasses_with_real_codes(clock: FakeClock) -> None:
    fake = fleet_node(2, clock.monotonic, faults=[Fault(code=pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as info:
        fake.nvmlDeviceGetHandleByIndex(1)
    assert info.value.value == 15
    assert isinstance(info.value, pynvml.NVMLError)


def test_calls_before_init_raise_uninitialized(clock: FakeClock) -> None:
    fake = fleet_node(1, clock.monotonic)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_init_fault_raises_library_not_found(clock: FakeClock) -> None:
    fake = fleet_node(
        1, clock.monotonic, faults=[Fault(code=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, function="nvmlInit")]
    )
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        fake.nvmlInit()


def test_structures_are_pynvml_structures(clock: FakeClock) -> None:
    fake = fleet_node(1, clock.monotonic, load=Load(mem_used_bytes=5 * 1024**3, util_gpu_pct=37))
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    pci = fake.nvmlDeviceGetPciInfo(handle)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    assert pci.busId == "00000000:18:00.0"  # str, as pynvml's _PrintableStructure decodes it
    memory = fake.nvmlDeviceGetMemoryInfo(handle)
    assert isinstance(memory, pynvml.c_nvmlMemory_t)
    assert memory.used == 5 * 1024**3 and memory.total == 80 * 1024**3
    assert fake.nvmlDeviceGetUtilizationRates(handle).gpu == 37
    support = fake.nvmlGpmQueryDeviceSupport(handle)
    assert isinstance(support, pynvml.c_nvmlGpmSupport_t) and support.isSupportedDevice == 1


def test_gpm_metrics_average_the_load_between_the_two_samples(clock: FakeClock) -> None:
    gpu = FakeGpu(0, fake_uuid(0), timeline=[(0.0, Load(sm_util=10.0)), (1005.0, Load(sm_util=90.0))])
    fake = FakeNvml([gpu], clock=clock.monotonic)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    first, second = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    assert isinstance(first, pynvml.c_nvmlGpmSample_t)
    fake.nvmlGpmSampleGet(handle, first)  # t = 1000
    clock.advance(10.0)
    fake.nvmlGpmSampleGet(handle, second)  # t = 1010: half at 10 %, half at 90 %
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = pynvml.NVML_GPM_METRICS_GET_VERSION, 1, first, second
    mg.metrics[0].metricId = GPM_SM_UTIL
    fake.nvmlGpmMetricsGet(mg)
    assert mg.metrics[0].nvmlReturn == 0
    assert mg.metrics[0].value == pytest.approx(50.0)


def test_per_metric_return_codes(clock: FakeClock) -> None:
    gpu = FakeGpu(0, fake_uuid(0), gpm_metric_errors={GPM_DRAM_BW_UTIL: pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake = FakeNvml([gpu], clock=clock.monotonic)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    a, b = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    fake.nvmlGpmSampleGet(handle, a)
    clock.advance(1.0)
    fake.nvmlGpmSampleGet(handle, b)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = 1, 2, a, b
    mg.metrics[0].metricId, mg.metrics[1].metricId = GPM_ANY_TENSOR_UTIL, GPM_DRAM_BW_UTIL
    fake.nvmlGpmMetricsGet(mg)
    assert mg.metrics[0].nvmlReturn == 0
    assert mg.metrics[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_metrics_get_rejects_samples_of_different_gpus(clock: FakeClock) -> None:
    fake = fleet_node(2, clock.monotonic)
    fake.nvmlInit()
    a, b = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    fake.nvmlGpmSampleGet(fake.nvmlDeviceGetHandleByIndex(0), a)
    fake.nvmlGpmSampleGet(fake.nvmlDeviceGetHandleByIndex(1), b)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = 1, 1, a, b
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpmMetricsGet(mg)
    assert ctypes.cast(a, ctypes.c_void_p).value != ctypes.cast(b, ctypes.c_void_p).value


def test_faults_respect_their_time_window(clock: FakeClock) -> None:
    fault = Fault(
        code=pynvml.NVML_ERROR_UNKNOWN, function="nvmlDeviceGetPowerUsage", start=1010.0, end=1020.0
    )
    fake = fleet_node(1, clock.monotonic, faults=[fault])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetPowerUsage(handle) > 0
    clock.advance(15.0)
    with pytest.raises(pynvml.NVMLError_Unknown):
        fake.nvmlDeviceGetPowerUsage(handle)
    clock.advance(10.0)
    assert fake.nvmlDeviceGetPowerUsage(handle) > 0


def test_average_gpm_handles_phase_boundaries() -> None:
    timeline = [(0.0, Load(tensor_util=0.0)), (10.0, Load(tensor_util=100.0)), (20.0, Load(tensor_util=0.0))]
    assert average_gpm(timeline, 5.0, 25.0, GPM_ANY_TENSOR_UTIL) == pytest.approx(50.0)
    assert average_gpm(timeline, 12.0, 12.0, GPM_ANY_TENSOR_UTIL) == pytest.approx(100.0)
