"""The Prometheus HTTP adapter against a scripted Prometheus API (httpx.MockTransport): chunking under the
11,000-points limit, the order of calls, and a clear error for every way a read can fail."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from alerts.testing import free_port
from analyzer.sources.prometheus.client import (
    MAX_POINTS_PER_SERIES,
    NoSeriesError,
    PrometheusClient,
    PrometheusError,
    PrometheusResponseError,
    PrometheusUnreachableError,
    chunks,
    load_frames_from_prometheus,
    read_fleet,
)
from analyzer.sources.prometheus.series import TimeGrid
from tests.analyzer.prometheus_fixtures import matrix
from tests.analyzer.sources.prometheus.test_source import DECODE, PREFILL, two_node_answers

URL = "http://prometheus.test:9090"
Series = list[tuple[dict[str, str], Callable[[float], float]]]


class ScriptedPrometheus:
    """Answers the endpoints zero-agent mode uses, refusing more than 11,000 points like Prometheus.
    ``/api/v1/status/config`` (the external labels) is answered apart: ``config_requests``."""

    def __init__(
        self,
        series: dict[str, Series],
        *,
        list_names: bool = True,
        max_samples: int | None = None,
        external_labels: dict[str, str] | None = None,
    ) -> None:
        self.series = series
        self.list_names = list_names
        self.max_samples = max_samples  # --query.max-samples, counted here as points per answer
        self.external_labels = external_labels  # None: a querier without the config endpoint (404)
        self.requests: list[httpx.Request] = []
        self.config_requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/status/config":
            self.config_requests.append(request)
            if self.external_labels is None:
                return httpx.Response(404, text="404 page not found")
            config = yaml.safe_dump({"global": {"external_labels": self.external_labels}})
            return httpx.Response(200, json={"status": "success", "data": {"yaml": config}})
        self.requests.append(request)
        params = request.url.params
        if request.url.path == "/api/v1/label/__name__/values":
            if not self.list_names:
                return httpx.Response(404, text="404 page not found")
            return httpx.Response(200, json={"status": "success", "data": sorted(self.series)})
        assert request.url.path == "/api/v1/query_range", request.url
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        if (end - start) / step > MAX_POINTS_PER_SERIES:
            return httpx.Response(
                400,
                json={
                    "status": "error",
                    "errorType": "bad_data",
                    "error": "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing "
                    "the query resolution (?step=XX)",
                },
            )
        points = round((end - start) / step) + 1
        if self.max_samples is not None and points > self.max_samples:
            return httpx.Response(
                422,
                json={
                    "status": "error",
                    "errorType": "execution",
                    "error": "query processing would load too many samples into memory in query execution",
                },
            )
        times = start + step * np.arange(points)
        return httpx.Response(200, json=matrix(self._answer(params["query"], times)))

    def _answer(self, query: str, times: Any) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """A range function of one metric; every series whose name matches, its labels only (value 1);
        a histogram quantile or its buckets' increases (no buckets are scripted: an empty answer)."""
        listing = re.fullmatch(r'group without \(__name__\) \(\{__name__=~"(.+)"\}\)', query)
        if listing:
            pattern = re.compile(listing.group(1))
            label_sets = {
                tuple(sorted(labels.items()))
                for name, series in self.series.items()
                if pattern.fullmatch(name)
                for labels, _ in series
            }
            return [(dict(labels), [(float(t), 1.0) for t in times]) for labels in sorted(label_sets)]
        if query.startswith(("histogram_quantile(", "sum without (")):
            return []
        match = re.fullmatch(r"\w+\(([\w:]+)(\{[^}]*\})?\[\w+\]\)", query)
        assert match, query
        wanted = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        return [
            (labels, [(float(t), value(float(t))) for t in times])
            for labels, value in self.series.get(match.group(1), [])
            if all(labels.get(k) == v for k, v in wanted.items())
        ]


def constant(value: float) -> Callable[[float], float]:
    return lambda t: value


def constant_answers() -> dict[str, Series]:
    return {
        name: [(dict(labels), constant(pts[0][1])) for labels, pts in series]
        for name, series in two_node_answers().items()
    }


def client_for(prometheus: ScriptedPrometheus) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(prometheus))


T0 = datetime(2026, 1, 13, 0, 0, tzinfo=UTC)


def test_read_fleet_end_to_end_on_the_scripted_api() -> None:
    prometheus = ScriptedPrometheus(constant_answers())
    with client_for(prometheus) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=10), 60.0, client=http, role_label="role")
        assert not http.is_closed  # an injected client is the caller's to close
    assert fleet.gpu.workers == fleet.engine.workers == (DECODE, PREFILL)
    assert fleet.grid.start == T0.timestamp() + 60.0 and fleet.grid.n == 10  # window ends
    decode = fleet.engine.worker == 0
    np.testing.assert_allclose(fleet.engine.generation_tokens[decode], 400.0 * 60.0)
    first, *queries = prometheus.requests
    assert first.url.path == "/api/v1/label/__name__/values"
    asked = {q.url.params["query"] for q in queries}
    assert "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[120s])" in asked  # default range: max(step, 120 s)
    assert "rate(vllm:generation_tokens_total[120s])" in asked
    assert not any("DCGM_FI_PROF_DRAM_UTIL_RATIO" in q for q in asked)  # names absent from the server


def test_load_frames_returns_the_two_frames_and_honours_range_s() -> None:
    prometheus = ScriptedPrometheus(constant_answers())
    with client_for(prometheus) as http:
        gpu, engine = load_frames_from_prometheus(
            URL, T0.timestamp(), T0.timestamp() + 300, timedelta(seconds=30), client=http, range_s=90
        )
    assert len(gpu) == 2 * 10 and len(engine) == 2 * 10
    asked = [r.url.params["query"] for r in prometheus.requests[1:]]
    listing = 'group without (__name__) ({__name__=~"DCGM_FI_.+|DCGM_EXP_.+|dcgm_.+"})'  # instant: no range
    assert listing in asked and all("[90s]" in q for q in asked if q != listing)


def test_long_ranges_are_queried_in_chunks_under_the_points_limit() -> None:
    prometheus = ScriptedPrometheus(
        {"DCGM_FI_PROF_DRAM_ACTIVE": [({"UUID": "GPU-1"}, lambda t: (t % 97) / 100)]}
    )
    grid = TimeGrid(start=1_700_000_000.0, step=1.0, n=25_000)
    with client_for(prometheus) as http:
        (series,), _ = PrometheusClient(URL, http).query_range(
            "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[2s])", grid
        )
    assert len(prometheus.requests) == 3
    np.testing.assert_array_equal(series.ts, grid.times())
    np.testing.assert_allclose(series.values, (grid.times() % 97) / 100)
    parts = chunks(grid)
    assert [p.n for p in parts] == [11_000, 11_000, 3_000]
    assert all(b.start == a.end + grid.step for a, b in itertools.pairwise(parts))


def test_chunks_refused_for_too_many_samples_are_halved_until_they_pass() -> None:
    prometheus = ScriptedPrometheus(
        {"vllm:num_requests_running": [({"pod": "p"}, lambda t: t)]}, max_samples=300
    )
    grid = TimeGrid(start=1_700_000_000.0, step=15.0, n=1000)
    with client_for(prometheus) as http:
        (series,), _ = PrometheusClient(URL, http).query_range(
            "avg_over_time(vllm:num_requests_running[1m])", grid
        )
    np.testing.assert_array_equal(series.ts, grid.times())
    np.testing.assert_array_equal(series.values, grid.times())
    refused = [
        r
        for r in prometheus.requests
        if float(r.url.params["end"]) - float(r.url.params["start"]) >= 300 * 15
    ]
    assert refused  # the first tries were refused, then split
    with (
        client_for(ScriptedPrometheus({}, max_samples=0)) as http,
        pytest.raises(PrometheusResponseError, match="too many"),
    ):
        PrometheusClient(URL, http).query_range("up", TimeGrid(0.0, 1.0, 4))


def test_without_a_name_listing_every_alias_is_queried() -> None:
    prometheus = ScriptedPrometheus(constant_answers(), list_names=False)
    with client_for(prometheus) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=5), 60.0, client=http)
    assert len(fleet.gpus) == 3
    assert any("DCGM_FI_PROF_DRAM_UTIL_RATIO" in r.url.params.get("query", "") for r in prometheus.requests)


def test_no_dcgm_series_says_to_scrape_dcgm_exporter() -> None:
    answers = {k: v for k, v in constant_answers().items() if not k.startswith("DCGM")}
    with client_for(ScriptedPrometheus(answers)) as http, pytest.raises(NoSeriesError) as info:
        read_fleet(URL, T0, T0 + timedelta(minutes=5), 60.0, client=http)
    assert "no series found" in str(info.value) and "is dcgm-exporter scraped?" in str(info.value)
    assert "sglang, vllm" in str(info.value)
    with client_for(ScriptedPrometheus({}, list_names=False)) as http, pytest.raises(NoSeriesError):
        read_fleet(URL, T0, T0 + timedelta(minutes=5), 60.0, client=http)


def test_unreachable_url_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(PrometheusUnreachableError, match=re.escape(f"cannot reach Prometheus at {url}")):
        read_fleet(url, T0, T0 + timedelta(minutes=5), 60.0, timeout_s=2.0)


def respond(response: httpx.Response) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(lambda request: response))


@pytest.mark.parametrize(
    ("response", "error", "message"),
    [
        (httpx.Response(404, text="404 page not found"), PrometheusResponseError, "pass the server's root"),
        (httpx.Response(401, text="Unauthorized"), PrometheusResponseError, "needs credentials"),
        (httpx.Response(502, text="Bad Gateway"), PrometheusResponseError, "HTTP 502"),
        (
            httpx.Response(200, text="<html>Grafana</html>", headers={"content-type": "text/html"}),
            PrometheusResponseError,
            "not Prometheus API JSON",
        ),
        (
            httpx.Response(422, json={"status": "error", "errorType": "execution", "error": "timed out"}),
            PrometheusResponseError,
            "execution: timed out",
        ),
        (httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}}),
         PrometheusResponseError, "expected a matrix"),
    ],
)  # fmt: skip
def test_bad_answers_raise_clear_errors(
    response: httpx.Response, error: type[Exception], message: str
) -> None:
    with respond(response) as http, pytest.raises(error, match=re.escape(message)):
        PrometheusClient(URL, http).query_range("up", TimeGrid(0.0, 60.0, 3))


def test_timeouts_are_reported_as_unreachable() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with (
        httpx.Client(transport=httpx.MockTransport(slow)) as http,
        pytest.raises(PrometheusUnreachableError, match="did not answer"),
    ):
        PrometheusClient(URL, http).query_range("up", TimeGrid(0.0, 60.0, 3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": datetime(2026, 1, 13), "end": T0 + timedelta(hours=1)}, "time zone"),
        ({"start": T0, "end": T0 + timedelta(seconds=30)}, "shorter than one step"),
        ({"start": T0, "end": T0 + timedelta(hours=1), "step": 0}, "step must be positive"),
    ],
)
def test_bad_ranges_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"step": 60.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        read_fleet(URL, arguments["start"], arguments["end"], arguments["step"])


def test_a_url_that_is_not_http_is_refused() -> None:
    with httpx.Client() as http, pytest.raises(PrometheusError, match="not an http"):
        PrometheusClient("prometheus:9090", http)
