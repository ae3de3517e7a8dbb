"""Builds multi-GPU dcgm-exporter expositions in the exact format of the real capture in the fixtures."""

from __future__ import annotations

import re

from tests.collector.conftest import DCGM_FIXTURE, fixture_text

# dcgm-exporter's default-counters.csv fields (telemetry.md §2.2) plus SM_ACTIVE from a custom CSV.
DEFAULT_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", 1980),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", 2619),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", 45),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", 52),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", 512.25),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", 123456789),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", 0),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", 100),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", 64),
    "DCGM_FI_DEV_ENC_UTIL": ("gauge", 0),
    "DCGM_FI_DEV_DEC_UTIL": ("gauge", 0),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", 0),
    "DCGM_FI_DEV_FB_FREE": ("gauge", 10240),
    "DCGM_FI_DEV_FB_USED": ("gauge", 71000),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", 491),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("counter", 0),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": ("gauge", 0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("counter", 0),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("counter", 0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", 0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", 0.981234),
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", 0.912000),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", 0.104000),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", 0.733000),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gauge", 1048576),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gauge", 2097152),
}


def template_labels() -> str:
    """The label set of the real capture's first sample (``{gpu="0",UUID=...}``)."""
    for line in fixture_text(DCGM_FIXTURE).splitlines():
        if line.startswith("DCGM_FI_"):
            return line[line.index("{") : line.index("}") + 1]
    raise AssertionError("no sample line in the dcgm fixture")


def gpu_labels(index: int, template: str, extra: str = "") -> str:
    labels = re.sub(r'gpu="\d+"', f'gpu="{index}"', template)
    labels = re.sub(r'UUID="[^"]+"', f'UUID="GPU-927d7444-b45a-7c49-8402-{index:012x}"', labels)
    labels = re.sub(r'device="nvidia\d+"', f'device="nvidia{index}"', labels)
    labels = re.sub(r'pci_bus_id="[^"]+"', f'pci_bus_id="00000000:{0x18 + index:02X}:00.0"', labels)
    return labels[:-1] + extra + "}" if extra else labels


def exposition(
    gpus: int = 8,
    fields: dict[str, tuple[str, float]] | None = None,
    extra_labels: dict[int, str] | None = None,
    template: str | None = None,
) -> str:
    """An exposition of ``gpus`` GPUs with HELP/TYPE lines, in dcgm-exporter's field-major order."""
    fields = DEFAULT_FIELDS if fields is None else fields
    base = template or template_labels()
    lines: list[str] = []
    for name, (kind, value) in fields.items():
        lines.append(f"# HELP {name} {name.lower().replace('_', ' ')}")
        lines.append(f"# TYPE {name} {kind}")
        for index in range(gpus):
            labels = gpu_labels(index, base, (extra_labels or {}).get(index, ""))
            lines.append(f"{name}{labels} {value}")
    return "\n".join(lines) + "\n"
