"""dcgm-exporter expositions (the real capture and 8-GPU builds in its format) -> gpu_sample records."""

from __future__ import annotations

import httpx
import pytest

from collector.clock import FakeClock
from collector.dcgm_source import DcgmSource, dcgm_window
from collector.promtext import parse
from collector.window import REASON_METRIC_MISSING, REASON_PROFILING_ZERO, REASON_SCRAPE_FAILED
from fleet.contract import GpuState, TelemetrySource
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
