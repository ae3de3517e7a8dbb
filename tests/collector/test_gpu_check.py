"""scripts/gpu_check.py's collection, conclusion and report, driven by the fake NVML (no GPU here)."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

from collector.fake_nvml import FakeGpu, FakeNvml, Load, fake_uuid, fleet_node
from collector.nvml_source import NvmlSource
from fleet.clock import FakeClock

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
MATMUL = Load(
    sm_util=98, sm_occupancy=40, tensor_util=86, dram_bw_util=18, util_gpu_pct=100, power_mw=690_000
)
COPY = Load(sm_util=60, sm_occupancy=70, tensor_util=0, dram_bw_util=91, util_gpu_pct=100, power_mw=450_000)


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("load", "expected"), [(MATMUL, "compute"), (COPY, "memory-bandwidth")])
def test_measure_and_conclude(gpu_check: ModuleType, load: Load, expected: str) -> None:
    clock = FakeClock()
    fake = fleet_node(2, clock.monotonic, load=load)
    source = NvmlSource(fake, "check", clock)
    source.start()
    samples = gpu_check.measure(source, clock, windows=5, interval_s=1.0, gpu_uuid=fake_uuid(1))
    assert len(samples) == 5 and all(s.gpu_uuid == fake_uuid(1) for s in samples)
    conclusion = gpu_check.conclude(samples)
    assert conclusion.bottleneck == expected and conclusion.source == "nvml-gpm"
    text = gpu_check.report("load", expected, conclusion)
    assert f"concluded {expected}" in text and ": OK" in text and "tensor_active=" in text


def test_run_load_measures_while_the_work_runs(gpu_check: ModuleType) -> None:
    clock = FakeClock()
    gpu = FakeGpu(0, fake_uuid(0))
    fake = FakeNvml([gpu], clock=clock.monotonic)
    source = NvmlSource(fake, "check", clock)
    source.start()
    running = threading.Event()

    def work(stop: threading.Event) -> None:  # stands in for the torch load: switches the GPU's activity
        gpu.timeline = [(0.0, COPY)]
        running.set()
        stop.wait(5.0)

    original = clock.sleep

    def sleep(seconds: float) -> None:
        running.wait(5.0)
        original(seconds)

    clock.sleep = sleep  # type: ignore[method-assign]
    samples = gpu_check.run_load(source, clock, work, windows=3, interval_s=1.0, gpu_uuid=None)
    assert gpu_check.conclude(samples).bottleneck == "memory-bandwidth"


def test_without_gpm_it_says_unknown_and_mismatch(gpu_check: ModuleType) -> None:
    clock = FakeClock()
    gpu = FakeGpu(0, fake_uuid(0), gpm_supported=False, architecture=7, timeline=[(0.0, MATMUL)])
    source = NvmlSource(FakeNvml([gpu], clock=clock.monotonic), "check", clock)
    source.start()
    conclusion = gpu_check.conclude(gpu_check.measure(source, clock, windows=2, interval_s=1.0))
    assert conclusion.bottleneck == "unknown" and conclusion.gpu_util == 1.0
    assert "MISMATCH" in gpu_check.report("load", "compute", conclusion)


def test_idle_is_underutilised(gpu_check: ModuleType) -> None:
    clock = FakeClock()
    source = NvmlSource(fleet_node(1, clock.monotonic), "check", clock)
    source.start()
    assert gpu_check.conclude(gpu_check.measure(source, clock, windows=2, interval_s=1.0)).bottleneck == (
        "underutilised"
    )


def test_main_without_torch_exits_2(gpu_check: ModuleType) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here")
    assert gpu_check.main([]) == 2
