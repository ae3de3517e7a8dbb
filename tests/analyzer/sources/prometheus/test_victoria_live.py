"""Zero-agent mode against a real VictoriaMetrics (Debian's ``victoria-metrics``) on loopback.

VictoriaMetrics scrapes, once a second, the expositions the live Prometheus test serves (real dcgm-exporter,
vLLM and SGLang captures; pod and role labels from the scrape jobs, as Kubernetes relabelling puts them) with
``external_labels: {cluster: east}``, which its scraper adds to every series. Two servers scrape them: one
with its default query limits, one with limits a fleet of thousands of GPUs would meet (a few series and a few
dozen points per query), which zero-agent mode must read through by splitting its queries by time and by
label. Both must give what Prometheus gives.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from alerts.loopback_http import ExpositionServer
from alerts.testing import ScrapeJob
from analyzer.sources.prometheus.client import read_fleet
from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.split import QueryLimits
from fleet.catalog import load_catalog
from fleet.contract import Role, RoleSource
from phasefit.cli import app
from tests.analyzer.prometheus_fixtures import (
    H100_NAME,
    H100_SPARE_UUID,
    H200_UUID,
    SGLANG_KV_CAPACITY_TOKENS,
    VLLM_KV_CAPACITY_TOKENS,
    FixtureGpu,
    dcgm_exposition,
)
from tests.analyzer.sources.prometheus.test_live import SCRAPES_BEFORE_READING, expositions, wait_for_scrapes
from tests.analyzer.sources.prometheus.test_source import DECODE, H100_HOST, H100_UUID, PREFILL
from tests.analyzer.victoria import BINARY, PACKAGE, running_victoria_metrics, scrape_config
from tests.availability import require_executable

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

# A second H100 node whose dcgm-exporter lists five idle GPUs no pod holds: on the tight server only.
SPARES = [
    FixtureGpu(i, f"GPU-5f0e{i:04x}-0000-4000-8000-00000000000{i}", H100_NAME,
               {"sm_active": 0.0, "tensor_active": 0.0, "dram_active": 0.0, "gpu_util": 0})
    for i in range(5)
]  # fmt: skip
# Limits a fleet of thousands of GPUs meets at the defaults: the dcgm-exporter listing selects 34 series
# (more than 30), a read at a 0.25 s step 32 points per series (more than 12). One worker's histogram (24
# bucket series, which no split may separate) stays under.
TIGHT = ("-search.maxUniqueTimeseries=30", "-search.maxPointsPerTimeseries=12")


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


def assert_same_fleet_as_prometheus(fleet: PrometheusFleet, *, spares: int = 0) -> None:
    """What test_prometheus_live asserts of a real Prometheus, and the cluster from the external label."""
    assert fleet.gpu.workers == (DECODE, PREFILL)
    assert sorted(fleet.unattributed_gpus) == sorted([H100_SPARE_UUID, *(g.uuid for g in SPARES[:spares])])
    skus = {(g.gpu_uuid, g.node, g.sku) for g in fleet.gpus if g.worker_id}
    assert skus == {(H100_UUID, H100_HOST, "H100-SXM"), (H200_UUID, "gpu-h200-a", "H200-SXM")}
    decode = fleet.gpu.worker == fleet.gpu.workers.index(DECODE)
    assert decode.sum() == (~decode).sum() == fleet.grid.n
    np.testing.assert_allclose(fleet.gpu.tensor_active[decode], 0.18)
    np.testing.assert_allclose(fleet.gpu.dram_active[decode], 0.71)
    np.testing.assert_allclose(fleet.gpu.tensor_active[~decode], 0.74)

    workers = {w.worker_id: w for w in fleet.workers}
    assert (workers[DECODE].role, workers[DECODE].role_source) == (Role.DECODE, RoleSource.POD_LABEL)
    assert (workers[PREFILL].role, workers[PREFILL].role_source) == (Role.PREFILL, RoleSource.ENGINE)
    assert (workers[DECODE].engine, workers[PREFILL].engine) == ("vllm", "sglang")
    assert workers[DECODE].model == "Qwen/Qwen3-0.6B"
    assert workers[DECODE].kv_capacity_tokens == VLLM_KV_CAPACITY_TOKENS  # last_over_time, labels and all
    assert workers[PREFILL].kv_capacity_tokens == SGLANG_KV_CAPACITY_TOKENS
    assert {w.cluster for w in fleet.workers} == {"east"}  # the scraper's external label, on every series
    assert not any("external labels are unknown" in note for note in fleet.notes)

    e = fleet.engine
    on_decode = e.worker == e.workers.index(DECODE)
    assert on_decode.sum() == (~on_decode).sum() == fleet.grid.n
    per_s = 1.0 / fleet.grid.step  # counts per window -> per second
    np.testing.assert_allclose(e.generation_tokens[on_decode] * per_s, 400.0, rtol=0.15)
    np.testing.assert_allclose(e.prompt_tokens[on_decode] * per_s, 50.0, rtol=0.15)
    np.testing.assert_allclose(e.prompt_tokens[~on_decode] * per_s, 2000.0, rtol=0.15)
    np.testing.assert_allclose(e.requests_running[on_decode], 12.0)
    np.testing.assert_allclose(e.kv_cache_usage[on_decode], 0.42)
    np.testing.assert_allclose(e.kv_cache_usage[~on_decode], 0.2)


def test_zero_agent_mode_reads_a_real_victoria_metrics(tmp_path: Path) -> None:
    binary = require_executable(BINARY, PACKAGE, "the live VictoriaMetrics test")
    catalog = load_catalog().gpus
    paths = expositions(time.monotonic())
    paths["/h100b"] = lambda: dcgm_exposition(SPARES, hostname="gpu-h100-b")
    refusals: list[str] = []

    def record(response: httpx.Response) -> None:
        if response.status_code != 200:
            response.read()
            refusals.append(response.text)

    with ExpositionServer(paths) as server, contextlib.ExitStack() as stack:
        target = f"127.0.0.1:{server.port}"
        jobs = [
            ScrapeJob("dcgm-exporter-h100", target, "/h100"),
            ScrapeJob("dcgm-exporter-h200", target, "/h200"),
            ScrapeJob(
                "vllm", target, "/vllm", {"namespace": "llm", "pod": "llama-decode-0", "phase": "decode"}
            ),
            ScrapeJob("sglang", target, "/sglang", {"namespace": "llm", "pod": "llama-prefill-0"}),
        ]
        spares = ScrapeJob("dcgm-exporter-h100b", target, "/h100b")
        east = {"cluster": "east"}
        plain = stack.enter_context(
            running_victoria_metrics(binary, tmp_path / "plain", scrape_config(jobs, external_labels=east))
        )
        tight = stack.enter_context(
            running_victoria_metrics(
                binary, tmp_path / "tight", scrape_config([*jobs, spares], external_labels=east), flags=TIGHT
            )
        )
        wait_for_scrapes(plain, SCRAPES_BEFORE_READING)
        wait_for_scrapes(tight, SCRAPES_BEFORE_READING + 4)  # its read reaches 4 s further back
        end = float(int(time.time() - 0.5))  # whole seconds: the grids are exact
        http = stack.enter_context(httpx.Client(timeout=10.0, event_hooks={"response": [record]}))
        fleet = read_fleet(plain.url, end - 4.0, end, 1.0, role_label="phase", range_s=3.0,
                           gpu_catalog=catalog, limits=QueryLimits(), client=http)  # fmt: skip
        # phasefit's own limits low: the first answers are split by label values for the chunks after them.
        small = QueryLimits(max_series_per_query=2, max_samples_per_query=4)
        sharded = read_fleet(plain.url, end - 4.0, end, 1.0, role_label="phase", range_s=3.0,
                             gpu_catalog=catalog, limits=small, client=http)  # fmt: skip
        assert not refusals, refusals
        # The tight server refuses phasefit's default chunks: halved, split by label, until it answers.
        split = read_fleet(tight.url, end - 8.0, end, 0.25, role_label="phase", range_s=3.0,
                           gpu_catalog=catalog, limits=QueryLimits(), client=http)  # fmt: skip
        cli = CliRunner().invoke(
            app,
            ["analyze", "--prometheus", tight.url, "--from", _iso(end - 4.0), "--to", _iso(end),
             "--step", "1", "--role-label", "phase", "--json"],
        )  # fmt: skip

    assert fleet.grid.n == 4
    assert_same_fleet_as_prometheus(fleet)
    assert_same_fleet_as_prometheus(sharded)
    assert split.grid.n == 32 and split.grid.step == 0.25
    assert_same_fleet_as_prometheus(split, spares=len(SPARES))
    assert any("-search.maxPointsPerTimeseries=12" in r for r in refusals), refusals
    assert any("matching timeseries exceeds 30" in r for r in refusals), refusals

    # `phasefit analyze --prometheus URL` against the tight server: the whole pipeline, nothing stored.
    assert cli.exit_code == 0, cli.output
    analysed = json.loads(cli.stdout)
    assert analysed["summary"]["fleet"]["gpus"] == 3 + len(SPARES)
    assert {w["worker_id"]: w["role"] for w in analysed["summary"]["workers"]} == {
        DECODE: "decode",
        PREFILL: "prefill",
    }
