"""Zero-agent parity: one fleet, read (1) by the collector (dcgm source and engine scraper against loopback
HTTP) into the store and analysed there, and (2) by a real Prometheus scraping the same expositions and
analysed in zero-agent mode, gives the same findings and the same judged and unjudged workers.

The fleet, from the real captures: node A's dcgm-exporter is the DigitalOcean H100 capture verbatim (clock
fields only, no activity field) with Kubernetes labels naming the vLLM decode pod, plus a MIG-mode H100
whose parent reports power and whose 1g.10gb instance no pod holds; node B's H200 reports the profiling
fields for the SGLang prefill pod. The vLLM and SGLang captures' counters and latency histograms advance at
known rates. Prometheus gets the pod labels as Kubernetes service discovery would set them (namespace, pod,
node, cluster); the collectors know their node and cluster from their own configuration and join the
engine endpoints to the pods through the operator's mapping file, as a pod IP lookup would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from alerts.loopback_http import ExpositionServer
from alerts.testing import ScrapeJob, prometheus_config, running_prometheus
from analyzer.sources.prometheus.client import read_fleet
from analyzer.sources.prometheus.fleet import PrometheusFleet
from collector.agent import Agent
from collector.dcgm_source import DcgmSource
from collector.engines import EngineScraper
from collector.mapping import MappedWorker, RoleMapping
from fleet.clock import SystemClock
from fleet.contract import EngineSample, GpuSample
from fleet.ingest import catalog_sku_resolver
from fleet.store.engine import make_engine, writing
from fleet.store.migrate import ensure_schema
from fleet.store.writer import write_samples
from phasefit.cli import app
from tests.analyzer.prometheus_fixtures import (
    H100_NAME,
    H100_SPARE_UUID,
    H200_NAME,
    H200_UUID,
    FixtureGpu,
    add_observations,
    dcgm_capture,
    dcgm_exposition,
    sglang_exposition,
    vllm_exposition,
)
from tests.analyzer.sources.prometheus.test_live import require_prometheus, wait_for_scrapes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

CLUSTER = "east"
NODE_A, NODE_B = "gpu-node-a", "gpu-node-b"
NAMESPACE = "llm"
VLLM_POD, SGLANG_POD = "qwen-vllm-0", "qwen-sglang-0"
UNSCRAPED_POD = "qwen-vllm-1"  # holds a GPU, but nobody scrapes its engine
UNSCRAPED_UUID = "GPU-3e1f5a7c-2b4d-4c6e-8f0a-1b2c3d4e5f60"
DECODE, PREFILL = f"{NAMESPACE}/{VLLM_POD}", f"{NAMESPACE}/{SGLANG_POD}"
DEPLOYMENT = {"nvidia_com_dynamo_namespace": "qwen"}  # a Dynamo pod label, as dcgm-exporter copies it
WINDOWS = 10  # collector windows of 1 s, while Prometheus scrapes every second
VLLM_RATES = {"vllm:prompt_tokens_total": 50.0, "vllm:generation_tokens_total": 400.0}
SGLANG_RATES = {"sglang:prompt_tokens_total": 2000.0, "sglang:generation_tokens_total": 10.0}
ITL_S, TTFT_S = 0.02, 0.3  # observed inter-token and first-token latencies (s)


class Expositions:
    """Every path's /metrics text, as a function of the seconds since ``since`` (monotonic)."""

    def __init__(self) -> None:
        self.since = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.since

    def counters(self, rates: dict[str, float]) -> dict[str, float]:
        return {name: 100.0 + rate * self.elapsed() for name, rate in rates.items()}

    def dcgm_a(self) -> str:
        decode_gpu = dcgm_capture({"namespace": NAMESPACE, "pod": VLLM_POD, "container": "vllm",
                                   "llm_d_ai_role": "decode", **DEPLOYMENT})  # fmt: skip
        mig_parent = FixtureGpu(1, H100_SPARE_UUID, H100_NAME, {"power_w": 71.0})
        mig_instance = FixtureGpu(1, H100_SPARE_UUID, H100_NAME, {"gr_engine_active": 0.3,
                                  "fb_used_mib": 4096}, mig=("7", "1g.10gb"))  # fmt: skip
        return decode_gpu + dcgm_exposition([mig_parent, mig_instance], hostname="6d6d7dc3ce21")

    def dcgm_b(self) -> str:
        prefill_gpu = FixtureGpu(
            0,
            H200_UUID,
            H200_NAME,
            {"sm_active": 0.93, "tensor_active": 0.74, "dram_active": 0.32, "gpu_util": 100,
             "fb_used_mib": 120_000},
            pod=(NAMESPACE, SGLANG_POD, "sglang"),
            pod_labels=DEPLOYMENT,
        )  # fmt: skip
        unscraped = FixtureGpu(1, UNSCRAPED_UUID, H200_NAME, {"gpu_util": 35, "fb_used_mib": 30_000},
                               pod=(NAMESPACE, UNSCRAPED_POD, "vllm"))  # fmt: skip
        return dcgm_exposition(
            [prefill_gpu, unscraped], hostname=NODE_B, hostname_label="hostname", uuid_label="uuid"
        )

    def vllm(self) -> str:
        gauges = {"vllm:num_requests_running": 12.0, "vllm:num_requests_waiting": 0.0,
                  "vllm:kv_cache_usage_perc": 0.42}  # fmt: skip
        text = vllm_exposition({**self.counters(VLLM_RATES), **gauges})
        generated = VLLM_RATES["vllm:generation_tokens_total"] * self.elapsed()
        text = add_observations(text, "vllm:inter_token_latency_seconds", ITL_S, generated)
        return add_observations(text, "vllm:time_to_first_token_seconds", TTFT_S, 2.0 * self.elapsed())

    def sglang(self) -> str:
        gauges = {"sglang:num_running_reqs": 4.0, "sglang:token_usage": 0.2}
        text = sglang_exposition({**self.counters(SGLANG_RATES), **gauges}, engine_type="prefill")
        return add_observations(text, "sglang:time_to_first_token_seconds", TTFT_S, 3.0 * self.elapsed())

    def paths(self) -> dict[str, Callable[[], str]]:
        return {"/dcgm-a": self.dcgm_a, "/dcgm-b": self.dcgm_b, "/vllm": self.vllm, "/sglang": self.sglang}


def scrape_jobs(target: str) -> list[ScrapeJob]:
    """The targets with the labels Kubernetes service discovery and the usual relabelling give them."""
    pod = {"cluster": CLUSTER, "namespace": NAMESPACE}
    return [
        ScrapeJob("dcgm-exporter-a", target, "/dcgm-a", {"cluster": CLUSTER, "node": NODE_A}),
        ScrapeJob("dcgm-exporter-b", target, "/dcgm-b", {"cluster": CLUSTER, "node": NODE_B}),
        ScrapeJob("vllm", target, "/vllm", {**pod, "pod": VLLM_POD}),
        ScrapeJob("sglang", target, "/sglang", {**pod, "pod": SGLANG_POD}),
    ]


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def collectors(base: str, http: httpx.Client) -> list[Agent]:
    """One collector per node: its dcgm-exporter and engine endpoints, joined by the mapping file."""
    clock = SystemClock()
    out = []
    for node, dcgm, engine, worker in (
        (NODE_A, "/dcgm-a", "/vllm", DECODE),
        (NODE_B, "/dcgm-b", "/sglang", PREFILL),
    ):
        mapping = RoleMapping(workers=(MappedWorker(worker_id=worker, engine_url=base + engine),))
        out.append(
            Agent(
                node=node,
                clock=clock,
                cluster=CLUSTER,
                gpu_sources=[DcgmSource(base + dcgm, node, http, clock)],
                engines=EngineScraper([base + engine], http, clock),
                mapping=mapping,
            )
        )
    return out


def collect(agents: list[Agent], windows: int) -> list[GpuSample | EngineSample]:
    for agent in agents:
        agent.start()
    records: list[GpuSample | EngineSample] = []
    next_at = time.monotonic() + 1.0
    for _ in range(windows):
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += 1.0
        for agent in agents:
            records += agent.collect_window()
    return records


def store(records: list[GpuSample | EngineSample], path: Path) -> str:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    ensure_schema(engine)
    with writing(engine) as connection:
        write_samples(connection, records, sku_resolver=catalog_sku_resolver())
    engine.dispose()
    return url


def analyse(*options: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["analyze", *options, "--json"])
    assert result.exit_code == 0, result.output
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


def findings(payload: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    return sorted((f["kind"], f["worker_id"], f["severity"]) for f in payload["findings"])


def counts(payload: dict[str, Any]) -> dict[str, Any]:
    fleet = payload["summary"]["fleet"]
    keys = ("workers", "judged_workers", "unjudged_workers", "unjudged_reasons", "gpus", "unattributed_gpus",
            "physical_gpus", "mig_instances", "pools")  # fmt: skip
    return {key: fleet.get(key) for key in keys}


def main(finding: dict[str, Any]) -> Any:
    return finding["evidence"].get("main")


def workers(payload: dict[str, Any]) -> list[tuple[Any, ...]]:
    keys = ("worker_id", "role", "pool", "sku", "unjudged_reason")
    return sorted(tuple(w.get(k) for k in keys) for w in payload["summary"]["workers"])


def tokens_per_s(fleet: PrometheusFleet, worker: str, column: str) -> float:
    rows = fleet.engine.worker == fleet.engine.workers.index(worker)
    return float(np.nanmedian(getattr(fleet.engine, column)[rows])) / fleet.window_s


def latency(fleet: PrometheusFleet, worker: str, column: str) -> float:
    rows = fleet.engine.worker == fleet.engine.workers.index(worker)
    values = fleet.engine_row_latency[column][rows]
    return float(np.nanmedian(values)) if not np.isnan(values).all() else float("nan")


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def clear_of_the_hour(margin_s: float = 30.0) -> None:
    """Both paths bucket by the hour: a run across an hour's end would compare two thin buckets instead of one
    (at most ``margin_s`` of waiting, in one run out of 120)."""
    left = 3600.0 - time.time() % 3600.0
    if left < margin_s:
        time.sleep(left + 1.0)


def test_the_store_and_zero_agent_agree_on_the_same_fleet(tmp_path: Path, http: httpx.Client) -> None:
    require_prometheus()
    clear_of_the_hour()
    fleet = Expositions()
    with ExpositionServer(fleet.paths()) as server:
        target = f"127.0.0.1:{server.port}"
        with running_prometheus(prometheus_config(scrape_jobs(target), interval="1s")) as prometheus:
            wait_for_scrapes(prometheus, 3)
            since = datetime.now(UTC).replace(microsecond=0)
            records = collect(collectors(f"http://{target}", http), WINDOWS)
            until = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
            wait_for_scrapes(prometheus, 3 + WINDOWS + 2)
            span = ["--from", _iso(since), "--to", _iso(until)]
            from_store = analyse("--database-url", store(records, tmp_path / "phasefit.db"), *span)
            zero_agent = analyse("--prometheus", prometheus.url, "--step", "1", *span)
            # rate() divides by its whole range: over seconds-old series, read a range the series cover.
            zero_fleet = read_fleet(prometheus.url, since, until, 1.0, client=http, range_s=3.0)

    # The same findings and the same judged / unjudged workers, for the same reasons.
    assert findings(zero_agent) == findings(from_store) == [("telemetry-degraded", DECODE, "warning")]
    assert [main(f) for f in zero_agent["findings"]] == [main(f) for f in from_store["findings"]]
    assert counts(zero_agent) == counts(from_store)
    assert counts(zero_agent)["unjudged_reasons"]["GPU telemetry missing"] == 1  # the H100 capture's GPU
    assert workers(zero_agent) == workers(from_store)
    # Each label requirement not met is a warning in --json: the MIG instance no pod holds, the pod whose
    # engine nobody scrapes.
    warned = zero_agent["warnings"]
    assert any(w.startswith("1 GPU(s) carry no pod label") for w in warned)
    assert any(w.startswith("1 pod(s) hold GPUs but no vLLM") and UNSCRAPED_POD in w for w in warned)
    # Token rates and latency quantiles agree with what the collector measured.
    for worker, rate in ((DECODE, 400.0), (PREFILL, 2000.0)):
        column = "generation_tokens" if worker == DECODE else "prompt_tokens"
        measured = [getattr(r, column) / r.window_s for r in records if isinstance(r, EngineSample)
                    and r.worker_id == worker]  # fmt: skip
        assert measured and np.median(measured) == pytest.approx(rate, rel=0.15)
        assert tokens_per_s(zero_fleet, worker, column) == pytest.approx(rate, rel=0.15)
    for worker, column in ((DECODE, "tpot_p50_s"), (DECODE, "ttft_p50_s"), (PREFILL, "ttft_p50_s")):
        measured = [
            getattr(r, column) for r in records if isinstance(r, EngineSample) and r.worker_id == worker
        ]
        collected = float(np.nanmedian([np.nan if m is None else m for m in measured]))
        assert latency(zero_fleet, worker, column) == pytest.approx(collected, rel=0.01), (worker, column)
    assert latency(zero_fleet, DECODE, "tpot_p50_s") == pytest.approx(0.0175, rel=0.01)  # in (0.01, 0.025]
    assert np.isnan(latency(zero_fleet, PREFILL, "tpot_p50_s"))  # no inter-token observations: unknown
    # The MIG instance is a GPU of its own on both paths, with its parent and profile; its parent is none.
    collected_mig = {
        (r.gpu_uuid, r.parent_gpu_uuid, r.mig_profile, r.worker_id)
        for r in records
        if isinstance(r, GpuSample) and r.gpu_uuid.startswith(H100_SPARE_UUID)
    }
    listed_mig = {
        (g.gpu_uuid, g.parent_gpu_uuid, g.mig_profile, g.worker_id)
        for g in zero_fleet.gpus
        if g.gpu_uuid.startswith(H100_SPARE_UUID)
    }
    assert listed_mig == collected_mig == {(f"{H100_SPARE_UUID}/7", H100_SPARE_UUID, "1g.10gb", None)}
