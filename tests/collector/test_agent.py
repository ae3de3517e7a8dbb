"""One window end to end: fake NVML + engine endpoints -> attributed records, exporter state, spool."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from collector.agent import Agent
from collector.dcgm_source import DcgmSource
from collector.engines import EngineScraper
from collector.exporter import ExporterState, StateHolder, build_registry
from collector.fake_nvml import H200_SXM_NAME, Load, fleet_node
from collector.nvml_source import NvmlSource
from collector.procfs import FakeProcs
from collector.runtime import default_sku_of
from collector.spool import Spool
from collector.window import SourceWindow
from fleet.clock import FakeClock
from fleet.contract import EngineSample, GpuSample, Role, RoleSource, TelemetrySource
from tests.analyzer.prometheus_fixtures import SGLANG_MAX_RUNNING_REQUESTS, VLLM_CACHE_CONFIG_INFO
from tests.collector.conftest import SGLANG_FIXTURE, VLLM_FIXTURE, fixture_text
from tests.collector.dcgm_text import exposition
from tests.collector.test_engines import set_value

PROCS = {
    100: (
        1,
        (
            "vllm",
            "serve",
            "meta-llama/Llama-3.1-70B-Instruct",
            "--port",
            "8100",
            "--tensor-parallel-size",
            "2",
        ),
    ),
    101: (100, ("VLLM::EngineCore",)),
    102: (101, ("VLLM::Worker_TP0",)),
    103: (101, ("VLLM::Worker_TP1",)),
    200: (1, ("python3", "-m", "sglang.launch_server", "--port", "30001", "--disaggregation-mode", "decode")),
}
VLLM_URL = "http://127.0.0.1:8100/metrics"
SGLANG_URL = "http://127.0.0.1:30001/metrics"
DOWN_URL = "http://127.0.0.1:9999/metrics"
GARBAGE_URL = "http://127.0.0.1:9998/metrics"


class Engines:
    def __init__(self) -> None:
        self.vllm_generation = 600.0
        self.vllm_cache_config = True  # vLLM's cache_config_info (the capture's excerpt omits it)
        self.sglang_extra = ""  # appended to SGLang's exposition

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        if url == VLLM_URL:
            text = set_value(fixture_text(VLLM_FIXTURE), "vllm:generation_tokens_total", self.vllm_generation)
            return httpx.Response(200, text=text + (VLLM_CACHE_CONFIG_INFO if self.vllm_cache_config else ""))
        if url == SGLANG_URL:
            text = fixture_text(SGLANG_FIXTURE).replace("unified", "decode") + self.sglang_extra
            return httpx.Response(200, text=text)
        if url == GARBAGE_URL:
            return httpx.Response(200, text="<html>oops</html>")
        raise httpx.ConnectError("connection refused", request=request)


def build(tmp_path: Path, clock: FakeClock) -> tuple[Agent, Engines]:
    fake = fleet_node(
        4, clock.monotonic, name=H200_SXM_NAME, load=Load(sm_util=80, tensor_util=70, dram_bw_util=30)
    )
    fake.gpus[0].pids, fake.gpus[1].pids, fake.gpus[2].pids = [102], [103], [200]
    engines = Engines()
    client = httpx.Client(transport=httpx.MockTransport(engines))
    scraper = EngineScraper([VLLM_URL, SGLANG_URL, DOWN_URL, GARBAGE_URL], client, clock)
    agent = Agent(
        node="node-a",
        clock=clock,
        gpu_sources=[NvmlSource(fake, "node-a", clock)],
        engines=scraper,
        sku_of=default_sku_of(),
        procs=FakeProcs(PROCS),
        spool=Spool(tmp_path / "spool.sqlite", 10**8, fsync=False),
        holder=StateHolder(ExporterState(node="node-a")),
    )
    return agent, engines


def test_one_window_end_to_end(tmp_path: Path, clock: FakeClock) -> None:
    agent, engines = build(tmp_path, clock)
    agent.start()
    clock.advance(10.0)
    engines.vllm_generation = 2600.0
    records = agent.collect_window()
    gpus = [r for r in records if isinstance(r, GpuSample)]
    engine = {r.worker_id: r for r in records if isinstance(r, EngineSample)}
    assert [g.worker_id for g in gpus] == ["node-a:8100", "node-a:8100", "node-a:30001", None]
    vllm = engine["node-a:8100"]
    assert vllm.engine == "vllm" and vllm.generation_tokens == 2000 and vllm.tp == 2
    assert vllm.gpu_uuids == [gpus[0].gpu_uuid, gpus[1].gpu_uuid]
    assert (vllm.role, vllm.role_source) == (Role.MIXED, RoleSource.CMDLINE)
    assert vllm.model == "Qwen/Qwen3-0.6B"  # what the engine reports beats the command line
    sglang = engine["node-a:30001"]
    assert (sglang.role, sglang.role_source) == (Role.DECODE, RoleSource.ENGINE)
    assert sglang.generation_tokens == 0 and sglang.gpu_uuids == [gpus[2].gpu_uuid]
    # the down and the garbage endpoint: no engine sample, counted, GPU samples unaffected
    assert len(engine) == 2 and agent.errors["engine_scrape"] == 2 + 2  # at start and in the window
    assert all(g.tensor_active == pytest.approx(0.7) for g in gpus)
    # the window is in the spool, in order, as contract JSON
    spooled = [json.loads(r.payload) for r in agent.spool.peek(100, 10**7)]  # type: ignore[union-attr]
    assert [s["kind"] for s in spooled] == ["gpu_sample"] * 4 + ["engine_sample"] * 2
    # and in the exporter
    text = generate_latest(build_registry(agent.holder)).decode()  # type: ignore[arg-type]
    assert (
        'phasefit_gpu_tensor_active_ratio{gpu="GPU-00000000-1111-2222-3333-000000000000",model="Qwen/Qwen3-0.6B"'
        in text
    )
    assert 'role="mixed",sku="H200-SXM",worker="node-a:8100"' in text
    assert (
        'phasefit_worker_generation_tokens_total{model="Qwen/Qwen3-0.6B",node="node-a",role="mixed"' in text
    )
    assert (
        'phasefit_collector_errors_total{reason="connect_refused",stage="engine_scrape",'
        'target="http://127.0.0.1:9999/metrics"} 2.0' in text
    )
    assert (
        'phasefit_collector_errors_total{reason="parse_error",stage="engine_scrape",'
        'target="http://127.0.0.1:9998/metrics"} 2.0' in text
    )
    assert (
        'phasefit_collector_target_up{stage="engine_scrape",target="http://127.0.0.1:8100/metrics"} 1.0'
        in text
    )
    assert "phasefit_collector_up 1.0" in text


def test_engine_samples_carry_the_kv_cache_the_engine_reports(tmp_path: Path, clock: FakeClock) -> None:
    agent, engines = build(tmp_path, clock)
    agent.start()
    clock.advance(10.0)
    engine = {r.worker_id: r for r in agent.collect_window() if isinstance(r, EngineSample)}
    assert engine["node-a:8100"].kv_capacity_tokens == 5943 * 16  # vLLM: num_gpu_blocks x block_size
    assert engine["node-a:30001"].kv_capacity_tokens == 92962  # SGLang: max_total_num_tokens
    # Its next exposition carries no cache_config_info: the latest reading says nothing, so None (not stale).
    engines.vllm_cache_config = False
    clock.advance(10.0)
    engine = {r.worker_id: r for r in agent.collect_window() if isinstance(r, EngineSample)}
    assert engine["node-a:8100"].kv_capacity_tokens is None
    spooled = [json.loads(r.payload) for r in agent.spool.peek(100, 10**7)]  # type: ignore[union-attr]
    vllm = [
        s["kv_capacity_tokens"]
        for s in spooled
        if s["kind"] == "engine_sample" and s["worker_id"] == "node-a:8100"
    ]
    assert vllm == [95088, None]  # as contract JSON, the unknown as null


def test_engine_samples_carry_the_concurrency_cap_the_engine_reports(
    tmp_path: Path, clock: FakeClock
) -> None:
    agent, engines = build(tmp_path, clock)
    engines.sglang_extra = SGLANG_MAX_RUNNING_REQUESTS
    agent.start()
    clock.advance(10.0)
    engine = {r.worker_id: r for r in agent.collect_window() if isinstance(r, EngineSample)}
    assert engine["node-a:30001"].max_running_requests == 4097  # SGLang: sglang:max_running_requests
    assert engine["node-a:8100"].max_running_requests is None  # vLLM exports no max_num_seqs
    engines.sglang_extra = ""  # the latest reading says nothing: None, not stale
    clock.advance(10.0)
    engine = {r.worker_id: r for r in agent.collect_window() if isinstance(r, EngineSample)}
    assert engine["node-a:30001"].max_running_requests is None
    spooled = [json.loads(r.payload) for r in agent.spool.peek(100, 10**7)]  # type: ignore[union-attr]
    sglang = [
        s["max_running_requests"]
        for s in spooled
        if s["kind"] == "engine_sample" and s["worker_id"] == "node-a:30001"
    ]
    assert sglang == [4097, None]  # as contract JSON, the unknown as null


class Broken:
    name = "broken"

    def start(self) -> None:
        return None

    def collect(self) -> SourceWindow:
        raise RuntimeError("boom")

    def close(self) -> None:
        return None


def test_a_failing_source_costs_only_its_own_samples(clock: FakeClock) -> None:
    fake = fleet_node(2, clock.monotonic)
    agent = Agent(node="n", clock=clock, gpu_sources=[Broken(), NvmlSource(fake, "n", clock)])
    agent.start()
    clock.advance(5.0)
    assert len(agent.collect_window()) == 2
    assert agent.errors["source"] == 1
    [failure] = agent.failures.current()
    assert (failure.stage, failure.target, failure.reason) == ("source", "broken", "exception")
    assert "RuntimeError: boom" in failure.detail


def test_nvml_and_dcgm_together_keep_one_sample_per_gpu_and_merge_pod_labels(clock: FakeClock) -> None:
    fake = fleet_node(1, clock.monotonic, load=Load(tensor_util=10, dram_bw_util=90))
    fake.gpus[0].uuid = "GPU-927d7444-b45a-7c49-8402-000000000000"
    dcgm_text = exposition(1, extra_labels={0: ',namespace="llm",pod="decode-0",llm_d_ai_role="decode"'})
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=dcgm_text)))
    agent = Agent(
        node="n",
        clock=clock,
        gpu_sources=[
            NvmlSource(fake, "n", clock),
            DcgmSource("http://127.0.0.1:9400/metrics", "n", client, clock),
        ],
    )
    agent.start()
    clock.advance(10.0)
    [sample] = agent.collect_window()
    assert isinstance(sample, GpuSample)
    assert sample.source.value == "nvml-gpm" and sample.dram_active == pytest.approx(0.9)
    assert sample.worker_id == "llm/decode-0"


def test_run_loop_collects_every_interval_and_stops(tmp_path: Path) -> None:
    from fleet.clock import SystemClock

    clock = SystemClock()
    fake = fleet_node(1, clock.monotonic)
    agent = Agent(node="n", clock=clock, gpu_sources=[NvmlSource(fake, "n", clock)])
    agent.start()
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop, 0.05))
    thread.start()
    threading.Event().wait(0.4)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and 3 <= agent.windows <= 10
    agent.close()


class Remote:
    """A source speaking for other nodes (as the simulated fleet does): records arrive attributed."""

    name = "remote"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def start(self) -> None:
        return None

    def collect(self) -> SourceWindow:
        gpu = GpuSample(
            ts=self.clock.now(), window_s=30.0, node="node07", gpu_uuid="GPU-r", gpu_index=0,
            gpu_name=H200_SXM_NAME, worker_id="node07/decode-2", tensor_active=0.1, dram_active=0.8,
            source=TelemetrySource.SIM,
        )  # fmt: skip
        engine = EngineSample(
            ts=self.clock.now(), window_s=30.0, worker_id="node07/decode-2", node="node07", engine="vllm",
            role=Role.DECODE, role_source=RoleSource.SIM, model="m", gpu_uuids=["GPU-r"],
            generation_tokens=900,
        )  # fmt: skip
        return SourceWindow(gpu_samples=[gpu], engine_samples=[engine])

    def close(self) -> None:
        return None


def test_records_of_other_nodes_keep_their_node_and_worker_in_the_exporter(clock: FakeClock) -> None:
    holder = StateHolder(ExporterState(node="collector-host"))
    agent = Agent(
        node="collector-host",
        clock=clock,
        gpu_sources=[Remote(clock)],
        holder=holder,
        sku_of=default_sku_of(),
    )
    agent.start()
    records = agent.collect_window()
    assert [r.kind for r in records] == ["gpu_sample", "engine_sample"]
    text = generate_latest(build_registry(holder)).decode()
    assert 'node="node07",role="decode",sku="H200-SXM",worker="node07/decode-2"' in text
    assert 'phasefit_worker_generation_tokens_total{model="m",node="node07"' in text
