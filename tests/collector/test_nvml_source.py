"""The nvml source against the fake NVML: inventory, GPM, fallback, and each NVML fault of issue 4."""

from __future__ import annotations

import time

import pynvml
import pytest

from collector.fake_nvml import (
    H200_SXM_NAME,
    FakeGpu,
    FakeMigInstance,
    FakeNvml,
    Fault,
    Load,
    fake_uuid,
    fleet_node,
)
from collector.nvml_api import GPM_DRAM_BW_UTIL, GPM_GRAPHICS_UTIL, GPM_SM_UTIL
from collector.nvml_source import NvmlSource, NvmlStartError, normalise_bus_id
from collector.window import (
    REASON_CALL_TIMEOUT,
    REASON_DRIVER_UNRESPONSIVE,
    REASON_GPM_UNSUPPORTED,
    REASON_METRIC_MISSING,
    REASON_NO_PERMISSION,
)
from fleet.clock import FakeClock
from fleet.contract import ActivityEvidence, GpuState, TelemetrySource

DECODE_LIKE = Load(
    sm_util=70.0, tensor_util=12.0, dram_bw_util=85.0, util_gpu_pct=100, power_mw=550_000,
    mem_used_bytes=70 * 1024**3, nvlink_tx_mib_s=1024.0, pcie_rx_mib_s=10.0,
)  # fmt: skip


def started(fake: FakeNvml, clock: FakeClock, **kwargs: float) -> NvmlSource:
    source = NvmlSource(fake, "node-a", clock, **kwargs)
    source.start()
    return source


def test_inventory(clock: FakeClock) -> None:
    fake = fleet_node(2, clock.monotonic, name=H200_SXM_NAME)
    source = started(fake, clock)
    inv = source.inventory
    assert inv is not None and inv.driver_version == "570.133.20"
    assert [g.uuid for g in inv.gpus] == [fake_uuid(0), fake_uuid(1)]
    first = inv.gpus[0]
    assert first.name == "NVIDIA H200" and first.pci_bus_id == "0000:18:00.0"
    assert first.memory_total_bytes == 80 * 1024**3 and not first.mig_enabled and first.architecture == 9
    source.close()
    assert fake.initialized == 0  # nvmlShutdown called


def test_gpm_window_in_contract_units(clock: FakeClock) -> None:
    fake = fleet_node(1, clock.monotonic, load=DECODE_LIKE)
    fake.gpus[0].pids = [4242]
    source = started(fake, clock)
    clock.advance(5.0)
    window = source.collect()
    [sample] = window.gpu_samples
    assert sample.source is TelemetrySource.NVML_GPM and sample.state is GpuState.OK
    assert sample.sm_active == pytest.approx(0.70)
    assert sample.tensor_active == pytest.approx(0.12)
    assert sample.dram_active == pytest.approx(0.85)
    assert sample.gpu_util == 1.0
    assert sample.power_w == 550.0 and sample.mem_used_bytes == 70 * 1024**3
    assert sample.window_s == pytest.approx(5.0)
    assert sample.nvlink_tx_bytes == 1024 * 1024 * 1024 * 5  # 1 GiB/s over 5 s
    assert sample.nvlink_rx_bytes == 0
    assert sample.ts == clock.now()
    assert window.gpu_status[sample.gpu_uuid].pids == (4242,)


def test_gpm_buffers_are_swapped_not_reallocated(clock: FakeClock) -> None:
    fake = fleet_node(1, clock.monotonic, load=DECODE_LIKE)
    source = started(fake, clock)
    for _ in range(5):
        clock.advance(1.0)
        source.collect()
    assert fake.calls["nvmlGpmSampleAlloc"] == 2
    assert fake.calls["nvmlGpmSampleGet"] == 6  # one at start, then one per window
    assert fake.calls["nvmlGpmMetricsGet"] == 5


def test_nvml_library_missing_is_a_clear_error(clock: FakeClock) -> None:
    fake = fleet_node(
        1, clock.monotonic, faults=[Fault(code=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, function="nvmlInit")]
    )
    with pytest.raises(NvmlStartError, match=r"libnvidia-ml\.so\.1.*not found"):
        NvmlSource(fake, "n", clock).start()


def test_driver_not_loaded_is_a_clear_error(clock: FakeClock) -> None:
    fake = fleet_node(
        1, clock.monotonic, faults=[Fault(code=pynvml.NVML_ERROR_DRIVER_NOT_LOADED, function="nvmlInit")]
    )
    with pytest.raises(NvmlStartError, match="kernel driver is not loaded"):
        NvmlSource(fake, "n", clock).start()


def test_gpu_lost_on_one_gpu_others_continue_and_it_recovers(clock: FakeClock) -> None:
    lost = Fault(code=pynvml.NVML_ERROR_GPU_IS_LOST, gpu=3, start=1030.0, end=1090.0)
    fake = fleet_node(8, clock.monotonic, load=DECODE_LIKE, faults=[lost])
    source = started(fake, clock, lost_reprobe_s=30.0)
    states: list[list[GpuState]] = []
    for _ in range(15):  # t = 1010 .. 1150
        clock.advance(10.0)
        window = source.collect()
        states.append([s.state for s in window.gpu_samples])
        others = [s for s in window.gpu_samples if s.gpu_index != 3]
        assert len(others) == 7 and all(s.state is GpuState.OK and s.dram_active for s in others)
    gpu3 = [row[3] for row in states]
    assert gpu3[:2] == [GpuState.OK, GpuState.OK]
    assert all(s is GpuState.LOST for s in gpu3[2:8])  # 1030 .. 1080
    assert gpu3[-1] is GpuState.OK  # back within two re-probe periods of recovery at 1090
    assert gpu3.index(GpuState.OK, 2) <= 2 + 6 + 6
    calls_while_lost = fake.calls["nvmlDeviceGetUUID"]
    assert calls_while_lost < 20  # a lost GPU is re-probed slowly, not hammered


def test_gpm_not_supported_falls_back_to_utilization_and_marks_it(clock: FakeClock) -> None:
    gpu = FakeGpu(0, fake_uuid(0), gpm_supported=False, architecture=7, timeline=[(0.0, DECODE_LIKE)])
    fake = FakeNvml([gpu], clock=clock.monotonic)
    source = started(fake, clock)
    clock.advance(10.0)
    window = source.collect()
    [sample] = window.gpu_samples
    assert sample.source is TelemetrySource.NVML_BASIC
    assert sample.gpu_util == 1.0
    assert sample.sm_active is None and sample.tensor_active is None and sample.dram_active is None
    assert sample.state is GpuState.DEGRADED
    assert REASON_GPM_UNSUPPORTED in window.gpu_status[sample.gpu_uuid].reasons
    assert fake.calls["nvmlGpmSampleGet"] == 0


def test_gpm_sample_not_supported_at_run_time_falls_back(clock: FakeClock) -> None:
    fault = Fault(code=pynvml.NVML_ERROR_NOT_SUPPORTED, function="nvmlGpmSampleGet", start=1005.0)
    fake = fleet_node(1, clock.monotonic, load=DECODE_LIKE, faults=[fault])
    source = started(fake, clock)
    for _ in range(3):
        clock.advance(10.0)
        window = source.collect()
    [sample] = window.gpu_samples
    assert sample.source is TelemetrySource.NVML_BASIC and sample.gpu_util == 1.0
    assert REASON_GPM_UNSUPPORTED in window.gpu_status[sample.gpu_uuid].reasons
    assert fake.calls["nvmlGpmSampleGet"] == 2  # the failing call is not repeated every window


def test_per_metric_failure_leaves_that_field_null(clock: FakeClock) -> None:
    gpu = FakeGpu(0, fake_uuid(0), timeline=[(0.0, DECODE_LIKE)], gpm_metric_errors={GPM_DRAM_BW_UTIL: 3})
    source = started(FakeNvml([gpu], clock=clock.monotonic), clock)
    clock.advance(10.0)
    window = source.collect()
    [sample] = window.gpu_samples
    assert sample.dram_active is None and sample.sm_active == pytest.approx(0.7)
    assert sample.state is GpuState.DEGRADED
    assert REASON_METRIC_MISSING in window.gpu_status[sample.gpu_uuid].reasons


def test_no_permission_names_the_missing_capability(clock: FakeClock) -> None:
    denied = Fault(code=pynvml.NVML_ERROR_NO_PERMISSION, function="nvmlDeviceGetComputeRunningProcesses")
    fake = fleet_node(1, clock.monotonic, load=DECODE_LIKE, faults=[denied])
    source = started(fake, clock)
    for _ in range(3):
        clock.advance(10.0)
        window = source.collect()
    status = next(iter(window.gpu_status.values()))
    assert REASON_NO_PERMISSION in status.reasons
    assert any("listing the GPU's compute processes" in d and "CAP_SYS_ADMIN" in d for d in status.details)
    assert status.pids == ()
    assert window.gpu_samples[0].dram_active == pytest.approx(0.85)  # the rest of the window is intact
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1  # not retried every window


def test_no_permission_on_gpm_falls_back_and_says_why(clock: FakeClock) -> None:
    denied = Fault(code=pynvml.NVML_ERROR_NO_PERMISSION, function="nvmlGpmSampleGet")
    fake = fleet_node(1, clock.monotonic, load=DECODE_LIKE, faults=[denied])
    source = started(fake, clock)
    clock.advance(10.0)
    window = source.collect()
    status = next(iter(window.gpu_status.values()))
    assert window.gpu_samples[0].source is TelemetrySource.NVML_BASIC
    assert any("GPM profiling counters" in d for d in status.details)


def test_hanging_call_times_out_and_marks_the_window_incomplete(
    clock: FakeClock, release_hangs: list[FakeNvml]
) -> None:
    hang = Fault(hang=True, function="nvmlDeviceGetPowerUsage", gpu=1, start=1005.0)
    fake = fleet_node(3, clock.monotonic, load=DECODE_LIKE, faults=[hang])
    release_hangs.append(fake)
    source = started(fake, clock, call_timeout_s=0.2)
    clock.advance(10.0)
    started_at = time.monotonic()
    window = source.collect()
    assert time.monotonic() - started_at < 3.0
    by_index = {s.gpu_index: s for s in window.gpu_samples}
    assert by_index[1].state is GpuState.DEGRADED
    status = window.gpu_status[by_index[1].gpu_uuid]
    assert REASON_CALL_TIMEOUT in status.reasons
    assert any("nvmlDeviceGetPowerUsage" in d for d in status.details)
    assert (
        by_index[0].state is GpuState.OK and by_index[2].state is GpuState.OK
    )  # GPU 2 ran on a fresh worker
    assert window.errors["nvml"] == 1
    # GPU 1 hangs again: a second stuck worker is the bound, so GPU 2 is not polled (driver unresponsive)
    clock.advance(10.0)
    window = source.collect()
    reasons = {s.gpu_index: window.gpu_status[s.gpu_uuid].reasons for s in window.gpu_samples}
    assert REASON_CALL_TIMEOUT in reasons[1] and REASON_DRIVER_UNRESPONSIVE in reasons[2]
    assert source.guard.stuck_workers() == 2
    clock.advance(10.0)
    window = source.collect()
    assert all(REASON_DRIVER_UNRESPONSIVE in s.reasons for s in window.gpu_status.values())
    assert len(window.gpu_samples) == 3  # still one (degraded) sample per GPU per window
    fake.faults.clear()
    fake.release_hangs()
    deadline = time.monotonic() + 3.0
    while source.guard.stuck_workers() and time.monotonic() < deadline:
        time.sleep(0.01)
    clock.advance(10.0)
    source.collect()  # GPM re-primes after the abandoned windows
    clock.advance(10.0)
    window = source.collect()
    assert [s.state for s in window.gpu_samples] == [GpuState.OK] * 3


def test_hanging_init_is_a_clear_error(clock: FakeClock, release_hangs: list[FakeNvml]) -> None:
    fake = fleet_node(1, clock.monotonic, faults=[Fault(hang=True, function="nvmlInit")])
    release_hangs.append(fake)
    with pytest.raises(NvmlStartError, match="nvmlInit did not return"):
        NvmlSource(fake, "n", clock, call_timeout_s=0.1).start()


def test_mig_instances_are_their_own_gpus(clock: FakeClock) -> None:
    migs = [
        FakeMigInstance(
            1, "MIG-aaaa", "3g.40gb", 40 * 1024**3, [(0.0, Load(sm_util=50.0, tensor_util=40.0))]
        ),
        FakeMigInstance(2, "MIG-bbbb", "3g.40gb", 40 * 1024**3, [(0.0, Load(dram_bw_util=60.0))]),
    ]
    fake = FakeNvml([FakeGpu(0, fake_uuid(0), mig_instances=migs)], clock=clock.monotonic)
    source = started(fake, clock)
    clock.advance(10.0)
    window = source.collect()
    by_uuid = {s.gpu_uuid: s for s in window.gpu_samples}
    assert set(by_uuid) == {"MIG-aaaa", "MIG-bbbb"}
    first = by_uuid["MIG-aaaa"]
    assert first.parent_gpu_uuid == fake_uuid(0) and first.mig_profile == "3g.40gb"
    assert first.gpu_name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert first.tensor_active == pytest.approx(0.4) and by_uuid["MIG-bbbb"].dram_active == pytest.approx(0.6)
    assert first.gpu_util is None  # utilization rates are not supported on MIG
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 0
    assert fake.calls["nvmlGpmMigSampleGet"] == 4


def test_unexpected_error_code_degrades_one_field(clock: FakeClock) -> None:
    fault = Fault(code=pynvml.NVML_ERROR_UNKNOWN, function="nvmlDeviceGetMemoryInfo", start=1001.0)
    source = started(fleet_node(1, clock.monotonic, load=DECODE_LIKE, faults=[fault]), clock)
    clock.advance(10.0)
    window = source.collect()
    [sample] = window.gpu_samples
    assert sample.mem_used_bytes is None and sample.sm_active == pytest.approx(0.7)
    assert sample.state is GpuState.DEGRADED and window.errors["nvml"] == 1


def test_bus_id_normalised_to_sysfs_form() -> None:
    assert normalise_bus_id("00000000:53:00.0") == "0000:53:00.0"
    assert normalise_bus_id("0000:AB:00.0") == "0000:ab:00.0"


def test_gpm_metric_ids_requested(clock: FakeClock) -> None:
    source = started(fleet_node(1, clock.monotonic), clock)
    clock.advance(1.0)
    source.collect()
    mg = source._gpus[0].metrics_get
    ids = {mg.metrics[i].metricId for i in range(mg.numMetrics)}
    assert GPM_SM_UTIL in ids and GPM_DRAM_BW_UTIL in ids


# --- busy-time counters, activity evidence, failures (issue 15) ---------------------------------------------
BUSY = Load(
    sm_util=55.0, tensor_util=30.0, dram_bw_util=40.0, graphics_util=91.0, util_gpu_pct=97, util_mem_pct=38
)


def test_graphics_and_memory_utilisation_beside_gpm(clock: FakeClock) -> None:
    source = started(fleet_node(1, clock.monotonic, load=BUSY), clock)
    clock.advance(10.0)
    [sample] = source.collect().gpu_samples
    assert sample.gr_engine_active == pytest.approx(0.91)  # GPM graphics util, percent -> ratio
    assert sample.mem_copy_util == pytest.approx(0.38)  # nvmlDeviceGetUtilizationRates().memory
    assert sample.activity_evidence is ActivityEvidence.PROFILING
    mg = source._gpus[0].metrics_get
    assert GPM_GRAPHICS_UTIL in {mg.metrics[i].metricId for i in range(mg.numMetrics)}


def test_without_gpm_only_busy_time_is_evidence(clock: FakeClock) -> None:
    gpu = FakeGpu(0, fake_uuid(0), gpm_supported=False, architecture=7, timeline=[(0.0, BUSY)])
    source = started(FakeNvml([gpu], clock=clock.monotonic), clock)
    clock.advance(10.0)
    [sample] = source.collect().gpu_samples
    assert sample.gpu_util == pytest.approx(0.97) and sample.mem_copy_util == pytest.approx(0.38)
    assert sample.gr_engine_active is None and sample.sm_active is None
    assert sample.activity_evidence is ActivityEvidence.UTILISATION


def test_mig_slices_get_graphics_activity_but_no_memory_utilisation(clock: FakeClock) -> None:
    migs = [FakeMigInstance(1, "MIG-cccc", "1g.10gb", timeline=[(0.0, BUSY)])]
    source = started(FakeNvml([FakeGpu(0, fake_uuid(0), mig_instances=migs)], clock=clock.monotonic), clock)
    clock.advance(10.0)
    [sample] = source.collect().gpu_samples
    assert sample.gr_engine_active == pytest.approx(0.91)  # nvmlGpmMigSampleGet: per slice
    assert sample.mem_copy_util is None and sample.gpu_util is None  # not supported on MIG: unknown, not 0
    assert sample.activity_evidence is ActivityEvidence.PROFILING


def test_lost_gpu_has_no_activity_evidence(clock: FakeClock) -> None:
    lost = Fault(code=pynvml.NVML_ERROR_GPU_IS_LOST, gpu=0, start=1001.0)
    source = started(fleet_node(1, clock.monotonic, load=BUSY, faults=[lost]), clock)
    clock.advance(10.0)
    window = source.collect()
    [sample] = window.gpu_samples
    assert sample.state is GpuState.LOST and sample.activity_evidence is None
    assert window.failures == []  # a lost GPU is data (state=lost), not a collector failure


def test_failures_name_the_gpu_and_the_reason(clock: FakeClock, release_hangs: list[FakeNvml]) -> None:
    fault = Fault(code=pynvml.NVML_ERROR_UNKNOWN, function="nvmlDeviceGetMemoryInfo", gpu=1, start=1001.0)
    source = started(fleet_node(2, clock.monotonic, load=BUSY, faults=[fault]), clock)
    clock.advance(10.0)
    window = source.collect()
    [failure] = window.failures
    assert (failure.stage, failure.target, failure.reason) == ("nvml", fake_uuid(1), "nvml_error")
    assert failure.partial and "nvmlDeviceGetMemoryInfo" in failure.detail
    assert ("nvml", fake_uuid(0)) in window.reached and ("nvml", "nvml") in window.reached
    hang = Fault(hang=True, function="nvmlDeviceGetPowerUsage", start=1015.0)
    fake = fleet_node(1, clock.monotonic, load=BUSY, faults=[hang])
    release_hangs.append(fake)
    source = started(fake, clock, call_timeout_s=0.2)
    clock.advance(10.0)
    window = source.collect()
    reasons = {(f.target, f.reason, f.partial) for f in window.failures}
    assert reasons == {(fake_uuid(0), "call_timeout", True), ("nvml", "call_timeout", False)}  # nothing read


def test_no_gpus_is_a_failure(clock: FakeClock) -> None:
    source = started(FakeNvml([], clock=clock.monotonic), clock)
    clock.advance(10.0)
    window = source.collect()
    assert window.gpu_samples == []
    [failure] = window.failures
    assert (failure.target, failure.reason, failure.partial) == ("nvml", "no_gpus", False)
