"""Zero-agent engine series: the latency quantiles (TTFT, TPOT) reach the sample columns the analyzer rolls
up, SGLang's waiting queues add up as the collector adds them, Dynamo's worker metrics lend their labels,
and TensorRT-LLM is an engine like the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from analyzer.sources.prometheus.inventory import analysis_input, sample_columns
from analyzer.sources.prometheus.labels import Family
from analyzer.sources.prometheus.metrics import DYNAMO_LABELS, ENGINE_QUERIES, MetricQuery
from analyzer.sources.prometheus.series import RangeSeries, parse_matrix
from analyzer.sources.prometheus.source import map_fleet
from analyzer.telemetry.grid import aggregate_engine_samples
from fleet.contract import Role, RoleSource
from tests.analyzer.prometheus_fixtures import SGLANG_FIXTURE, VLLM_FIXTURE, matrix, points, samples
from tests.analyzer.sources.prometheus.test_source import (
    GRID,
    PREFILL,
    SGLANG_TARGET,
    TIMES,
    VLLM_TARGET,
    engine_labels,
)

Answer = list[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]


def engine_query(name: str, column: str | None = None) -> MetricQuery:
    return next(q for q in ENGINE_QUERIES if q.name == name and (column is None or q.column == column))


def results(answers: Mapping[MetricQuery, Answer]) -> dict[MetricQuery, list[RangeSeries]]:
    return {query: parse_matrix(matrix(series))[0] for query, series in answers.items()}


def vllm(name: str, **changes: str) -> dict[str, str]:
    return engine_labels(VLLM_FIXTURE, name, VLLM_TARGET, **changes)


def quantile_labels(name: str) -> dict[str, str]:
    """What histogram_quantile(sum without (ranks) (rate(x_bucket))) returns: the target and model labels."""
    labels = vllm(f"{name}_bucket")
    return {k: v for k, v in labels.items() if k not in ("le", "engine")}


def test_latency_quantiles_reach_the_columns_the_analyzer_rolls_up() -> None:
    tpot = "vllm:inter_token_latency_seconds"
    answers: dict[MetricQuery, Answer] = {
        engine_query("vllm:generation_tokens_total"): [
            (vllm("vllm:generation_tokens_total"), points(TIMES, 400.0))
        ],
        engine_query(tpot, "tpot_p50_s"): [(quantile_labels(tpot), points(TIMES, 0.018))],
        engine_query(tpot, "tpot_p99_s"): [(quantile_labels(tpot), points(TIMES, 0.045))],
        engine_query("vllm:time_per_output_token_seconds", "tpot_p50_s"): [  # the older name: an alias
            (quantile_labels(tpot), points(TIMES, 0.5))
        ],
    }
    fleet = map_fleet(results(answers), GRID)
    np.testing.assert_allclose(fleet.engine_row_latency["tpot_p50_s"], 0.018)  # the current name wins
    np.testing.assert_allclose(fleet.engine_row_latency["tpot_p99_s"], 0.045)
    assert np.isnan(fleet.engine_row_latency["ttft_p50_s"]).all()  # not reported: unknown, not 0
    _, columns = sample_columns(fleet)
    rolled = aggregate_engine_samples(columns, bucket_s=3600.0)
    assert rolled["tpot_p50_s_avg"] == pytest.approx([0.018])
    assert np.isnan(rolled["ttft_p50_s_avg"]).all()
    grid = analysis_input(fleet)
    assert grid.engine_buckets["tpot_p50_s_avg"] == pytest.approx([0.018])


def test_sglang_waiting_adds_the_prealloc_queues_as_the_collector_does() -> None:
    def sglang(name: str) -> dict[str, str]:
        return engine_labels(SGLANG_FIXTURE, name, SGLANG_TARGET, engine_type="decode")

    answers: dict[MetricQuery, Answer] = {
        engine_query("sglang:num_queue_reqs"): [(sglang("sglang:num_queue_reqs"), points(TIMES, 2.0))],
        engine_query("sglang:num_decode_prealloc_queue_reqs"): [
            (sglang("sglang:num_decode_prealloc_queue_reqs"), points(TIMES, [3.0] * 5 + [float("nan")] * 5))
        ],
    }
    fleet = map_fleet(results(answers), GRID)
    np.testing.assert_allclose(fleet.engine.requests_waiting, [5.0] * 5 + [2.0] * 5)
    (worker,) = fleet.workers
    assert (worker.worker_id, worker.role, worker.role_source) == (PREFILL, Role.DECODE, RoleSource.ENGINE)


def dynamo_labels(**changes: str) -> dict[str, str]:
    labels = samples(VLLM_FIXTURE, "dynamo_component_requests_total")[0]
    return {**labels, **changes, **VLLM_TARGET}


def test_dynamo_worker_metrics_lend_their_namespace_and_component() -> None:
    running = (vllm("vllm:num_requests_running"), points(TIMES, 3.0))
    plain = map_fleet(results({engine_query("vllm:num_requests_running"): [running]}), GRID)
    assert (plain.workers[0].deployment, plain.workers[0].role) == (None, Role.UNKNOWN)
    answers: dict[MetricQuery, Answer] = {
        engine_query("vllm:num_requests_running"): [running],
        DYNAMO_LABELS: [(dynamo_labels(dynamo_component="prefill"), points(TIMES, 1.0))],
    }
    lent = map_fleet(results(answers), GRID)
    (worker,) = lent.workers
    assert worker.deployment == "dynamo"  # the capture's dynamo_namespace
    assert (worker.role, worker.role_source) == (Role.PREFILL, RoleSource.COMPONENT)
    assert worker.engine == "vllm" and worker.model == "Qwen/Qwen3-0.6B"
    assert DYNAMO_LABELS.family is Family.DYNAMO


def test_a_dynamo_component_without_engine_series_is_no_worker() -> None:
    frontend = {**dynamo_labels(), "pod": "dynamo-frontend-0"}
    fleet = map_fleet(results({DYNAMO_LABELS: [(frontend, points(TIMES, 1.0))]}), GRID)
    assert fleet.workers == () and len(fleet.engine) == 0


def test_tensorrt_llm_is_read_in_either_spelling() -> None:
    target = {"job": "trtllm", "instance": "10.0.3.4:8000", "namespace": "llm", "pod": "trt-decode-0"}
    labels = {"model_name": "llama", "engine_type": "trtllm", **target}
    answers: dict[MetricQuery, Answer] = {
        engine_query("trtllm:generation_tokens_total"): [(labels, points(TIMES, 20.0))],
        engine_query("trtllm_kv_cache_utilization"): [(labels, points(TIMES, 0.25))],
    }
    fleet = map_fleet(results(answers), GRID)
    (worker,) = fleet.workers
    assert (worker.worker_id, worker.engine, worker.model) == ("llm/trt-decode-0", "trtllm", "llama")
    assert worker.role is Role.UNKNOWN  # engine_type="trtllm" is a backend tag, not a role
    np.testing.assert_allclose(fleet.engine.generation_tokens, 20.0 * GRID.step)
    np.testing.assert_allclose(fleet.engine.kv_cache_usage, 0.25)


def test_tp_is_what_the_ranks_or_the_gpus_say_never_a_default() -> None:
    running = "sglang:num_running_reqs"
    ranks = [engine_labels(SGLANG_FIXTURE, running, SGLANG_TARGET, tp_rank=str(r)) for r in range(4)]
    all_ranks = map_fleet(
        results({engine_query(running): [(labels, points(TIMES, 1.0)) for labels in ranks]}), GRID
    )
    assert all_ranks.workers[0].tp == 4  # every scheduler reports: its TP degree
    rank_zero = map_fleet(results({engine_query(running): [(ranks[0], points(TIMES, 1.0))]}), GRID)
    assert rank_zero.workers[0].tp is None  # no GPUs joined, one rank: unknown
    assert sample_columns(rank_zero)[1]["tp"] == [None] * GRID.n
