"""Zero-agent latency histograms against a real Prometheus (Debian's ``prometheus``) on loopback: a pool's p90
from the merged per-worker histograms the read returns is the p90 Prometheus itself computes over the same
workers and windows, ``histogram_quantile(0.9, sum by (le) (increase(<name>_bucket[<window>])))``.

Two vLLM workers (the real capture, its histograms advancing) observe different first-token latencies at
different rates: 4 per second at 0.3 s and 1 per second at 1.5 s, so the pool's p90 lies in the slower
worker's bucket and no mean of the workers' p90s gives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import numpy as np
import pytest

from alerts.loopback_http import ExpositionServer
from alerts.testing import ScrapeJob, prometheus_config, running_prometheus
from analyzer.sources.prometheus.client import read_fleet
from analyzer.sources.prometheus.series import parse_matrix
from analyzer.telemetry.latency_cells import as_counts
from fleet import histograms
from tests.analyzer.prometheus_fixtures import add_observations, dcgm_exposition, vllm_exposition
from tests.analyzer.sources.prometheus.test_live import require_prometheus, wait_for_scrapes
from tests.analyzer.sources.prometheus.test_source import H100_DECODE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

TTFT = "vllm:time_to_first_token_seconds"
WORKERS = {"vllm-fast": (0.3, 4.0), "vllm-slow": (1.5, 1.0)}  # pod: (TTFT in s, observations per s)
RANGE_S = 3.0
SCRAPES_BEFORE_READING = 9  # the windows read start after the series' first scrapes (no young series)


def expositions(since: float) -> dict[str, Callable[[], str]]:
    def vllm(ttft_s: float, rate: float) -> Callable[[], str]:
        def text() -> str:
            elapsed = time.monotonic() - since
            counters = {"vllm:generation_tokens_total": 100.0 + 400.0 * elapsed}
            return add_observations(vllm_exposition(counters), TTFT, ttft_s, rate * elapsed)

        return text

    paths = {f"/{pod}": vllm(*observed) for pod, observed in WORKERS.items()}
    paths["/dcgm"] = lambda: dcgm_exposition([H100_DECODE], hostname="gpu-node-a")
    return paths


def test_pool_p90_from_merged_histograms_is_prometheus_own() -> None:
    require_prometheus()
    since = time.monotonic()
    with ExpositionServer(expositions(since)) as server:
        target = f"127.0.0.1:{server.port}"
        jobs = [ScrapeJob("dcgm-exporter", target, "/dcgm")]
        jobs += [ScrapeJob(pod, target, f"/{pod}", {"namespace": "llm", "pod": pod}) for pod in WORKERS]
        with running_prometheus(prometheus_config(jobs, interval="1s")) as prometheus:
            wait_for_scrapes(prometheus, SCRAPES_BEFORE_READING)
            end = float(int(time.time()) - 2)  # whole seconds, every scrape up to it stored
            fleet = read_fleet(prometheus.url, end - 4.0, end, 1.0, range_s=RANGE_S)
            grid = fleet.grid
            selector = f'{TTFT}_bucket{{pod=~"{"|".join(WORKERS)}"}}'
            promql = f"histogram_quantile(0.9, sum by (le) (increase({selector}[{RANGE_S:.0f}s])))"
            with httpx.Client(timeout=10.0) as http:
                answer = http.get(
                    f"{prometheus.url}/api/v1/query_range",
                    params={"query": promql, "start": grid.start, "end": grid.end, "step": grid.step},
                )
    (own,), _ = parse_matrix(answer.json())

    assert fleet.engine.workers == tuple(f"llm/{pod}" for pod in WORKERS)
    column = [as_counts(h) for h in fleet.engine_row_histograms["ttft_histogram"]]
    assert all(h is not None for h in column)  # every window observed something, in every worker
    pool: dict[float, float | None] = {}
    for t in grid.times().tolist():
        merged = histograms.merged(column[i] for i in np.flatnonzero(fleet.engine.ts == t))
        pool[t] = histograms.quantile(0.9, merged)
    assert sorted(pool) == own.ts.tolist()
    assert None not in pool.values()
    np.testing.assert_allclose(
        [float(pool[t] or 0.0) for t in own.ts.tolist()], own.values.tolist(), rtol=1e-6
    )
    # 5 observations a second, the 90th percentile's rank in the slow worker's (1, 2.5] bucket: about 1.75 s,
    # where the mean of the workers' own p90s (about 0.49 s and 2.35 s) says about 1.4 s.
    np.testing.assert_allclose(own.values, 1.75, rtol=0.1)
    for pod, (_, rate) in WORKERS.items():
        rows = np.flatnonzero(fleet.engine.worker == fleet.engine.workers.index(f"llm/{pod}"))
        counted = [float(h.sum()) for h in (column[i] for i in rows) if h is not None]
        np.testing.assert_allclose(counted, rate * grid.step, rtol=0.15)  # observations per step
