"""Real-GPU check: does phasefit's nvml source see a compute-bound load and a bandwidth-bound load for
what they are?

Needs a machine with an NVIDIA GPU, the driver, PyTorch with CUDA, and phasefit installed:

    python scripts/gpu_check.py [--seconds 20] [--interval 1.0] [--device 0]

It runs, on one GPU, (1) large bf16 matrix products (compute-bound: tensor pipes busy, DRAM not) and
(2) large device-to-device copies (bandwidth-bound: DRAM busy, tensor pipes idle), collects with the
``nvml`` source during each, prints what phasefit measured (medians of the window ratios, the source,
power) and what it concludes, and exits 0 when both conclusions are the expected ones.

The collection, the conclusion and the report are importable (``measure``, ``conclude``, ``report``) and
unit-tested with the fake NVML on machines without a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.nvml_source import NvmlSource
from fleet.clock import SleepingClock, SystemClock
from fleet.contract import GpuSample, GpuState

BUSY = 0.5  # a ratio at or above this is "near its limit" for this check


@dataclass(frozen=True)
class Conclusion:
    bottleneck: str  # compute | memory-bandwidth | underutilised | unknown
    tensor: float | None
    dram: float | None
    sm: float | None
    gpu_util: float | None
    power_w: float | None
    source: str
    windows: int
    why: str


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def measure(
    source: NvmlSource,
    clock: SleepingClock,
    *,
    windows: int,
    interval_s: float,
    gpu_uuid: str | None = None,
    warmup_windows: int = 1,
) -> list[GpuSample]:
    """Collect ``warmup_windows + windows`` windows and keep the last ``windows`` samples of one GPU."""
    kept: list[GpuSample] = []
    for i in range(warmup_windows + windows):
        clock.sleep(interval_s)
        window = source.collect()
        if i < warmup_windows:
            continue
        for sample in window.gpu_samples:
            if gpu_uuid is None or sample.gpu_uuid == gpu_uuid:
                kept.append(sample)
                break
    return kept


def conclude(samples: list[GpuSample]) -> Conclusion:
    """The bottleneck the window medians show (the analyzer's idea in miniature: counters, not labels)."""
    usable = [s for s in samples if s.state is not GpuState.LOST]
    tensor = _median([s.tensor_active for s in usable])
    dram = _median([s.dram_active for s in usable])
    sm = _median([s.sm_active for s in usable])
    util = _median([s.gpu_util for s in usable])
    power = _median([s.power_w for s in usable])
    source = usable[0].source.value if usable else "none"
    base = {"tensor": tensor, "dram": dram, "sm": sm, "gpu_util": util, "power_w": power}
    if tensor is None or dram is None:
        why = "no GPM ratios (nvml-basic, or fields missing): utilisation alone cannot tell the bottleneck"
        return Conclusion("unknown", **base, source=source, windows=len(usable), why=why)
    if max(tensor, dram) < BUSY:
        why = f"neither tensor ({tensor:.2f}) nor DRAM ({dram:.2f}) activity is near its limit"
        return Conclusion("underutilised", **base, source=source, windows=len(usable), why=why)
    if tensor >= dram:
        why = f"tensor pipes {tensor:.2f} >= DRAM {dram:.2f}"
        return Conclusion("compute", **base, source=source, windows=len(usable), why=why)
    why = f"DRAM {dram:.2f} > tensor pipes {tensor:.2f}"
    return Conclusion("memory-bandwidth", **base, source=source, windows=len(usable), why=why)


def report(load: str, expected: str, conclusion: Conclusion) -> str:
    def fmt(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    verdict = "OK" if conclusion.bottleneck == expected else "MISMATCH"
    return (
        f"{load}: {conclusion.windows} windows, source={conclusion.source}\n"
        f"  measured  tensor_active={fmt(conclusion.tensor)} dram_active={fmt(conclusion.dram)} "
        f"sm_active={fmt(conclusion.sm)} gpu_util={fmt(conclusion.gpu_util)} "
        f"power_w={fmt(conclusion.power_w, 0)}\n"
        f"  concluded {conclusion.bottleneck} ({conclusion.why}); expected {expected}: {verdict}"
    )


Work = Callable[[threading.Event], None]


def run_load(
    source: NvmlSource,
    clock: SleepingClock,
    work: Work,
    *,
    windows: int,
    interval_s: float,
    gpu_uuid: str | None,
) -> list[GpuSample]:
    """Run ``work(stop)`` on a thread while measuring; stop it afterwards."""
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,), daemon=True)
    thread.start()
    try:
        return measure(source, clock, windows=windows, interval_s=interval_s, gpu_uuid=gpu_uuid)
    finally:
        stop.set()
        thread.join(timeout=30)


def _torch_loads(torch: Any, device: int) -> tuple[Work, Work, str | None]:
    dev = torch.device(f"cuda:{device}")
    uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
    gpu_uuid = None if uuid is None else str(uuid) if str(uuid).startswith("GPU-") else f"GPU-{uuid}"

    def matmuls(stop: threading.Event) -> None:
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                torch.matmul(a, b)
            torch.cuda.synchronize(dev)

    def copies(stop: threading.Event) -> None:
        src = torch.empty(2 * 1024**3, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        while not stop.is_set():
            for _ in range(10):
                dst.copy_(src)
            torch.cuda.synchronize(dev)

    return matmuls, copies, gpu_uuid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement time per load")
    parser.add_argument("--interval", type=float, default=1.0, help="window length")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    args = parser.parse_args(argv)
    try:
        torch: Any = importlib.import_module("torch")
    except ImportError:
        print("PyTorch is not installed: this check needs it to load the GPU", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    from collector.nvml_api import load_pynvml

    clock = SystemClock()
    source = NvmlSource(load_pynvml(), "gpu-check", clock)
    source.start()
    matmuls, copies, gpu_uuid = _torch_loads(torch, args.device)
    inventory = source.inventory
    print(f"driver {inventory.driver_version if inventory else '?'}; measuring GPU {gpu_uuid or 'index 0'}")
    for gpu in inventory.gpus if inventory else ():
        print(f"  {gpu.index} {gpu.uuid} {gpu.name} {gpu.pci_bus_id} mem={gpu.memory_total_bytes}")
    windows = max(2, round(args.seconds / args.interval))
    ok = True
    try:
        for load, work, expected in (
            ("compute-bound (bf16 8192x8192 matmuls)", matmuls, "compute"),
            ("bandwidth-bound (2 GiB device copies)", copies, "memory-bandwidth"),
        ):
            samples = run_load(
                source, clock, work, windows=windows, interval_s=args.interval, gpu_uuid=gpu_uuid
            )
            conclusion = conclude(samples)
            print(report(load, expected, conclusion))
            ok = ok and conclusion.bottleneck == expected
    finally:
        source.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
