"""Zero-agent mode against a real Prometheus (Debian's ``prometheus``) on loopback.

Prometheus scrapes, once a second, expositions built from the real captures: an H100 dcgm-exporter (old
``Hostname`` label) with a decode pod's GPU and a spare GPU, an H200 dcgm-exporter (new ``hostname`` and
``-o`` style ``uuid`` labels) with a prefill pod's GPU, a vLLM worker and an SGLang worker whose counters
advance at known rates. Their pod and role labels come from the scrape jobs, as Kubernetes service
discovery and relabelling put them there. Then the frames are read back through the HTTP adapter.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from alerts.loopback_http import ExpositionServer
from alerts.testing import RunningServer, ScrapeJob, prometheus_config, running_prometheus
from alerts.tools import ToolMissingError, find_binary
from analyzer.sources.prometheus.client import PrometheusClient, load_frames_from_prometheus, read_fleet
from analyzer.sources.prometheus.series import MIB, TimeGrid
from analyzer.telemetry.frames import ROLES
from fleet.catalog import load_catalog
from fleet.contract import Role, RoleSource
from phasefit.cli import app
from tests.analyzer.prometheus_fixtures import (
    H100_SPARE_UUID,
    H200_UUID,
    SGLANG_KV_CAPACITY_TOKENS,
    VLLM_KV_CAPACITY_TOKENS,
    FixtureGpu,
    dcgm_exposition,
    sglang_exposition,
    vllm_exposition,
)
from tests.analyzer.sources.prometheus.test_source import (
    DECODE,
    H100_DECODE,
    H100_HOST,
    H100_SPARE,
    H100_UUID,
    H200_PREFILL,
    PREFILL,
)
from tests.availability import unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

# The read's earliest range ([end - 6 s, end - 3 s]) must start after the first scrape: rate() at a
# series' start extrapolates only half a scrape interval back and reads low there.
SCRAPES_BEFORE_READING = 9
VLLM_RATES = {"vllm:prompt_tokens_total": 50.0, "vllm:generation_tokens_total": 400.0}
SGLANG_RATES = {"sglang:prompt_tokens_total": 2000.0, "sglang:generation_tokens_total": 10.0}


def require_prometheus() -> None:
    try:
        find_binary("prometheus")
    except ToolMissingError as exc:
        unavailable(str(exc), "the live Prometheus test")


def counters(rates: dict[str, float], since: float) -> dict[str, float]:
    elapsed = time.monotonic() - since
    return {name: 100.0 + rate * elapsed for name, rate in rates.items()}


def expositions(since: float) -> dict[str, Callable[[], str]]:
    decode_gpu = FixtureGpu(H100_DECODE.index, H100_UUID, H100_DECODE.model_name, H100_DECODE.values,
                            pod=H100_DECODE.pod)  # fmt: skip
    return {
        "/h100": lambda: dcgm_exposition([decode_gpu, H100_SPARE], hostname=H100_HOST),
        "/h200": lambda: dcgm_exposition(
            [H200_PREFILL], hostname="gpu-h200-a", hostname_label="hostname", uuid_label="uuid"
        ),
        "/vllm": lambda: vllm_exposition(
            {
                **counters(VLLM_RATES, since),
                "vllm:num_requests_running": 12,
                "vllm:num_requests_waiting": 3,
                "vllm:kv_cache_usage_perc": 0.42,
            }
        ),
        "/sglang": lambda: sglang_exposition(
            {**counters(SGLANG_RATES, since), "sglang:num_running_reqs": 4, "sglang:token_usage": 0.2},
            engine_type="prefill",
        ),
    }


def wait_for_scrapes(prometheus: RunningServer, count: int, timeout_s: float = 30.0) -> None:
    query = urllib.parse.quote("min(count_over_time(up[1m]))")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = prometheus.get_json(f"/api/v1/query?query={query}")["data"]["result"]
        if result and float(result[0]["value"][1]) >= count:
            return
        time.sleep(0.25)
    raise AssertionError(f"Prometheus did not scrape {count} times in {timeout_s}s:\n{prometheus.log_tail()}")


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


def test_frames_from_a_real_prometheus() -> None:
    require_prometheus()
    since = time.monotonic()
    with ExpositionServer(expositions(since)) as server:
        target = f"127.0.0.1:{server.port}"
        jobs = [
            ScrapeJob("dcgm-exporter-h100", target, "/h100"),
            ScrapeJob("dcgm-exporter-h200", target, "/h200"),
            ScrapeJob(
                "vllm", target, "/vllm", {"namespace": "llm", "pod": "llama-decode-0", "phase": "decode"}
            ),
            ScrapeJob("sglang", target, "/sglang", {"namespace": "llm", "pod": "llama-prefill-0"}),
        ]
        with running_prometheus(prometheus_config(jobs, interval="1s")) as prometheus:
            wait_for_scrapes(prometheus, SCRAPES_BEFORE_READING)
            end = float(int(time.time() - 0.5))  # whole seconds: the grid is exact
            fleet = read_fleet(
                prometheus.url, end - 4.0, end, 1.0, role_label="phase", range_s=3.0,
                gpu_catalog=load_catalog().gpus,
            )  # fmt: skip
            gpu, engine = load_frames_from_prometheus(prometheus.url, end - 4.0, end, 1.0, range_s=3.0)
            fine = TimeGrid(end - 12.0, 0.001, 12_000)  # more points than one query may return
            with httpx.Client(timeout=10.0) as http:
                refused = http.get(
                    f"{prometheus.url}/api/v1/query_range",
                    params={"query": "vector(1)", "start": fine.start, "end": fine.end, "step": fine.step},
                )
                (one,), _ = PrometheusClient(prometheus.url, http).query_range("vector(1)", fine)
            cli = CliRunner().invoke(
                app,
                ["analyze", "--prometheus", prometheus.url, "--from", _iso(end - 4.0), "--to", _iso(end),
                 "--step", "1", "--role-label", "phase", "--json"],
            )  # fmt: skip

    assert fleet.gpu.workers == (DECODE, PREFILL)
    assert fleet.unattributed_gpus == (H100_SPARE_UUID,)
    skus = {(g.gpu_uuid, g.node, g.sku) for g in fleet.gpus if g.worker_id}
    assert skus == {(H100_UUID, H100_HOST, "H100-SXM"), (H200_UUID, "gpu-h200-a", "H200-SXM")}

    decode = fleet.gpu.worker == fleet.gpu.workers.index(DECODE)
    assert decode.sum() == (~decode).sum() == fleet.grid.n == 4
    np.testing.assert_allclose(fleet.gpu.tensor_active[decode], 0.18)
    np.testing.assert_allclose(fleet.gpu.dram_active[decode], 0.71)
    np.testing.assert_allclose(fleet.gpu.gpu_util[decode], 1.0)
    np.testing.assert_allclose(fleet.gpu.tensor_active[~decode], 0.74)
    np.testing.assert_allclose(fleet.gpu_row_mem_used_bytes[decode], 61440 * MIB)

    workers = {w.worker_id: w for w in fleet.workers}
    assert (workers[DECODE].role, workers[DECODE].role_source) == (Role.DECODE, RoleSource.POD_LABEL)
    assert (workers[PREFILL].role, workers[PREFILL].role_source) == (Role.PREFILL, RoleSource.ENGINE)
    assert (workers[DECODE].engine, workers[PREFILL].engine) == ("vllm", "sglang")
    assert workers[DECODE].model == "Qwen/Qwen3-0.6B"
    # The KV cache each engine reports holding, through a real Prometheus (last_over_time): vLLM's from the
    # labels of its cache_config_info info gauge, SGLang's max_total_num_tokens.
    assert workers[DECODE].kv_capacity_tokens == VLLM_KV_CAPACITY_TOKENS
    assert workers[PREFILL].kv_capacity_tokens == SGLANG_KV_CAPACITY_TOKENS

    e = fleet.engine
    assert e.workers == (DECODE, PREFILL)
    on_decode = e.worker == e.workers.index(DECODE)
    np.testing.assert_allclose(e.generation_tokens[on_decode], 400.0, rtol=0.15)  # tokens per 1 s window
    np.testing.assert_allclose(e.prompt_tokens[on_decode], 50.0, rtol=0.15)
    np.testing.assert_allclose(e.prompt_tokens[~on_decode], 2000.0, rtol=0.15)
    np.testing.assert_allclose(e.requests_running[on_decode], 12.0)
    np.testing.assert_allclose(e.kv_cache_usage[on_decode], 0.42)
    np.testing.assert_allclose(e.kv_cache_usage[~on_decode], 0.2)
    assert np.isnan(e.preemptions[~on_decode]).all()  # SGLang's capture has no retraction histogram
    np.testing.assert_allclose(e.preemptions[on_decode], 0.0)
    assert set(e.role[on_decode].tolist()) == {ROLES.index(Role.DECODE)}

    assert refused.status_code == 400 and "11,000 points" in refused.json()["error"]
    np.testing.assert_allclose(one.ts, fine.times(), rtol=0, atol=1e-4)  # chunks passed, joined in order
    np.testing.assert_array_equal(one.values, 1.0)

    # `phasefit analyze --prometheus URL`: the whole pipeline over the zero-agent read, nothing stored.
    assert cli.exit_code == 0, cli.output
    analysed = json.loads(cli.stdout)
    assert analysed["summary"]["fleet"]["gpus"] == 3
    assert {w["worker_id"]: w["role"] for w in analysed["summary"]["workers"]} == {
        DECODE: "decode",
        PREFILL: "prefill",
    }

    # The CLI entry point: the same frames; without role_label the decode pod's role is unknown.
    assert (len(gpu), len(engine)) == (len(fleet.gpu), len(fleet.engine))
    assert set(engine.role[engine.worker == engine.workers.index(DECODE)].tolist()) == {
        ROLES.index(Role.UNKNOWN)
    }
