"""dcgm-exporter's vocabulary: the field names per gpu_sample field (with units) and the labels that identify
a GPU or MIG instance, its node and the pod using it; read by the collector's dcgm source and zero-agent mode.

Names follow dcgm-exporter's counters CSV (``DCGM_FI_*``), with the DCGM 4.6 renames (``*_UTIL_RATIO``) and
the 1.x compatibility names (``dcgm-exporter -o``: ``dcgm_gpu_utilization``...) as aliases, preferred first.
The collector matches names case-insensitively; Prometheus does not, so the lower-case spellings some
relabelling produces are aliases too. Labels drift between releases and modes: ``UUID`` / ``uuid``,
``Hostname`` (a containerised exporter's container id) / ``hostname``, Kubernetes ``pod`` / ``namespace`` /
``container`` (``-o``: ``pod_name`` / ``pod_namespace`` / ``container_name``), MIG ``GPU_I_ID`` /
``GPU_I_PROFILE`` (the ``UUID`` is then the parent GPU's), DRA ``dra_mig_profile`` / ``dra_mig_device_uuid``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet.vocabulary.units import Unit


@dataclass(frozen=True)
class DcgmField:
    """Where dcgm-exporter reports one value. ``field`` is the gpu_sample field it fills, or ``xid`` (read
    to judge the GPU's state)."""

    field: str
    names: tuple[tuple[str, Unit], ...]  # preferred first


_R, _P = Unit.RATIO, Unit.PERCENT
DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("sm_active", (
        ("DCGM_FI_PROF_SM_ACTIVE", _R), ("DCGM_FI_PROF_SM_UTIL_RATIO", _R), ("dcgm_fi_prof_sm_active", _R),
    )),
    DcgmField("tensor_active", (
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _R), ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", _R),
        ("DCGM_FI_PROF_PIPE_TENSOR_UTIL_RATIO", _R), ("dcgm_fi_prof_pipe_tensor_active", _R),
    )),
    DcgmField("dram_active", (
        ("DCGM_FI_PROF_DRAM_ACTIVE", _R), ("DCGM_FI_PROF_DRAM_UTIL_RATIO", _R),
        ("dcgm_fi_prof_dram_active", _R),
    )),
    DcgmField("gpu_util", (
        ("DCGM_FI_DEV_GPU_UTIL", _P), ("DCGM_FI_DEV_GPU_UTIL_RATIO", Unit.RATIO_OR_PERCENT),
        ("dcgm_gpu_utilization", _P),
    )),
    # Busy-time counters: weaker evidence than the profiling fields. GR_ENGINE_ACTIVE is a MIG instance's own
    # activity (GPU_UTIL is not supported on MIG); with GPU_UTIL it also tells broken profiling (every
    # profiling field 0 while kernels run, NVIDIA/dcgm-exporter#635) from an idle GPU.
    DcgmField("mem_copy_util", (
        ("DCGM_FI_DEV_MEM_COPY_UTIL", _P), ("dcgm_mem_copy_utilization", _P),
    )),
    DcgmField("gr_engine_active", (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", _R), ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", _R),
    )),
    DcgmField("mem_used_bytes", (("DCGM_FI_DEV_FB_USED", Unit.MIB), ("dcgm_fb_used", Unit.MIB))),
    DcgmField("power_w", (("DCGM_FI_DEV_POWER_USAGE", Unit.WATTS), ("dcgm_power_usage", Unit.WATTS))),
    DcgmField("sm_clock_mhz", (("DCGM_FI_DEV_SM_CLOCK", Unit.MHZ), ("dcgm_sm_clock", Unit.MHZ))),
    DcgmField("pcie_tx_bytes", (("DCGM_FI_PROF_PCIE_TX_BYTES", Unit.BYTES_PER_S),)),
    DcgmField("pcie_rx_bytes", (("DCGM_FI_PROF_PCIE_RX_BYTES", Unit.BYTES_PER_S),)),
    DcgmField("nvlink_tx_bytes", (("DCGM_FI_PROF_NVLINK_TX_BYTES", Unit.BYTES_PER_S),)),
    DcgmField("nvlink_rx_bytes", (("DCGM_FI_PROF_NVLINK_RX_BYTES", Unit.BYTES_PER_S),)),
    # The last Xid error: 79 means the GPU fell off the bus (lost); the exporter never resets it.
    DcgmField("xid", (
        ("DCGM_FI_DEV_XID_ERRORS", Unit.CODE), ("DCGM_FI_DEV_XID_ERROR", Unit.CODE),
        ("dcgm_xid_errors", Unit.CODE),
    )),
)  # fmt: skip
PROFILING_FIELDS = ("sm_active", "tensor_active", "dram_active")
# Profiling fields all 0 while GPU_UTIL > 0 is broken telemetry (GR_ENGINE_ACTIVE is a profiling field too).
STUCK_CHECK_FIELDS = (*PROFILING_FIELDS, "gr_engine_active")
XID_GPU_FALLEN_OFF_BUS = 79
# Xid errors within the exporter's time window, one series per Xid (label ``xid``). The last-Xid field is
# never reset after the GPU recovers (NVIDIA/dcgm-exporter#500): where the exporter counts Xids, that decides.
XID_COUNT_NAME = "DCGM_EXP_XID_ERRORS_COUNT"
XID_LABEL = "xid"

# Every dcgm-exporter series (any field, the ones above or not) matches this: a GPU that reports only clocks
# or temperatures is still a GPU, its activity unknown.
DCGM_NAME_PATTERN = re.compile(r"DCGM_FI_.+|DCGM_EXP_.+|dcgm_.+")

UUID_LABELS = ("UUID", "uuid", "gpu_uuid")  # a MIG instance's is its parent GPU's
GPU_INDEX_LABEL = "gpu"
MODEL_NAME_LABELS = ("modelName", "model_name")
HOSTNAME_LABELS = ("Hostname", "hostname")
MIG_INSTANCE_LABEL = "GPU_I_ID"
MIG_PROFILE_LABELS = ("GPU_I_PROFILE", "dra_mig_profile")
MIG_DEVICE_UUID_LABEL = "dra_mig_device_uuid"  # DRA names the MIG device's own UUID
# (pod, namespace, container) as Kubernetes mapping labels them: current names, then dcgm-exporter -o.
POD_LABEL_SETS = (("pod", "namespace", "container"), ("pod_name", "pod_namespace", "container_name"))


def dcgm_field(field: str) -> DcgmField:
    return next(f for f in DCGM_FIELDS if f.field == field)


def mig_key(parent_uuid: str, instance: str) -> str:
    """A MIG instance's key where no device UUID is labelled: ``<parent UUID>/<GPU_I_ID>``."""
    return f"{parent_uuid}/{instance}"


def mig_gpu_name(name: str, profile: str | None) -> str:
    """A MIG instance's name as NVML reports it (``NVIDIA H100 80GB HBM3 MIG 1g.10gb``)."""
    return f"{name} MIG {profile}" if profile and "MIG" not in name else name
