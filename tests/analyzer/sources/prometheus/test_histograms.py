"""Zero-agent latency histograms: the per-window bucket increments Prometheus returns (one series per ``le``,
ranks summed away) grouped per worker and window and re-binned onto the shared grid (fleet.histograms),
unknown (None) where a window observed nothing or is no histogram, and handed to the analyzer as the
engine sample columns ``ttft_histogram``, ``tpot_histogram`` and ``e2e_histogram``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from analyzer.sources.prometheus.histograms import bound, window_histogram, window_histograms
from analyzer.sources.prometheus.inventory import analysis_input, sample_columns
from analyzer.sources.prometheus.metrics import (
    ALL_QUERIES,
    ENGINE_QUERIES,
    HISTOGRAM_COLUMNS,
    HISTOGRAM_QUERIES,
    MetricQuery,
    Reduce,
    plan,
)
from analyzer.sources.prometheus.series import Placements, RangeSeries, TimeGrid, parse_matrix
from analyzer.sources.prometheus.source import map_fleet
from analyzer.telemetry.latency_cells import as_counts
from fleet import histograms
from fleet.vocabulary.engines import EngineField
from tests.analyzer.prometheus_fixtures import VLLM_FIXTURE, matrix, points, samples
from tests.analyzer.sources.prometheus.test_source import GRID, TIMES, VLLM_TARGET, engine_labels

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"  # TPOT's current vLLM name
OLD_TPOT = "vllm:time_per_output_token_seconds"  # its older alias
TOKENS = "vllm:generation_tokens_total"
# The capture's own bounds (finite, rising), as the engine exports them.
TTFT_LE = [s["le"] for s in samples(VLLM_FIXTURE, f"{TTFT}_bucket") if s["le"] != "+Inf"]
OTHER = {**VLLM_TARGET, "instance": "10.0.1.22:8000", "pod": "llama-decode-1"}

Answer = list[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]


def _counts(held: Any) -> list[Any]:
    """Handed-on histograms (stored forms, or counts where parts were added) as counts, None kept: counts
    come back as the 4-byte floats the stored form holds."""
    return [as_counts(h) for h in held]


def buckets_query(name: str) -> MetricQuery:
    return next(q for q in HISTOGRAM_QUERIES if q.name == name)


def engine_query(name: str) -> MetricQuery:
    return next(q for q in ENGINE_QUERIES if q.name == name)


def bucket_labels(name: str, le: str, target: Mapping[str, str] = VLLM_TARGET) -> dict[str, str]:
    """What ``sum without (engine, ...) (increase(<name>_bucket[...]))`` returns: target, model and ``le``."""
    labels = engine_labels(VLLM_FIXTURE, f"{TTFT}_bucket", target)
    labels.pop("engine")
    return {**labels, "le": le}


def increments(
    name: str, le: Sequence[str], windows: Sequence[Sequence[float]], target: Mapping[str, str] = VLLM_TARGET
) -> Answer:
    """One series per ``le`` (``+Inf`` last), ``windows[k]`` the cumulative increments in window k."""
    bounds = [*le, "+Inf"]
    return [
        (bucket_labels(name, b, target), points(TIMES, [w[i] for w in windows])) for i, b in enumerate(bounds)
    ]


def results(answers: Mapping[MetricQuery, Answer]) -> dict[MetricQuery, list[RangeSeries]]:
    return {query: parse_matrix(matrix(series))[0] for query, series in answers.items()}


def tokens(target: Mapping[str, str] = VLLM_TARGET) -> Answer:
    labels = {**engine_labels(VLLM_FIXTURE, TOKENS, target)}
    return [(labels, points(TIMES, 400.0))]


def cumulative(*per_bucket: float) -> list[float]:
    """Cumulative counts at each bound and the total, from per-bucket counts (the last: above every bound)."""
    return [float(v) for v in np.cumsum(per_bucket)]


def ttft_window(k: int) -> list[float]:
    """Window k's TTFT increments: 10 + k observations at 0.25-0.5 s, 2 at 1-2.5 s, 1 above 2560 s."""
    per_bucket = [0.0] * (len(TTFT_LE) + 1)
    per_bucket[TTFT_LE.index("0.5")] = 10.0 + k
    per_bucket[TTFT_LE.index("2.5")] = 2.0
    per_bucket[-1] = 1.0
    return cumulative(*per_bucket)


def test_promql_and_plan_of_the_bucket_queries() -> None:
    (ttft,) = (q for q in HISTOGRAM_QUERIES if q.name == TTFT)
    assert (ttft.column, ttft.reduce) == ("ttft_histogram", Reduce.INCREASE)
    assert ttft.promql(60.0) == (
        "sum without (engine, tp_rank, pp_rank, dp_rank, moe_ep_rank, pid) "
        "(increase(vllm:time_to_first_token_seconds_bucket[60s]))"
    )
    assert set(HISTOGRAM_COLUMNS.values()) == {"ttft_histogram", "tpot_histogram", "e2e_histogram"}
    assert HISTOGRAM_COLUMNS[EngineField.E2E] == "e2e_histogram"
    # Every histogram name the quantiles read, once; each asked only where the server holds its buckets.
    quantiled = {q.name for q in ENGINE_QUERIES if q.reduce is Reduce.QUANTILE}
    assert {q.name for q in HISTOGRAM_QUERIES} == quantiled and len(HISTOGRAM_QUERIES) == len(quantiled)
    assert set(HISTOGRAM_QUERIES) <= set(ALL_QUERIES)
    chosen = plan({f"{TTFT}_bucket", TOKENS})
    assert [q.column for q in chosen if q.reduce is Reduce.INCREASE] == ["ttft_histogram"]
    assert not any(q.reduce is Reduce.INCREASE for q in plan({f"{TTFT}_count", TOKENS}))


def test_bucket_increments_are_rebinned_per_worker_and_window() -> None:
    windows = [ttft_window(k) for k in range(GRID.n)]
    windows[3] = [*windows[3][:10], windows[3][10] - 5.0, *windows[3][11:]]  # le=0.75 below le=0.5: falls
    windows[4] = [-1.0, *windows[4][1:]]  # a negative increment
    windows[5] = [0.0] * (len(TTFT_LE) + 1)  # nothing observed
    answers: dict[MetricQuery, Answer] = {
        engine_query(TOKENS): [*tokens(), *tokens(OTHER)],
        buckets_query(TTFT): increments(TTFT, TTFT_LE, windows),  # the other worker has no TTFT histogram
        buckets_query(ITL): increments(ITL, ["0.01", "0.025"], [[3.0, 5.0, 5.0]] * GRID.n, OTHER),
    }
    fleet = map_fleet(results(answers), GRID)
    rows = fleet.engine.worker == fleet.engine.workers.index("llm/llama-decode-0")
    ttft = [
        h for h, on in zip(_counts(fleet.engine_row_histograms["ttft_histogram"]), rows, strict=True) if on
    ]
    bounds = [float(b) for b in TTFT_LE]
    for k, histogram in enumerate(ttft):
        if k in (3, 4, 5):
            assert histogram is None, k  # falling, negative, empty: unknown, never 0
            continue
        assert histogram is not None
        expected = histograms.rebin(bounds, windows[k][:-1], windows[k][-1])
        np.testing.assert_allclose(histogram, expected, rtol=1e-5, atol=1e-5)
        assert histogram.shape == (histograms.SIZE,) and histogram.sum() == pytest.approx(13.0 + k)
        assert histograms.quantile(0.5, histogram) == pytest.approx(0.25 + 0.25 * (6.5 + k / 2) / (10 + k))
    other = [
        h for h, on in zip(_counts(fleet.engine_row_histograms["ttft_histogram"]), ~rows, strict=True) if on
    ]
    assert other == [None] * GRID.n  # its engine exports no TTFT histogram: unknown
    tpot = [
        h for h, on in zip(_counts(fleet.engine_row_histograms["tpot_histogram"]), ~rows, strict=True) if on
    ]
    assert all(h is not None and h.sum() == pytest.approx(5.0) for h in tpot)
    assert fleet.engine_row_histograms["e2e_histogram"] == [None] * len(fleet.engine)

    # The analyzer's raw engine sample columns carry them, one item per row.
    _, columns = sample_columns(fleet)
    assert columns["ttft_histogram"] is fleet.engine_row_histograms["ttft_histogram"]
    assert all(len(columns[c]) == len(columns["ts"]) for c in HISTOGRAM_COLUMNS.values())
    analysis_input(fleet)  # the pipeline's input builds with them


def test_pool_quantile_from_merged_buckets_is_sum_by_le() -> None:
    a = [cumulative(*([0.0] * 9), 9.0, *([0.0] * 13)) for _ in range(GRID.n)]  # 9 at 0.25-0.5 s
    b = [cumulative(*([0.0] * 12), 1.0, *([0.0] * 10)) for _ in range(GRID.n)]  # 1 at 1-2.5 s
    answers: dict[MetricQuery, Answer] = {
        engine_query(TOKENS): [*tokens(), *tokens(OTHER)],
        buckets_query(TTFT): [*increments(TTFT, TTFT_LE, a), *increments(TTFT, TTFT_LE, b, OTHER)],
    }
    fleet = map_fleet(results(answers), GRID)
    column = _counts(fleet.engine_row_histograms["ttft_histogram"])
    first = [column[i] for i in np.flatnonzero(fleet.engine.ts == GRID.start)]
    assert len(first) == 2
    # sum by (le) over the two workers: 10 observations, 9 in (0.25, 0.5] and 1 in (1, 2.5].
    merged = histograms.merged(first)
    assert histograms.quantile(0.85, merged) == pytest.approx(0.25 + 0.25 * 8.5 / 9)
    assert histograms.quantile(0.95, merged) == pytest.approx(1.0 + 1.5 * 0.5)


def test_the_best_ranked_alias_wins_per_window_and_label_sets_add_up() -> None:
    current = [[2.0, 4.0, 4.0] if k < 5 else [math.nan] * 3 for k in range(GRID.n)]
    older = [[1.0, 1.0, 8.0]] * GRID.n
    split = {**VLLM_TARGET, "model_name": "other"}  # a second label set of the same worker: added up
    answers: dict[MetricQuery, Answer] = {
        engine_query(TOKENS): tokens(),
        buckets_query(ITL): [
            *increments(ITL, ["0.01", "0.025"], current),
            *increments(ITL, ["0.01", "0.025"], current, split),
        ],
        buckets_query(OLD_TPOT): increments(OLD_TPOT, ["0.01", "0.025"], older),
    }
    fleet = map_fleet(results(answers), GRID)
    tpot = _counts(fleet.engine_row_histograms["tpot_histogram"])
    totals = [None if h is None else float(h.sum()) for h in tpot]
    assert totals == [8.0] * 5 + [8.0] * 5  # both label sets of the current name, then the older name
    first, last = tpot[0], tpot[-1]
    assert first is not None and last is not None
    np.testing.assert_allclose(first, histograms.rebin([0.01, 0.025], [4.0, 8.0], 8.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last, histograms.rebin([0.01, 0.025], [1.0, 1.0], 8.0), rtol=1e-5, atol=1e-6)


def test_counts_are_per_step_and_a_window_missing_a_bound_keeps_the_others() -> None:
    grid = TimeGrid(GRID.start, GRID.step, 2)
    cells = [
        (0, RangeSeries({"le": "0.1"}, grid.times(), np.array([2.0, math.nan]))),
        (0, RangeSeries({"le": "0.5"}, grid.times(), np.array([6.0, 6.0]))),
        (0, RangeSeries({"le": "+Inf"}, grid.times(), np.array([8.0, 8.0]))),
        (0, RangeSeries({"le": "bogus"}, grid.times(), np.array([99.0, 99.0]))),  # no bound: ignored
    ]
    placements = Placements()
    placements.row("w")
    for row, series in cells:
        placements.place(row, buckets_query(TTFT), series)
    ((early, late),) = [
        _counts(row) for row in window_histograms(placements.placed["ttft_histogram"], 1, grid, scale=0.5)
    ]
    assert early is not None and late is not None
    np.testing.assert_allclose(
        early, 0.5 * histograms.rebin([0.1, 0.5], [2.0, 6.0], 8.0), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(late, 0.5 * histograms.rebin([0.5], [6.0], 8.0), rtol=1e-5, atol=1e-6)
    # map_fleet scales by the step over the queries' window: a 120 s window read every 60 s counts half.
    answers: dict[MetricQuery, Answer] = {
        engine_query(TOKENS): tokens(),
        buckets_query(TTFT): increments(TTFT, TTFT_LE, [ttft_window(0)] * GRID.n),
    }
    halved = _counts(
        map_fleet(results(answers), GRID, range_s=2 * GRID.step).engine_row_histograms["ttft_histogram"]
    )
    assert all(h is not None and h.sum() == pytest.approx(13.0 / 2) for h in halved)


def test_one_window_read_alone() -> None:
    assert bound("+Inf") == math.inf and bound("2.5") == 2.5 and bound(None) is None and bound("x") is None
    assert window_histogram({0.1: 1.0}) is None  # no +Inf bucket
    assert window_histogram({0.1: 0.0, math.inf: 0.0}) is None  # nothing observed
    assert window_histogram({0.1: 3.0, 0.5: 2.0, math.inf: 4.0}) is None  # falls
    assert window_histogram({0.1: 3.0, math.inf: 2.0}) is None  # the total below a bucket
    noisy = window_histogram({0.1: 3.0, 0.5: 3.0 - 1e-12, math.inf: 4.0})  # float noise is no fall
    assert noisy is not None and noisy.sum() == pytest.approx(4.0)
    only_total = window_histogram({0.0: 0.0, math.inf: 5.0})  # a bound at 0 s is left out
    assert only_total is not None and only_total[-1] == 5.0
