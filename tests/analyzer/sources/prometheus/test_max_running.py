"""Zero-agent concurrency cap: the most requests each engine reports running at once reaches the worker's
inventory entry, read from Prometheus-shaped series by the rule the collector applies
(fleet.vocabulary.engines.MAX_RUNNING_METRICS): SGLang's max_running_requests gauge, a max_num_seqs label
of a vLLM info gauge, TensorRT-LLM's max_num_active_requests else its max batch size; the last value wins;
unknown where the engine reports none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.inventory import analysis_input, inventory, sample_columns
from analyzer.sources.prometheus.metrics import (
    ALL_QUERIES,
    ENGINE_QUERIES,
    KV_CAPACITY_QUERIES,
    MAX_RUNNING_QUERIES,
    MetricQuery,
    Reduce,
    plan,
)
from analyzer.sources.prometheus.series import RangeSeries, parse_matrix
from analyzer.sources.prometheus.source import map_fleet
from fleet.vocabulary.engines import MAX_RUNNING_FIELD
from tests.analyzer.prometheus_fixtures import (
    SGLANG_FIXTURE,
    VLLM_FIXTURE,
    cache_config_labels,
    matrix,
    points,
)
from tests.analyzer.sources.prometheus.test_source import (
    GRID,
    PREFILL,
    SGLANG_TARGET,
    TIMES,
    VLLM_TARGET,
    engine_labels,
)

Answer = list[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]
Series = tuple[dict[str, str], list[tuple[float, float]]]
DECODE = "llm/llama-decode-0"  # the vLLM target's pod
TRT_TARGET = {"job": "trtllm", "instance": "10.0.3.4:8000", "namespace": "llm", "pod": "trt-decode-0"}
CAP = "sglang:max_running_requests"


def query(name: str) -> MetricQuery:
    """The query that fetches ``name``'s series for what an engine reports of itself."""
    return next(q for q in (*KV_CAPACITY_QUERIES, *MAX_RUNNING_QUERIES) if q.name == name)


def engine_query(name: str) -> MetricQuery:
    return next(q for q in ENGINE_QUERIES if q.name == name)


def results(answers: Mapping[MetricQuery, Answer]) -> dict[MetricQuery, list[RangeSeries]]:
    return {q: parse_matrix(matrix(series))[0] for q, series in answers.items()}


def sglang_cap(values: float | Sequence[float], **changes: str) -> Series:
    """What last_over_time(sglang:max_running_requests[w]) returns: a scheduler gauge's labels (those of the
    capture's max_total_num_tokens, its sibling) and the target's."""
    return engine_labels(SGLANG_FIXTURE, "sglang:max_total_num_tokens", SGLANG_TARGET, **changes), points(
        TIMES, values
    )


def sglang_fleet(*caps: Series) -> PrometheusFleet:
    running = engine_labels(SGLANG_FIXTURE, "sglang:num_running_reqs", SGLANG_TARGET)
    answers: dict[MetricQuery, Answer] = {
        engine_query("sglang:num_running_reqs"): [(running, points(TIMES, 4.0))]
    }
    if caps:
        answers[query(CAP)] = list(caps)
    return map_fleet(results(answers), GRID)


def vllm_info(name: str, times: Sequence[float] = TIMES, **labels: str) -> tuple[MetricQuery, Series]:
    """An info gauge of a vLLM target with ``labels`` (value 1), as last_over_time returns it."""
    return query(name), ({**labels, **VLLM_TARGET}, points(times, 1.0))


def vllm_fleet(*infos: tuple[MetricQuery, Series]) -> PrometheusFleet:
    running = engine_labels(VLLM_FIXTURE, "vllm:num_requests_running", VLLM_TARGET)
    answers: dict[MetricQuery, Answer] = {
        engine_query("vllm:num_requests_running"): [(running, points(TIMES, 3.0))]
    }
    for info_query, series in infos:
        answers.setdefault(info_query, []).append(series)
    return map_fleet(results(answers), GRID)


def test_sglang_max_running_requests_reaches_the_inventory_and_the_sample_columns() -> None:
    fleet = sglang_fleet(sglang_cap(4097.0))
    (worker,) = fleet.workers
    assert (worker.worker_id, worker.max_running_requests) == (PREFILL, 4097)
    assert inventory(fleet).workers[0].max_running_requests == 4097
    assert analysis_input(fleet).inventory.workers[0].max_running_requests == 4097
    _, columns = sample_columns(fleet)  # the engine_sample field, on every row as the records carry it
    assert columns["max_running_requests"] == [4097] * GRID.n
    assert MAX_RUNNING_FIELD not in fleet.engine_row_latency  # not a frame column


def test_a_worker_whose_engine_reports_no_cap_is_unknown() -> None:
    fleet = sglang_fleet()  # current SGLang releases: no such gauge on /metrics
    assert fleet.workers[0].max_running_requests is None
    assert inventory(fleet).workers[0].max_running_requests is None
    assert sample_columns(fleet)[1]["max_running_requests"] == [None] * GRID.n


def test_sglang_ranks_each_report_the_cap_and_rank_zeros_is_read() -> None:
    ranks = [sglang_cap(256.0 if r == 0 else 999.0, tp_rank=str(r)) for r in range(4)]
    assert sglang_fleet(*ranks).workers[0].max_running_requests == 256


def test_a_restart_with_another_cap_last_value_wins_and_nan_points_are_skipped() -> None:
    assert sglang_fleet(sglang_cap([512.0] * 5 + [1024.0] * 5)).workers[0].max_running_requests == 1024
    assert sglang_fleet(sglang_cap([512.0] * 6 + [float("nan")] * 4)).workers[0].max_running_requests == 512


@pytest.mark.parametrize("value", [0.0, -1.0, 12.5, float(2**31)])
def test_a_cap_that_is_no_whole_count_the_contract_holds_is_unknown(value: float) -> None:
    assert sglang_fleet(sglang_cap(value)).workers[0].max_running_requests is None


def test_vllm_cap_is_a_max_num_seqs_label_of_its_scheduler_info_gauge_else_its_cache_info_gauge() -> None:
    stock = vllm_info("vllm:cache_config_info", **cache_config_labels())
    (worker,) = vllm_fleet(stock).workers
    assert worker.worker_id == DECODE
    assert (worker.max_running_requests, worker.kv_capacity_tokens) == (None, 95088)  # stock vLLM: no cap
    labelled = vllm_info("vllm:cache_config_info", **cache_config_labels(max_num_seqs="256"))
    assert vllm_fleet(labelled).workers[0].max_running_requests == 256  # read from the KV query's series
    scheduler = vllm_info("vllm:scheduler_config_info", engine="0", max_num_seqs="128")
    assert vllm_fleet(labelled, scheduler).workers[0].max_running_requests == 128
    assert vllm_fleet(stock, scheduler).workers[0].max_running_requests == 128
    unset = vllm_info("vllm:scheduler_config_info", engine="0", max_num_seqs="None")
    assert vllm_fleet(unset).workers[0].max_running_requests is None


@pytest.mark.parametrize("spelling", ["trtllm_", "trtllm:"])
def test_tensorrt_llm_cap_is_max_num_active_requests_else_its_max_batch_size(spelling: str) -> None:
    labels = {"model_name": "llama", "engine_type": "trtllm", **TRT_TARGET}
    answers: dict[MetricQuery, Answer] = {
        engine_query(f"{spelling}generation_tokens_total"): [(labels, points(TIMES, 20.0))],
        query(f"{spelling}max_batch_size_static"): [(labels, points(TIMES, 2048.0))],
    }
    assert map_fleet(results(answers), GRID).workers[0].max_running_requests == 2048
    answers[query(f"{spelling}max_batch_size_runtime")] = [(labels, points(TIMES, 512.0))]
    assert map_fleet(results(answers), GRID).workers[0].max_running_requests == 512
    answers[query(f"{spelling}max_num_active_requests")] = [(labels, points(TIMES, 1024.0))]
    (worker,) = map_fleet(results(answers), GRID).workers
    assert (worker.engine, worker.max_running_requests) == ("trtllm", 1024)


def test_cap_series_alone_make_no_worker_and_lend_it_no_labels() -> None:
    fleet = map_fleet(results({query(CAP): [sglang_cap(4097.0)]}), GRID)
    assert fleet.workers == () and len(fleet.engine) == 0
    labels, series = sglang_cap(4097.0)
    (worker,) = sglang_fleet((labels | {"model_name": "other/model"}, series)).workers
    assert worker.model == "Qwen/Qwen3-0.6B"  # from its engine series, not the cap's


def test_the_queries_read_the_last_value_each_name_once_and_are_planned_like_the_others() -> None:
    cap = query(CAP)
    assert cap.reduce is Reduce.LAST and cap.column == MAX_RUNNING_FIELD
    assert cap.promql(120.0) == "last_over_time(sglang:max_running_requests[120s])"
    assert [q.name for q in plan({CAP})] == [CAP]
    names = [q.name for q in ALL_QUERIES if q.reduce is Reduce.LAST]
    assert len(names) == len(set(names))  # vLLM's cache_config_info: fetched once, read for both
    assert "vllm:cache_config_info" not in {q.name for q in MAX_RUNNING_QUERIES}
    assert not {q.name for q in MAX_RUNNING_QUERIES} & {q.name for q in ENGINE_QUERIES}
