"""Zero-agent queries split to stay under the stores' limits (analyzer.sources.prometheus.split): the pure
parts (time
chunks, the exact merge of their answers, label-value shards, error messages, the settings), then the whole
read against a scripted store that refuses like Prometheus and VictoriaMetrics do (their real messages)."""

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

from analyzer.settings import AnalyzerSettings
from analyzer.sources.prometheus.client import (
    PrometheusClient,
    PrometheusResponseError,
    read_fleet,
    split_labels,
)
from analyzer.sources.prometheus.labels import Family
from analyzer.sources.prometheus.metrics import ALL_QUERIES, GPU_QUERIES, MetricQuery, Reduce
from analyzer.sources.prometheus.series import RangeSeries, TimeGrid
from analyzer.sources.prometheus.split import (
    DEFAULT_MAX_POINTS,
    LimitKind,
    QueryLimits,
    Shard,
    aligned_grid,
    chunks,
    group_values,
    halves,
    limit_kind,
    merge_parts,
    merge_series,
    promql_string,
    regex_matcher,
    resplit,
    split_shard,
)
from tests.analyzer.prometheus_fixtures import matrix
from tests.analyzer.sources.prometheus.test_client import constant_answers

URL = "http://store.test:8428"
Series = list[tuple[dict[str, str], Callable[[float], float]]]
Points = list[tuple[float, float]]
Values = np.ndarray[Any, np.dtype[np.float64]]
T0 = datetime(2026, 1, 13, 0, 0, tzinfo=UTC)
DRAM = next(q for q in GPU_QUERIES if q.name == "DCGM_FI_PROF_DRAM_ACTIVE")

# The stores' own messages, verbatim: Prometheus 2.42 (web/api/v1/api.go, promql/engine.go) and
# VictoriaMetrics 1.79.5 (Debian's victoria-metrics, run with tiny -search.* limits).
PROMETHEUS_POINTS = (
    "exceeded maximum resolution of 11,000 points per timeseries. "
    "Try decreasing the query resolution (?step=XX)"
)
PROMETHEUS_SAMPLES = "query processing would load too many samples into memory in query execution"
VM_POINTS = (
    'error when executing query="avg_over_time(g[3s])" on the time range (start=1796150465000, '
    "end=1796150494000, step=1000): too many points for the given step=1000, start=1796150465000 and "
    "end=1796150494000: 30; cannot exceed -search.maxPointsPerTimeseries=20"
)
VM_SERIES = (
    'error when executing query="group({__name__=~\\"g|c_total\\"})" on the time range (...): cannot execute '
    'query: search error after reading 0 data blocks: error when searching for tagFilters=[{__name__=~"g|'
    'c_total"}] on the time range [...]: error when searching tsids: the number of matching timeseries '
    "exceeds 1; either narrow down the search or increase -search.max* command-line flag values at vmselect; "
    "see https://docs.victoriametrics.com/#resource-usage-limits"
)


# --- time chunks and their merge ---------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "max_points"), [(1, 1), (7, 3), (25_000, 11_000), (20_160, 10_000), (9, 9)])
def test_chunks_tile_the_grid_exactly(n: int, max_points: int) -> None:
    grid = TimeGrid(1_700_000_000.0, 30.0, n)
    parts = chunks(grid, max_points)
    assert all(1 <= p.n <= max_points for p in parts)
    assert all(b.start == a.end + grid.step for a, b in itertools.pairwise(parts))  # no gap, no overlap
    np.testing.assert_array_equal(np.concatenate([p.times() for p in parts]), grid.times())


def test_halves_tile_their_chunk() -> None:
    part = TimeGrid(100.0, 15.0, 7)
    first, second = halves(part)
    np.testing.assert_array_equal(np.concatenate([first.times(), second.times()]), part.times())
    with pytest.raises(ValueError, match="one time"):
        halves(TimeGrid(100.0, 15.0, 1))


def _answer(labels: dict[str, str], part: TimeGrid, value: Callable[[float], float]) -> RangeSeries:
    ts = part.times()
    return RangeSeries(labels, ts, np.array([value(t) for t in ts]))


def test_chunk_answers_merge_to_every_step_once_in_order() -> None:
    grid = TimeGrid(1_700_000_000.0, 60.0, 1_000)

    def value(t: float) -> float:
        return (t % 977) / 1000

    parts = [_answer({"UUID": "GPU-1"}, p, value) for p in chunks(grid, 128)]
    merged = merge_parts(list(reversed(parts)))  # whatever order the chunks came back in
    np.testing.assert_array_equal(merged.ts, grid.times())
    np.testing.assert_array_equal(merged.values, [value(t) for t in grid.times()])


def test_a_step_two_answers_share_is_kept_once_with_the_first_value() -> None:
    # A store that evaluates a chunk's end and the next chunk's start at the same time (an inclusive edge).
    first = RangeSeries({"a": "1"}, np.array([0.0, 60.0, 120.0]), np.array([1.0, 2.0, 3.0]))
    second = RangeSeries({"a": "1"}, np.array([120.0, 180.0]), np.array([30.0, 4.0]))
    merged = merge_parts([first, second])
    np.testing.assert_array_equal(merged.ts, [0.0, 60.0, 120.0, 180.0])
    np.testing.assert_array_equal(merged.values, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="no parts"):
        merge_parts([])


def test_series_merge_per_label_set_across_chunks_and_shards() -> None:
    grid = TimeGrid(0.0, 1.0, 10)
    early, late = chunks(grid, 6)
    answers = [
        _answer({"UUID": "a"}, early, float),
        _answer({"UUID": "b"}, early, float),
        _answer({"UUID": "a"}, late, float),
        _answer({"UUID": "c"}, late, float),  # born in the second chunk
    ]
    merged = {s.labels["UUID"]: s for s in merge_series(answers)}
    assert list(merged) == ["a", "b", "c"]
    np.testing.assert_array_equal(merged["a"].ts, grid.times())
    np.testing.assert_array_equal(merged["b"].ts, early.times())
    np.testing.assert_array_equal(merged["c"].ts, late.times())


def test_the_grid_ends_on_multiples_of_the_step() -> None:
    grid = aligned_grid(1_000.0, 2_000.0, 300.0)
    assert grid is not None
    assert (grid.start, grid.n, grid.end) == (1_500.0, 2, 1_800.0)  # windows (1200, 1500] and (1500, 1800]
    assert aligned_grid(1_000.0, 1_100.0, 300.0) is None  # no whole aligned window
    fine = aligned_grid(1_700_000_000.123, 1_700_000_010.0, 0.25)
    assert fine is not None and fine.start == 1_700_000_000.5 and fine.end == 1_700_000_010.0


# --- limits and refusals -----------------------------------------------------------------------------------


def test_a_week_at_a_fine_step_is_more_than_one_query_may_ask() -> None:
    week = 7 * 86_400
    assert week / 55 <= 11_000 < week / 54  # Prometheus refuses a week at steps under 55 s in one query
    limits = QueryLimits()
    assert limits.max_points_per_series == DEFAULT_MAX_POINTS < 11_000
    assert limits.points_for(1, 30.0) == 10_000
    assert limits.points_for(10_000, 30.0) == 500  # 5,000,000 answer points
    assert limits.points_for(10**9, 30.0) == 1
    short = QueryLimits(max_query_length_s=3_600.0)
    assert short.points_for(1, 60.0, range_s=120.0) == 59  # 58 steps + the 120 s window <= 1 h
    assert short.points_for(1, 60.0, range_s=7_200.0) == 1


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (PROMETHEUS_POINTS, LimitKind.POINTS),
        (PROMETHEUS_SAMPLES, LimitKind.SAMPLES),
        (VM_POINTS, LimitKind.POINTS),
        (VM_SERIES, LimitKind.SERIES),
        ("cannot select more than -search.maxSamplesPerQuery=1000000000 samples", LimitKind.SAMPLES),
        ("the query exceeded the maximum number of series (limit: 100 series) "
         "(err-mimir-max-series-per-query)", LimitKind.SERIES),
        ("the query exceeded the maximum number of chunks (limit: 2000000 chunks) (err-mimir-max-chunks-per-"
         "query)", LimitKind.SAMPLES),
        ("the query time range exceeds the limit (query length: 721h, limit: 720h) "
         "(err-mimir-max-query-length)", LimitKind.LENGTH),
        ("rpc error: code = Aborted desc = exceeded series limit: limit 10 violated (got 11)",
         LimitKind.SERIES),
        ("query timed out in expression evaluation", LimitKind.TIMEOUT),
        ("parse error: unexpected character", None),
        ("HTTP 502: Bad Gateway", None),
    ],
)  # fmt: skip
def test_refusals_are_told_apart_by_their_message(message: str, kind: LimitKind | None) -> None:
    assert limit_kind(message) is kind


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="max_series_per_query"):
        QueryLimits(max_series_per_query=0)
    with pytest.raises(ValueError, match="max_query_length_s"):
        QueryLimits(max_query_length_s=0.0)


def test_settings_carry_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AnalyzerSettings().query_limits() == QueryLimits()
    monkeypatch.setenv("PHASEFIT_ANALYZER_PROMETHEUS_MAX_POINTS_PER_SERIES", "30000")
    monkeypatch.setenv("PHASEFIT_ANALYZER_PROMETHEUS_MAX_SERIES_PER_QUERY", "250000")
    monkeypatch.setenv("PHASEFIT_ANALYZER_PROMETHEUS_MAX_SAMPLES_PER_QUERY", "20000000")
    monkeypatch.setenv("PHASEFIT_ANALYZER_PROMETHEUS_MAX_QUERY_LENGTH_S", "86400")
    monkeypatch.setenv("PHASEFIT_ANALYZER_PROMETHEUS_TIMEOUT_S", "120")
    assert AnalyzerSettings().query_limits() == QueryLimits(30_000, 250_000, 20_000_000, 86_400.0, 120.0)


# --- label-value shards ------------------------------------------------------------------------------------


def _promql_unquote(literal: str) -> str:
    assert literal.startswith('"') and literal.endswith('"'), literal
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), literal[1:-1])


def _matches(matcher: str, value: str) -> bool:
    _, pattern = matcher.split("=~", 1)
    return re.fullmatch(_promql_unquote(pattern), value) is not None


def test_shards_partition_the_label_values_and_series_without_the_label() -> None:
    values = [
        "ip-10-0-37-142.ec2.internal",
        "gpu-a|b",
        'quote"d',
        "back\\slash",
        "(paren)",
        "a.b",
        "a-b",
        "x y",
    ]
    shards = split_shard(Shard(), "node", ["", *values], 3)  # "": the series without the label
    assert len(shards) == 3 and all(s.labels == ("node",) for s in shards)
    for value in [*values, ""]:
        assert sum(_matches(s.matchers[0], value) for s in shards) == 1, value
    assert not any(_matches(s.matchers[0], "a_b") or _matches(s.matchers[0], "aXb") for s in shards)
    # Split again by the same label: each shard's own values, the series without the label only once.
    finer = [child for shard in shards for child in resplit(shard, 2) or [shard]]
    assert len(finer) > len(shards)
    for value in [*values, ""]:
        assert sum(_matches(s.matchers[0], value) for s in finer) == 1, value
    assert resplit(Shard(('node=~"a"',), ("node",), ("a",)), 2) is None
    nested = split_shard(shards[0], "instance", ["10.0.0.1:9400", "10.0.0.2:9400"], 2)
    assert all(s.matchers[0] == shards[0].matchers[0] and len(s.matchers) == 2 for s in nested)


def test_groups_stay_short_enough_for_mimir_sharding_and_vm_query_length() -> None:
    values = [f"pod-{i:05d}-{'x' * 40}" for i in range(400)]
    groups = group_values(values, 2, max_bytes=3_000)
    assert len(groups) > 2 and sorted(v for g in groups for v in g if v) == sorted(values)
    assert all(len(regex_matcher("pod", g)) < 3_100 for g in groups)
    assert group_values([], 4) == []
    assert group_values([""], 4) == [("",)]
    assert group_values(["", "a"], 2) == [("",), ("a",)]
    assert group_values(["", "a", "b", "c"], 2) == [("", "a", "b"), ("c",)]
    assert promql_string('a"b\\c') == '"a\\"b\\\\c"'


def test_queries_take_a_shards_matchers_into_their_selector() -> None:
    shard = ('node=~"|a|b"',)
    xid = next(q for q in GPU_QUERIES if q.matchers)
    assert (
        xid.promql(60.0, shard)
        == f'max_over_time({xid.name}{{{xid.matchers.strip("{}")},node=~"|a|b"}}[60s])'
    )
    assert DRAM.promql(60.0, shard) == 'avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE{node=~"|a|b"}[60s])'
    assert DRAM.promql(60.0) == "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[60s])"
    present = next(q for q in ALL_QUERIES if q.reduce is Reduce.PRESENT and q.family is Family.GPU)
    assert (
        present.promql(60.0, shard)
        == f'group without (__name__) ({{__name__=~"{present.name}",node=~"|a|b"}})'
    )
    quantile = next(q for q in ALL_QUERIES if q.reduce is Reduce.QUANTILE)
    assert f'rate({quantile.name}_bucket{{node=~"|a|b"}}[60s])' in quantile.promql(60.0, shard)
    assert split_labels("region")[:2] == ("region", "namespace")
    assert split_labels("engine")[0] == "namespace"  # a label the histogram queries sum away: never


# --- a store that refuses ----------------------------------------------------------------------------------

_MATCHER = re.compile(r'([\w]+)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')


class Store:
    """The query API of a store with limits, for the query shapes zero-agent mode sends: Prometheus's 11,000
    points rule, VictoriaMetrics' -search.maxPointsPerTimeseries (``max_points``) and
    -search.maxUniqueTimeseries (``max_series``: the series a query or a matched label-values listing
    selects), and a samples limit on the answer's points (``max_samples``), each refused with the store's own
    message. ``config``: the YAML /api/v1/status/config serves (None: 404, as Thanos and Mimir)."""

    def __init__(
        self,
        series: dict[str, Series],
        *,
        max_points: int | None = None,
        max_series: int | None = None,
        max_samples: int | None = None,
        config: str | None = None,
    ) -> None:
        self.series = series
        self.max_points, self.max_series, self.max_samples = max_points, max_series, max_samples
        self.config = config
        self.requests: list[httpx.Request] = []
        self.answered: list[tuple[str, int, int]] = []  # (query, points, series) of each answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, params = request.url.path, request.url.params
        if path == "/api/v1/status/config":
            if self.config is None:
                return httpx.Response(404, text="404 page not found")
            return httpx.Response(200, json={"status": "success", "data": {"yaml": self.config}})
        if path == "/api/v1/label/__name__/values":
            return httpx.Response(200, json={"status": "success", "data": sorted(self.series)})
        label_values = re.fullmatch(r"/api/v1/label/(\w+)/values", path)
        if label_values:
            matched = params.get_list("match[]")
            everything = [labels for found in self.series.values() for labels, _ in found]
            found = [labels for labels, _ in self.select(matched[0])] if matched else everything
            if matched and self.max_series is not None and len(found) > self.max_series:
                return self.refuse(422, VM_SERIES.replace("exceeds 1", f"exceeds {self.max_series}"))
            label = label_values.group(1)
            values = sorted({labels[label] for labels in found if label in labels})
            return httpx.Response(200, json={"status": "success", "data": values})
        assert path == "/api/v1/query_range", path
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        if (end - start) / step > 11_000:
            return self.refuse(400, PROMETHEUS_POINTS)
        points = round((end - start) / step) + 1
        if self.max_points is not None and points > self.max_points:
            return self.refuse(422, VM_POINTS.replace("=20", f"={self.max_points}"))
        query = params["query"]
        selected, answer = self.evaluate(query, start + step * np.arange(points))
        if self.max_series is not None and selected > self.max_series:
            return self.refuse(422, VM_SERIES.replace("exceeds 1", f"exceeds {self.max_series}"))
        if self.max_samples is not None and len(answer) * points > self.max_samples:
            return self.refuse(422, PROMETHEUS_SAMPLES)
        self.answered.append((query, points, len(answer)))
        return httpx.Response(200, json=matrix(answer))

    @staticmethod
    def refuse(status: int, message: str) -> httpx.Response:
        return httpx.Response(status, json={"status": "error", "errorType": "execution", "error": message})

    def select(self, selector: str) -> list[tuple[dict[str, str], Callable[[float], float]]]:
        """The series a selector (``name{matchers}`` or ``{__name__=~"...", matchers}``) selects."""
        parsed = re.fullmatch(r"([\w:]*)(?:\{(.*)\})?", selector)
        assert parsed, selector
        matchers = [(k, op, _promql_unquote(v)) for k, op, v in _MATCHER.findall(parsed.group(2) or "")]
        out = []
        for name, found in self.series.items():
            for labels, value in found:
                full = {"__name__": name, **labels}
                if parsed.group(1) and name != parsed.group(1):
                    continue
                if all(_holds(full.get(k, ""), op, v) for k, op, v in matchers):
                    out.append((full, value))
        return out

    def evaluate(
        self, query: str, times: Any
    ) -> tuple[int, list[tuple[dict[str, str], list[tuple[float, float]]]]]:
        """(series selected, the answer): a range function of one selector, labels without the name; the
        label-only listing (``group without (__name__)``); a histogram quantile or its buckets' increases
        (no buckets scripted)."""
        if query.startswith(("histogram_quantile(", "sum without (")):
            return 0, []
        listing = re.fullmatch(r"group without \(__name__\) \((\{.*\})\)", query)
        function = re.fullmatch(r"\w+\((.+)\[\w+\]\)", query)
        assert listing or function, query
        selected = self.select((listing or function).group(1))  # type: ignore[union-attr]
        answer: dict[tuple[tuple[str, str], ...], Points] = {}
        for labels, value in selected:
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
            answer[key] = [(float(t), 1.0 if listing else value(float(t))) for t in times]
        return len(selected), [(dict(k), v) for k, v in answer.items()]


def _holds(value: str, op: str, expected: str) -> bool:
    if op in ("=~", "!~"):
        return (re.fullmatch(expected, value) is not None) == (op == "=~")
    return (value == expected) == (op == "=")


def _dram(offset: int) -> Callable[[float], float]:
    return lambda t: ((t / 60 + offset) % 100) / 100


def gpus(nodes: int, per_node: int) -> Series:
    """DCGM_FI_PROF_DRAM_ACTIVE of ``nodes`` x ``per_node`` GPUs, each dcgm-exporter its own target."""
    return [
        (
            {"UUID": f"GPU-{n}-{g}", "gpu": str(g), "Hostname": f"node-{n}", "instance": f"10.0.0.{n}:9400",
             "modelName": "NVIDIA H100 80GB HBM3"},
            _dram(n * 7 + g),
        )
        for n in range(nodes)
        for g in range(per_node)
    ]  # fmt: skip


def read(store: Store, query: MetricQuery, grid: TimeGrid, limits: QueryLimits) -> list[RangeSeries]:
    with httpx.Client(transport=httpx.MockTransport(store)) as http:
        series, _ = PrometheusClient(
            URL, http, limits=limits, split_labels=split_labels("cluster")
        ).query_metric(query, 120.0, grid)
    return series


def reference(series: Series, grid: TimeGrid) -> dict[str, Values]:
    return {labels["UUID"]: np.array([value(t) for t in grid.times()]) for labels, value in series}


def assert_complete(
    found: list[RangeSeries], expected: dict[str, np.ndarray[Any, Any]], grid: TimeGrid
) -> None:
    by_uuid = {s.labels["UUID"]: s for s in found}
    assert sorted(by_uuid) == sorted(expected) and len(found) == len(expected)
    for uuid, values in expected.items():
        np.testing.assert_array_equal(by_uuid[uuid].ts, grid.times())  # every step once, in order
        np.testing.assert_array_equal(by_uuid[uuid].values, values)


def test_a_week_at_a_30_s_step_is_read_in_chunks_under_every_limit() -> None:
    series = gpus(2, 4)
    store = Store({DRAM.name: series})
    week = TimeGrid(1_767_225_600.0, 30.0, 7 * 2_880)  # 20,160 points
    found = read(store, DRAM, week, QueryLimits())
    assert_complete(found, reference(series, week), week)
    points = [p for _, p, _ in store.answered]
    assert points == [500, 10_000, 9_660]  # the first sized for 10,000 series; then for the 8 it held
    assert max(points) <= DEFAULT_MAX_POINTS


def test_a_query_holding_too_many_series_is_split_by_a_label_for_the_chunks_after_it() -> None:
    series = gpus(6, 8)  # 48 series on 6 nodes
    store = Store({DRAM.name: series})
    grid = TimeGrid(1_767_225_600.0, 60.0, 100)
    found = read(store, DRAM, grid, QueryLimits(max_series_per_query=20, max_samples_per_query=600))
    assert_complete(found, reference(series, grid), grid)
    first, *rest = store.answered
    assert first[1:] == (30, 48)  # 600 / 20 points; the answer says 48 series: 3 shards for the rest
    assert rest and all(n <= 20 for _, _, n in rest)
    assert {re.search(r"\{(\w+)=~", q).group(1) for q, _, _ in rest} == {"Hostname"}  # type: ignore[union-attr]
    asked = [r.url.path for r in store.requests if "/label/" in r.url.path]
    assert asked[-1] == "/api/v1/label/Hostname/values"  # cluster and namespace: no values to split by


def test_a_store_refusing_the_series_gets_shards_down_to_its_limit() -> None:
    # VictoriaMetrics with -search.maxUniqueTimeseries=10: the query, and the label values it would match,
    # are refused; the label's values on any series still split it.
    series = gpus(8, 4)
    store = Store({DRAM.name: series}, max_series=10)
    grid = TimeGrid(1_767_225_600.0, 60.0, 50)
    found = read(store, DRAM, grid, QueryLimits())
    assert_complete(found, reference(series, grid), grid)
    assert all(n <= 10 for _, _, n in store.answered)
    listed = [r for r in store.requests if "/label/" in r.url.path]
    assert any("match[]" not in r.url.params for r in listed)  # the fallback listing


def test_a_store_refusing_the_points_gets_halved_chunks() -> None:
    series = gpus(1, 2)
    store = Store({DRAM.name: series}, max_points=40)  # VictoriaMetrics -search.maxPointsPerTimeseries=40
    grid = TimeGrid(1_767_225_600.0, 60.0, 300)
    found = read(store, DRAM, grid, QueryLimits())
    assert_complete(found, reference(series, grid), grid)
    assert max(p for _, p, _ in store.answered) <= 40


def test_a_refusal_for_points_holds_for_the_queries_after_it() -> None:
    store = Store({DRAM.name: gpus(1, 2), "DCGM_FI_DEV_GPU_UTIL": gpus(1, 2)}, max_points=40)
    util = next(q for q in GPU_QUERIES if q.name == "DCGM_FI_DEV_GPU_UTIL")
    grid = TimeGrid(1_767_225_600.0, 60.0, 300)
    with httpx.Client(transport=httpx.MockTransport(store)) as http:
        client = PrometheusClient(URL, http, limits=QueryLimits())
        client.query_metric(DRAM, 120.0, grid)
        asked = len(store.requests)
        assert asked > len(store.answered)  # refused, halved down to 37 points
        client.query_metric(util, 120.0, grid)
    assert client.points_cap == 37
    assert len(store.requests) - asked == 9  # ceil(300 / 37) chunks, none refused


def test_a_store_refusing_the_samples_gets_shorter_chunks() -> None:
    series = gpus(2, 5)  # 10 series
    store = Store({DRAM.name: series}, max_samples=250)
    grid = TimeGrid(1_767_225_600.0, 60.0, 200)
    found = read(store, DRAM, grid, QueryLimits(max_series_per_query=100))
    assert_complete(found, reference(series, grid), grid)
    assert all(p * n <= 250 for _, p, n in store.answered)


def test_what_no_split_can_bring_under_the_limit_fails_with_the_stores_reason() -> None:
    series: Series = [({"device": "nvidia0"}, abs), ({"device": "nvidia1"}, abs)]  # no label to split by
    store = Store({DRAM.name: series}, max_series=1)
    with pytest.raises(PrometheusResponseError, match=r"exceeds 1.*by no label.*limit on series"):
        read(store, DRAM, TimeGrid(0.0, 60.0, 5), QueryLimits())


def _fleet_answers() -> dict[str, Series]:
    return constant_answers()


def test_read_fleet_through_a_tightly_limited_store_reads_what_an_unlimited_one_does() -> None:
    start, end = T0, T0 + timedelta(hours=2)
    with httpx.Client(transport=httpx.MockTransport(Store(_fleet_answers()))) as http:
        free = read_fleet(URL, start, end, 60.0, client=http, role_label="role", limits=QueryLimits())
    tight = Store(_fleet_answers(), max_points=25, max_series=2)
    limits = QueryLimits(max_points_per_series=1_000, max_series_per_query=3, max_samples_per_query=30)
    with httpx.Client(transport=httpx.MockTransport(tight)) as http:
        split = read_fleet(URL, start, end, 60.0, client=http, role_label="role", limits=limits)
    assert len({q for q, _, _ in tight.answered}) > len(ALL_QUERIES) // 4  # sharded queries
    assert all(p <= 25 and n <= 2 for _, p, n in tight.answered)
    assert split.gpus == free.gpus and split.workers == free.workers
    for frame in ("gpu", "engine"):
        a, b = getattr(free, frame), getattr(split, frame)
        order_a, order_b = np.lexsort((a.ts, a.worker)), np.lexsort((b.ts, b.worker))
        np.testing.assert_array_equal(a.ts[order_a], b.ts[order_b])
        for column in ("worker", "kv_cache_usage" if frame == "engine" else "dram_active"):
            np.testing.assert_array_equal(getattr(a, column)[order_a], getattr(b, column)[order_b])


def test_read_fleet_takes_its_limits_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_ANALYZER_PROMETHEUS_MAX_POINTS_PER_SERIES", "7")
    store = Store(_fleet_answers())
    limits = AnalyzerSettings().query_limits()  # as the CLI hands them over
    with httpx.Client(transport=httpx.MockTransport(store)) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=30), 60.0, client=http, limits=limits)
    assert fleet.grid.n == 30 and max(p for _, p, _ in store.answered) == 7


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (None, "serves no configuration at /api/v1/status/config"),  # Thanos, Mimir
        ("", "serves an empty configuration"),  # VictoriaMetrics without -promscrape.config
    ],
)
def test_a_store_without_its_configuration_is_noted_not_fatal(config: str | None, says: str) -> None:
    with httpx.Client(transport=httpx.MockTransport(Store(_fleet_answers(), config=config))) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=10), 60.0, client=http, limits=QueryLimits())
    assert all(w.cluster is None for w in fleet.workers)
    noted = [n for n in fleet.notes if says in n]
    assert len(noted) == 1 and "external labels are unknown" in noted[0] and "docs/zero-agent.md" in noted[0]


def test_external_labels_from_a_promscrape_config_name_the_cluster() -> None:
    # VictoriaMetrics serves its -promscrape.config at /api/v1/status/config, external_labels and all.
    config = yaml.safe_dump({"global": {"scrape_interval": "1s", "external_labels": {"cluster": "east"}}})
    with httpx.Client(transport=httpx.MockTransport(Store(_fleet_answers(), config=config))) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=10), 60.0, client=http, limits=QueryLimits())
    assert {w.cluster for w in fleet.workers} == {"east"}
    assert not any("external labels are unknown" in n for n in fleet.notes)
