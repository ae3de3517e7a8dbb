"""Zero-agent KV budget: what each engine reports holding reaches the worker's inventory entry, read from
Prometheus-shaped series by the rule the collector applies (fleet.vocabulary.engines.KV_CAPACITY_METRICS):
vLLM's from the labels of its cache_config_info info gauge, SGLang's max_total_num_tokens, TensorRT-LLM's
blocks x tokens per block; the last value wins; unknown where the engine reports none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.inventory import analysis_input, inventory, sample_columns
from analyzer.sources.prometheus.metrics import ENGINE_QUERIES, KV_CAPACITY_QUERIES, MetricQuery, Reduce, plan
from analyzer.sources.prometheus.series import RangeSeries, parse_matrix
from analyzer.sources.prometheus.source import map_fleet
from fleet.vocabulary.engines import KV_CAPACITY_FIELD
from tests.analyzer.prometheus_fixtures import (
    SGLANG_FIXTURE,
    SGLANG_KV_CAPACITY_TOKENS,
    VLLM_FIXTURE,
    VLLM_KV_CAPACITY_TOKENS,
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
DECODE = "llm/llama-decode-0"  # the vLLM target's pod
TRT_TARGET = {"job": "trtllm", "instance": "10.0.3.4:8000", "namespace": "llm", "pod": "trt-decode-0"}


def kv_query(name: str) -> MetricQuery:
    return next(q for q in KV_CAPACITY_QUERIES if q.name == name)


def engine_query(name: str) -> MetricQuery:
    return next(q for q in ENGINE_QUERIES if q.name == name)


def results(answers: Mapping[MetricQuery, Answer]) -> dict[MetricQuery, list[RangeSeries]]:
    return {query: parse_matrix(matrix(series))[0] for query, series in answers.items()}


def vllm_running() -> tuple[dict[str, str], list[tuple[float, float]]]:
    return engine_labels(VLLM_FIXTURE, "vllm:num_requests_running", VLLM_TARGET), points(TIMES, 3.0)


def vllm_info(
    times: Sequence[float] = TIMES, **changes: str
) -> tuple[dict[str, str], list[tuple[float, float]]]:
    """What last_over_time(vllm:cache_config_info[w]) returns: the info gauge's labels (no __name__) and
    the target's, value 1."""
    return {**cache_config_labels(**changes), **VLLM_TARGET}, points(times, 1.0)


def vllm_fleet(*info: tuple[dict[str, str], list[tuple[float, float]]]) -> PrometheusFleet:
    answers: dict[MetricQuery, Answer] = {engine_query("vllm:num_requests_running"): [vllm_running()]}
    if info:
        answers[kv_query("vllm:cache_config_info")] = list(info)
    return map_fleet(results(answers), GRID)


def sglang(name: str, **changes: str) -> dict[str, str]:
    return engine_labels(SGLANG_FIXTURE, name, SGLANG_TARGET, **changes)


def test_sglang_max_total_num_tokens_from_the_capture_reaches_the_inventory() -> None:
    total = "sglang:max_total_num_tokens"
    answers: dict[MetricQuery, Answer] = {
        engine_query("sglang:num_running_reqs"): [(sglang("sglang:num_running_reqs"), points(TIMES, 4.0))],
        kv_query(total): [(sglang(total), points(TIMES, float(SGLANG_KV_CAPACITY_TOKENS)))],
    }
    fleet = map_fleet(results(answers), GRID)
    (worker,) = fleet.workers
    assert (worker.worker_id, worker.kv_capacity_tokens) == (PREFILL, 92962)
    (spec,) = inventory(fleet).workers
    assert spec.kv_capacity_tokens == 92962
    assert analysis_input(fleet).inventory.workers[0].kv_capacity_tokens == 92962
    _, columns = sample_columns(fleet)  # the engine_sample field, on every row as the records carry it
    assert columns["kv_capacity_tokens"] == [92962] * GRID.n
    assert "kv_capacity_tokens" not in fleet.engine_row_latency  # not a frame column


def test_sglang_ranks_each_report_the_engines_tokens_and_are_not_added() -> None:
    total = "sglang:max_total_num_tokens"
    ranks: Answer = [(sglang(total, tp_rank=str(r)), points(TIMES, 92962.0)) for r in range(4)]
    running: Answer = [
        (sglang("sglang:num_running_reqs", tp_rank=str(r)), points(TIMES, 1.0)) for r in range(4)
    ]
    answers: dict[MetricQuery, Answer] = {
        engine_query("sglang:num_running_reqs"): running,
        kv_query(total): ranks,
    }
    (worker,) = map_fleet(results(answers), GRID).workers
    assert worker.tp == 4 and worker.kv_capacity_tokens == 92962


def test_vllm_budget_is_blocks_times_block_size_from_the_info_gauges_labels() -> None:
    (worker,) = vllm_fleet(vllm_info()).workers
    assert worker.worker_id == DECODE
    assert worker.kv_capacity_tokens == VLLM_KV_CAPACITY_TOKENS == 95088


def test_vllm_data_parallel_engines_repeat_one_budget() -> None:
    # The front end sums its engines' blocks into one num_gpu_blocks and writes it on every engine's series.
    (worker,) = vllm_fleet(vllm_info(engine="0"), vllm_info(engine="1")).workers
    assert worker.kv_capacity_tokens == 95088


def test_vllm_restart_with_another_cache_config_last_value_wins() -> None:
    early, late = TIMES[:5], TIMES[6:]
    (ended,) = vllm_fleet(vllm_info(early), vllm_info(late, num_gpu_blocks="8000")).workers
    assert ended.kv_capacity_tokens == 8000 * 16
    (reverse,) = vllm_fleet(vllm_info(early, num_gpu_blocks="8000"), vllm_info(late)).workers
    assert reverse.kv_capacity_tokens == 95088
    # The old series still in last_over_time's window at the end: the one born later is the engine now.
    (both,) = vllm_fleet(vllm_info(TIMES), vllm_info(TIMES[8:], block_size="32")).workers
    assert both.kv_capacity_tokens == 5943 * 32


@pytest.mark.parametrize("blocks", ["None", "0", "", "5943.5", "-1"])
def test_vllm_without_a_whole_block_count_reports_no_budget(blocks: str) -> None:
    (worker,) = vllm_fleet(vllm_info(num_gpu_blocks=blocks)).workers
    assert worker.kv_capacity_tokens is None  # unknown, never 0 tokens


def test_a_worker_whose_engine_reports_no_budget_is_unknown() -> None:
    (worker,) = vllm_fleet().workers
    assert worker.kv_capacity_tokens is None
    assert inventory(vllm_fleet()).workers[0].kv_capacity_tokens is None
    assert sample_columns(vllm_fleet())[1]["kv_capacity_tokens"] == [None] * GRID.n


def test_budget_series_alone_make_no_worker() -> None:
    fleet = map_fleet(results({kv_query("vllm:cache_config_info"): [vllm_info()]}), GRID)
    assert fleet.workers == () and len(fleet.engine) == 0


def test_budget_series_lend_no_labels_to_the_worker() -> None:
    # The info gauge's labels are a config, not an identity: the worker's model comes from its engine series.
    labels, series = vllm_info()
    fleet = vllm_fleet((labels | {"model_name": "other/model"}, series))
    assert fleet.workers[0].model == "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize("spelling", ["trtllm_", "trtllm:"])
def test_tensorrt_llm_budget_is_max_blocks_times_tokens_per_block(spelling: str) -> None:
    labels = {"model_name": "llama", "engine_type": "trtllm", **TRT_TARGET}
    answers: dict[MetricQuery, Answer] = {
        engine_query(f"{spelling}generation_tokens_total"): [(labels, points(TIMES, 20.0))],
        kv_query(f"{spelling}kv_cache_max_blocks"): [(labels, points(TIMES, 3000.0))],
        kv_query(f"{spelling}kv_cache_tokens_per_block"): [(labels, points(TIMES, 32.0))],
    }
    (worker,) = map_fleet(results(answers), GRID).workers
    assert (worker.engine, worker.kv_capacity_tokens) == ("trtllm", 96000)
    del answers[kv_query(f"{spelling}kv_cache_tokens_per_block")]  # only utilisation-like facts: unknown
    (blocks_only,) = map_fleet(results(answers), GRID).workers
    assert blocks_only.kv_capacity_tokens is None


def test_a_gap_at_the_end_keeps_the_last_value_and_nan_points_are_skipped() -> None:
    total = "sglang:max_total_num_tokens"
    values = [92962.0] * 6 + [float("nan")] * 4
    answers: dict[MetricQuery, Answer] = {
        engine_query("sglang:num_running_reqs"): [(sglang("sglang:num_running_reqs"), points(TIMES, 4.0))],
        kv_query(total): [(sglang(total), points(TIMES, values))],
    }
    (worker,) = map_fleet(results(answers), GRID).workers
    assert worker.kv_capacity_tokens == 92962


def test_the_queries_read_the_last_value_and_are_planned_like_the_others() -> None:
    query = kv_query("vllm:cache_config_info")
    assert query.reduce is Reduce.LAST and query.column == KV_CAPACITY_FIELD
    assert query.promql(120.0) == "last_over_time(vllm:cache_config_info[120s])"
    assert [q.name for q in plan({"sglang:max_total_num_tokens"})] == ["sglang:max_total_num_tokens"]
    assert not np.isin([q.name for q in KV_CAPACITY_QUERIES], [q.name for q in ENGINE_QUERIES]).any()
