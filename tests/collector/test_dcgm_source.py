"""dcgm-exporter expositions (the real capture and 8-GPU builds in its format) -> gpu_sample records."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest

from collector.dcgm_source import DcgmSource, dcgm_window
from collector.promtext import parse
from collector.window import REASON_METRIC_MISSING, REASON_PROFILING_ZERO, REASON_SCRAPE_FAILED
from fleet.clock import FakeClock
from fleet.contract import ActivityEvidence, GpuState, TelemetrySource
from tests.collector.conftest import DCGM_FIXTURE, fixture_text
from tests.collector.dcgm_text import DEFAULT_FIELDS, exposition

MIB = 1024 * 1024


def window_of(text: str, window_s: float = 30.0, clock: FakeClock | None = None):  # type: ignore[no-untyped-def]
    return dcgm_window(parse(text), "node-a", (clock or FakeClock()).now(), window_s)


def test_real_capture_with_only_clocks_gives_a_sample_with_nulls() -> None:
    window = window_of(fixture_text(DCGM_FIXTURE))
    [sample] = window.gpu_samples
    assert sample.gpu_uuid == "GPU-927d7444-b45a-7c49-8402-5e686e46a026"
    assert sample.gpu_name == "NVIDIA H100 80GB HBM3" and sample.gpu_index == 0
    assert sample.sm_clock_mhz == 345
    assert sample.node == "node-a"  # the collector's node, not the container id in Hostname
    # the excerpt exposes no profiling field: nothing is invented, the GPU is marked degraded
    assert sample.sm_active is None and sample.tensor_active is None and sample.dram_active is None
    assert sample.mem_used_bytes is None and sample.power_w is None
    assert sample.state is GpuState.DEGRADED and sample.source is TelemetrySource.DCGM
    assert REASON_METRIC_MISSING in window.gpu_status[sample.gpu_uuid].reasons


def test_eight_gpus_in_contract_units() -> None:
    window = window_of(exposition(8), window_s=30.0)
    assert len(window.gpu_samples) == 8
    sample = window.gpu_samples[3]
    assert sample.gpu_index == 3 and sample.gpu_uuid.endswith("000000000003")
    assert sample.sm_active == pytest.approx(0.912) and sample.tensor_active == pytest.approx(0.104)
    assert sample.dram_active == pytest.approx(0.733)
    assert sample.gpu_util == 1.0  # DCGM_FI_DEV_GPU_UTIL is an integer percent
    assert sample.mem_used_bytes == 71000 * MIB  # MiB -> bytes
    assert sample.power_w == 512.25
    assert sample.pcie_tx_bytes == 1048576 * 30 and sample.pcie_rx_bytes == 2097152 * 30  # B/s over 30 s
    assert sample.nvlink_tx_bytes is None  # not exported by default
    assert sample.state is GpuState.OK


def test_default_counter_set_mutes_sm_active_and_that_stays_null() -> None:
    fields = {k: v for k, v in DEFAULT_FIELDS.items() if k != "DCGM_FI_PROF_SM_ACTIVE"}
    window = window_of(exposition(2, fields))
    assert all(s.sm_active is None and s.tensor_active is not None for s in window.gpu_samples)
    assert all(s.state is GpuState.OK for s in window.gpu_samples)  # tensor + dram suffice


def test_profiling_zero_while_busy_is_broken_telemetry_not_idle() -> None:
    fields = dict(DEFAULT_FIELDS)
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE"):
        fields[name] = ("gauge", 0.0)
    fields["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] = ("gauge", 0.0)
    fields["DCGM_FI_PROF_DRAM_ACTIVE"] = ("gauge", 0.0)
    window = window_of(exposition(1, fields))
    [sample] = window.gpu_samples
    assert sample.gpu_util == 1.0
    assert sample.tensor_active is None and sample.dram_active is None and sample.sm_active is None
    assert sample.state is GpuState.DEGRADED
    status = window.gpu_status[sample.gpu_uuid]
    assert REASON_PROFILING_ZERO in status.reasons and "not idle" in status.details[0]


def test_idle_gpu_reads_zero_and_is_not_flagged() -> None:
    fields = {
        k: (t, 0.0) if "PROF" in k or k.endswith("GPU_UTIL") else (t, v)
        for k, (t, v) in DEFAULT_FIELDS.items()
    }
    [sample] = window_of(exposition(1, fields)).gpu_samples
    assert sample.tensor_active == 0.0 and sample.gpu_util == 0.0 and sample.state is GpuState.OK


def test_kubernetes_mig_and_renamed_labels() -> None:
    template = (
        '{gpu="0",uuid="GPU-aaaa",pci_bus_id="00000000:53:00.0",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",hostname="node-7",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",'
        'container="vllm",namespace="llm",pod="decode-0",llm_d_ai_role="decode"}'
    )
    window = window_of(exposition(1, template=template))
    [sample] = window.gpu_samples
    assert sample.gpu_uuid == "GPU-aaaa/7" and sample.parent_gpu_uuid == "GPU-aaaa"
    assert sample.mig_profile == "1g.10gb" and sample.gpu_name == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    status = window.gpu_status["GPU-aaaa/7"]
    assert (
        status.pod is not None and status.pod.worker_id == "llm/decode-0" and status.pod.container == "vllm"
    )
    assert status.pod_labels == {"llm_d_ai_role": "decode"}


def test_old_namespace_labels_and_compat_metric_names() -> None:
    text = (
        'dcgm_gpu_utilization{gpu="1",uuid="GPU-bbbb",modelName="NVIDIA H200",'
        'pod_name="p",pod_namespace="ns"} 42\n'
        'dcgm_fi_prof_dram_active{gpu="1",uuid="GPU-bbbb",modelName="NVIDIA H200"} 0.5\n'
        'dcgm_fi_prof_pipe_tensor_active{gpu="1",uuid="GPU-bbbb",modelName="NVIDIA H200"} 0.25\n'
    )
    window = window_of(text)
    [sample] = window.gpu_samples
    assert sample.gpu_name == "NVIDIA H200" and sample.gpu_util == pytest.approx(0.42)
    assert sample.dram_active == 0.5 and sample.tensor_active == 0.25
    assert window.gpu_status["GPU-bbbb"].pod is not None


def test_source_scrapes_and_survives_the_exporter_going_down(clock: FakeClock) -> None:
    up = {"ok": True}

    def handler(request: httpx.Request) -> httpx.Response:
        if not up["ok"]:
            return httpx.Response(503)
        return httpx.Response(200, text=exposition(2))

    client = httpx.Client(transport=httpx.MockTransport(handler))
    source = DcgmSource("http://127.0.0.1:9400/metrics", "node-a", client, clock)
    source.start()
    clock.advance(15.0)
    window = source.collect()
    assert len(window.gpu_samples) == 2 and window.gpu_samples[0].window_s == pytest.approx(15.0)
    up["ok"] = False
    clock.advance(15.0)
    window = source.collect()
    assert window.gpu_samples == [] and window.errors["dcgm_scrape"] == 1
    assert all(REASON_SCRAPE_FAILED in s.reasons for s in window.gpu_status.values())
    assert len(window.gpu_status) == 2


# --- utilisation counters, activity evidence, MIG, Xid (issue 15) -------------------------------------------

# The fields of dcgm-exporter's shipped etc/default-counters.csv (NVIDIA/dcgm-exporter, commit 00d6d344): no
# DCGM_FI_PROF_* field at all, so only busy-time counters reach the collector ("profiling off").
SHIPPED_DEFAULT_FIELDS = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)  # fmt: skip


def test_real_capture_has_no_activity_evidence() -> None:
    [sample] = window_of(fixture_text(DCGM_FIXTURE)).gpu_samples
    assert sample.gr_engine_active is None and sample.mem_copy_util is None and sample.gpu_util is None
    assert sample.activity_evidence is None  # clocks only: neither profiling nor utilisation, not zero


def test_busy_time_counters_and_profiling_evidence() -> None:
    sample = window_of(exposition(2)).gpu_samples[1]
    assert sample.gr_engine_active == pytest.approx(0.981234)  # DCGM_FI_PROF_GR_ENGINE_ACTIVE is a ratio
    assert sample.mem_copy_util == pytest.approx(0.64)  # DCGM_FI_DEV_MEM_COPY_UTIL is a percent
    assert sample.activity_evidence is ActivityEvidence.PROFILING and sample.state is GpuState.OK


def test_shipped_default_counters_give_utilisation_evidence_only() -> None:
    fields = {name: DEFAULT_FIELDS[name] for name in SHIPPED_DEFAULT_FIELDS}
    window = window_of(exposition(2, fields))
    for sample in window.gpu_samples:
        assert sample.sm_active is None and sample.tensor_active is None and sample.dram_active is None
        assert sample.gr_engine_active is None
        assert sample.gpu_util == 1.0 and sample.mem_copy_util == pytest.approx(0.64)
        assert sample.activity_evidence is ActivityEvidence.UTILISATION
        assert sample.state is GpuState.DEGRADED  # the bottleneck cannot be measured from busy time
        assert REASON_METRIC_MISSING in window.gpu_status[sample.gpu_uuid].reasons


def test_graphics_engine_activity_alone_is_utilisation_evidence() -> None:
    fields = {k: DEFAULT_FIELDS[k] for k in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")}
    [sample] = window_of(exposition(1, fields)).gpu_samples
    assert sample.gr_engine_active == pytest.approx(0.981234) and sample.gpu_util is None
    assert sample.activity_evidence is ActivityEvidence.UTILISATION


def test_profiling_zero_while_busy_nulls_the_graphics_engine_too() -> None:
    fields = dict(DEFAULT_FIELDS)
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                 "DCGM_FI_PROF_DRAM_ACTIVE"):  # fmt: skip
        fields[name] = ("gauge", 0.0)
    [sample] = window_of(exposition(1, fields)).gpu_samples
    assert sample.gr_engine_active is None and sample.gpu_util == 1.0
    assert sample.activity_evidence is ActivityEvidence.UTILISATION  # what is left is busy time


# MIG exposition in dcgm-exporter's own label order (internal/pkg/rendermetrics/render_metrics.go:
# gpu, UUID (the parent's), pci_bus_id, device, modelName, GPU_I_PROFILE, GPU_I_ID, Hostname, then labels).
# Device-level fields (power, Xid) come on the parent entity without GPU_I_*; per-instance fields with them.
PARENT = "GPU-5d2b7f3c-0a1e-4c55-9d0b-1a2b3c4d5e6f"
WHOLE = "GPU-8e1c2d3b-4a5f-6071-8293-a4b5c6d7e8f9"


def _labels(gpu: int, uuid: str, mig: tuple[str, int] | None = None) -> str:
    base = (
        f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="00000000:{0x18 + gpu:02X}:00.0",device="nvidia{gpu}",'
        'modelName="NVIDIA H100 80GB HBM3"'
    )
    if mig is not None:
        base += f',GPU_I_PROFILE="{mig[0]}",GPU_I_ID="{mig[1]}"'
    return "{" + base + ',Hostname="dcgm-exporter-x7k2p",DCGM_FI_DRIVER_VERSION="570.133.20"}'


def mig_exposition(parent_xid: int = 0, extra: str = "") -> str:
    lines = [
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
        f"DCGM_FI_DEV_POWER_USAGE{_labels(0, PARENT)} 401.5",
        f"DCGM_FI_DEV_POWER_USAGE{_labels(1, WHOLE)} 650.0",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        f"DCGM_FI_DEV_GPU_UTIL{_labels(1, WHOLE)} 87",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        f"DCGM_FI_DEV_XID_ERRORS{_labels(0, PARENT)} {parent_xid}",
        f"DCGM_FI_DEV_XID_ERRORS{_labels(1, WHOLE)} 0",
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
        f"DCGM_FI_DEV_FB_USED{_labels(0, PARENT, ('3g.40gb', 1))} 30000",
        f"DCGM_FI_DEV_FB_USED{_labels(0, PARENT, ('1g.10gb', 9))} 8000",
        "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{_labels(0, PARENT, ('3g.40gb', 1))} 0.62",
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{_labels(0, PARENT, ('1g.10gb', 9))} 0.05",
        "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge",
        f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{_labels(0, PARENT, ('3g.40gb', 1))} 0.31",
        "# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge",
        f"DCGM_FI_PROF_DRAM_ACTIVE{_labels(0, PARENT, ('3g.40gb', 1))} 0.44",
    ]
    return "\n".join(lines) + "\n" + extra


def test_mig_instances_are_their_own_gpus_and_the_parent_is_not_one() -> None:
    window = window_of(mig_exposition())
    by_uuid = {s.gpu_uuid: s for s in window.gpu_samples}
    assert set(by_uuid) == {f"{PARENT}/1", f"{PARENT}/9", WHOLE}  # never the MIG parent as a whole GPU
    big, small, whole = by_uuid[f"{PARENT}/1"], by_uuid[f"{PARENT}/9"], by_uuid[WHOLE]
    assert (big.parent_gpu_uuid, big.mig_profile) == (PARENT, "3g.40gb")
    assert big.gpu_name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb" and big.gpu_index == 0
    assert big.tensor_active == 0.31 and big.dram_active == 0.44 and big.gr_engine_active == 0.62
    assert big.activity_evidence is ActivityEvidence.PROFILING and big.state is GpuState.OK
    assert big.mem_used_bytes == 30000 * MIB and big.power_w is None  # the parent's power is not the slice's
    assert small.mig_profile == "1g.10gb" and small.gr_engine_active == 0.05
    assert small.activity_evidence is ActivityEvidence.UTILISATION and small.gpu_util is None
    assert (
        whole.parent_gpu_uuid is None and whole.mig_profile is None and whole.gpu_util == pytest.approx(0.87)
    )


def test_a_mig_device_uuid_label_keys_the_instance() -> None:
    text = mig_exposition().replace(
        'GPU_I_ID="9",', 'GPU_I_ID="9",dra_mig_device_uuid="MIG-0e0c1b2a-3d4e-5f60-7182-93a4b5c6d7e8",'
    )
    uuids = {s.gpu_uuid: s.parent_gpu_uuid for s in window_of(text).gpu_samples}
    assert uuids["MIG-0e0c1b2a-3d4e-5f60-7182-93a4b5c6d7e8"] == PARENT and f"{PARENT}/9" not in uuids


def test_xid_79_marks_the_gpu_lost() -> None:
    fields = dict(DEFAULT_FIELDS)
    text = exposition(2, fields)
    text = text.replace(  # GPU 1's last Xid is 79: it fell off the bus
        'DCGM_FI_DEV_XID_ERRORS{gpu="1"', 'DCGM_FI_DEV_XID_ERRORS{gpu="1",err_code="79"'
    )
    text = re.sub(r'(DCGM_FI_DEV_XID_ERRORS\{gpu="1",err_code="79"[^}]*\}) 0', r"\1 79", text)
    window = window_of(text)
    ok, lost = window.gpu_samples
    assert ok.state is GpuState.OK and lost.state is GpuState.LOST
    assert lost.tensor_active is None and lost.gpu_util is None and lost.activity_evidence is None
    assert "Xid 79" in window.gpu_status[lost.gpu_uuid].details[0]


def test_xid_79_on_a_mig_parent_marks_its_instances_lost() -> None:
    states = {s.gpu_uuid: s.state for s in window_of(mig_exposition(parent_xid=79)).gpu_samples}
    assert states[f"{PARENT}/1"] is GpuState.LOST and states[f"{PARENT}/9"] is GpuState.LOST
    assert states[WHOLE] is GpuState.DEGRADED  # its own Xid is 0 (degraded: no tensor/DRAM activity)
    states = {s.gpu_uuid: s.state for s in window_of(mig_exposition(parent_xid=31)).gpu_samples}
    assert GpuState.LOST not in states.values()  # Xid 31 (a memory page fault) is the application's


def test_the_windowed_xid_count_overrides_a_stale_last_xid() -> None:
    # dcgm-exporter never resets DCGM_FI_DEV_XID_ERRORS (NVIDIA/dcgm-exporter#500); its
    # DCGM_EXP_XID_ERRORS_COUNT{xid} counts the Xids of the last window (#239): no 79 there, not lost
    counted = "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
    states = {s.gpu_uuid: s.state for s in window_of(mig_exposition(79, counted)).gpu_samples}
    assert GpuState.LOST not in states.values()
    counted += f'DCGM_EXP_XID_ERRORS_COUNT{_labels(0, PARENT)[:-1]},window_size_in_ms="300000",xid="79"}} 1\n'
    states = {s.gpu_uuid: s.state for s in window_of(mig_exposition(0, counted)).gpu_samples}
    assert states[f"{PARENT}/1"] is GpuState.LOST and states[WHOLE] is not GpuState.LOST


@pytest.mark.parametrize(
    ("answer", "reason", "status"),
    [
        (lambda r: httpx.Response(401), "http_401", 401),
        (lambda r: httpx.Response(500), "http_500", 500),
        (lambda r: httpx.Response(200, text="<html>"), "parse_error", 200),
        (lambda r: httpx.Response(200, text="go_goroutines 7\n"), "no_gpu_series", 200),
    ],
)
def test_a_failed_scrape_names_the_url_the_status_and_the_reason(
    clock: FakeClock, answer: Callable[[httpx.Request], httpx.Response], reason: str, status: int
) -> None:
    client = httpx.Client(transport=httpx.MockTransport(answer))
    source = DcgmSource("http://10.0.0.5:9400/metrics", "node-a", client, clock)
    source.start()
    window = source.collect()
    [failure] = window.failures
    assert (failure.stage, failure.target, failure.reason) == (
        "dcgm_scrape",
        "http://10.0.0.5:9400/metrics",
        reason,
    )
    assert failure.status == status and not failure.partial and window.reached == []


def test_a_refused_connection_is_classified(clock: FakeClock) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    source = DcgmSource(
        "http://127.0.0.1:9400/metrics", "n", httpx.Client(transport=httpx.MockTransport(refuse)), clock
    )
    [failure] = source.collect().failures
    assert failure.reason == "connect_refused" and failure.status is None
    ok = DcgmSource("http://127.0.0.1:9400/metrics", "n", httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text=exposition(1)))), clock)  # fmt: skip
    window = ok.collect()
    assert window.failures == [] and window.reached == [("dcgm_scrape", "http://127.0.0.1:9400/metrics")]


def test_a_gpu_reporting_only_temperatures_is_still_a_gpu_its_activity_unknown() -> None:
    fields = {"DCGM_FI_DEV_GPU_TEMP": ("gauge", 52), "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", 45)}
    window = window_of(exposition(2, fields) + "# TYPE go_goroutines gauge\ngo_goroutines 12\n")
    assert [s.gpu_index for s in window.gpu_samples] == [0, 1]
    assert all(s.activity_evidence is None and s.gpu_util is None for s in window.gpu_samples)
