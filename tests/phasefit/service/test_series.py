"""Bucketing for the read API (pure)."""

from __future__ import annotations

import pytest

from phasefit.service.series import (
    Episode,
    RunTotals,
    bucket_start,
    cut_page,
    engine_points,
    gpu_points,
    lost_from_episodes,
    lost_from_runs,
    parse_step,
    to_datetime,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60", 60), ("30s", 30), ("5m", 300), ("1h", 3600), ("1d", 86400), ("1500ms", 1.5), ("2.5m", 150)],
)
def test_steps(text: str, seconds: float) -> None:
    assert parse_step(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-1m", "500ms", "m", " 2.5m ", "0.5h", "01", "0", "٣٠"])
def test_bad_steps(text: str) -> None:
    with pytest.raises(ValueError, match="step"):
        parse_step(text)


def engine_rows(*rows: tuple[float, int, float | None]) -> dict[str, list[object]]:
    names = [
        "worker_id",
        "ts",
        "window_s",
        "role",
        "role_source",
        "prompt_tokens",
        "generation_tokens",
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "preemptions",
        "ttft_p50_s",
        "ttft_p99_s",
        "tpot_p50_s",
        "tpot_p99_s",
    ]
    values = [
        ("w", ts, 10.0, "decode", "sim", 100, tokens, 4, None, kv, None, None, 0.5 + ts / 100, None, None)
        for ts, tokens, kv in rows
    ]
    return {name: [row[i] for row in values] for i, name in enumerate(names)}


def test_engine_buckets_sum_counts_and_average_gauges_over_non_null_values() -> None:
    points = engine_points(engine_rows((0, 10, 0.5), (10, 20, None), (20, 30, 0.7)), 20, rollup=False)
    assert [p["samples"] for p in points] == [2, 1]
    first = points[0]
    assert first["generation_tokens"] == 30 and first["generation_tokens_per_s"] == 1.5
    assert first["kv_cache_usage"] == 0.5  # the null is not a zero
    assert first["preemptions"] is None and first["requests_waiting"] is None
    assert first["ttft_p99_s"] == 0.6  # the maximum
    raw = engine_points(engine_rows((0, 10, 0.5)), None, rollup=False)
    assert raw[0]["ts"] == to_datetime(0) and raw[0]["samples"] == 1


def test_gpu_rollups_are_weighted_by_their_sample_counts() -> None:
    columns = {
        "ts": [0.0, 60.0],
        "gpu_uuid": ["g", "g"],
        "worker_id": ["w", "w"],
        "samples": [1, 3],
        "window_s_sum": [10.0, 30.0],
        "sm_active_avg": [0.0, 1.0],
        "tensor_active_avg": [None, None],
        "dram_active_avg": [0.2, 0.2],
        "gpu_util_avg": [1.0, 1.0],
        "power_w_avg": [100.0, 200.0],
        "mem_used_bytes_max": [5, 7],
        "lost_samples": [1, 0],
        "degraded_samples": [0, 2],
    }
    [point] = gpu_points(columns, 120, rollup=True)
    assert point["samples"] == 4 and point["sm_active"] == 0.75 and point["tensor_active"] is None
    assert point["power_w"] == 175.0 and point["mem_used_bytes"] == 7
    assert (point["lost_samples"], point["degraded_samples"]) == (1, 2)


def test_pages_are_cut_at_a_timestamp_boundary() -> None:
    engine = [{"ts": t} for t in (1, 2, 3)]
    gpus = [{"ts": t, "g": g} for t in (1, 2, 3) for g in "ab"]
    first_engine, first_gpus, cut = cut_page(engine, gpus, 2)
    assert (len(first_engine), len(first_gpus), cut) == (2, 4, 3)
    assert cut_page(engine, gpus, 3)[2] is None


def test_lost_tokens_from_episodes_take_the_largest_per_subject_and_add_subjects() -> None:
    episodes = [
        Episode("worker:a", "p", 0, 250, 10, 5, 20),
        Episode("worker:a", "p", 100, 150, 30, 15, 60),  # overlaps the first: the larger counts
        Episode("worker:b", None, 120, 130, 1, 1, 1),
    ]
    points = lost_from_episodes(episodes, 0, 400, 100)
    assert [p["lost_tokens_per_s"] for p in points] == [10, 31, 10, None]
    assert points[1]["pools"] == {"p": 30, "unpooled": 1}
    assert points[1]["lost_tokens_per_s_high"] == 61


def test_lost_tokens_from_runs_average_the_runs_in_each_bucket() -> None:
    runs = [
        RunTotals(10, 100, None, None, {"p": 100}),
        RunTotals(50, 300, None, None, {"p": 300}),
        RunTotals(250, 50, 40, 60, {}),
    ]
    points = lost_from_runs(runs, 0, 300, 100)
    assert [p["lost_tokens_per_s"] for p in points] == [200, None, 50]
    assert points[0]["pools"] == {"p": 200} and points[2]["lost_tokens_per_s_low"] == 40
    assert bucket_start(-1, 60) == -60


def test_lost_output_tokens_and_requests_are_summed_only_when_every_term_is_known() -> None:
    episodes = [
        Episode("worker:a", "p", 0, 250, 10, 5, 20, output=6.0, requests=0.01),
        Episode("worker:b", "p", 120, 130, 4, 2, 8, output=None, requests=None),
    ]
    points = lost_from_episodes(episodes, 0, 300, 100)
    assert [p["lost_output_tokens_per_s"] for p in points] == [6.0, None, 6.0]
    assert points[0]["lost_requests_per_s"] == 0.01 and points[1]["lost_requests_per_s"] is None
    ranged = [Episode("worker:a", "p", 0, 250, 10, 5, 20), Episode("worker:b", "p", 120, 130, 4, None, None)]
    low = [p["lost_tokens_per_s_low"] for p in lost_from_episodes(ranged, 0, 300, 100)]
    assert low == [5.0, None, 5.0]  # a range a finding did not give is unknown, never 0
    runs = [RunTotals(10, 100, None, None, {}, output=40.0, requests=0.2), RunTotals(20, 80, None, None, {})]
    (point,) = lost_from_runs(runs, 0, 100, 100)
    assert point["lost_output_tokens_per_s"] == 40.0 and point["lost_requests_per_s"] == 0.2


def test_engine_p90s_are_the_mean_of_their_windows_and_unknown_where_none_is_reported() -> None:
    raw = engine_rows((0, 10, 0.5), (10, 20, 0.5), (20, 30, 0.5))
    raw["ttft_p90_s"] = [0.2, 0.4, None]
    raw["e2e_p90_s"] = [None, None, None]
    first, second = engine_points(raw, 20, rollup=False)
    assert first["ttft_p90_s"] == pytest.approx(0.3) and second["ttft_p90_s"] is None
    assert first["e2e_p90_s"] is None and first["tpot_p90_s"] is None  # not reported: unknown, never 0
    rollup = {
        "ts": [0.0, 60.0], "worker_id": ["w", "w"], "role": ["decode", "decode"], "samples": [1, 3],
        "window_s_sum": [60.0, 180.0], "prompt_tokens_sum": [1, 1], "generation_tokens_sum": [1, 1],
        "preemptions_sum": [None, None], "requests_running_avg": [1.0, 1.0], "requests_waiting_avg": [0, 0],
        "kv_cache_usage_avg": [None, None], "ttft_p99_s_max": [None, None], "tpot_p99_s_max": [None, None],
        "tpot_p90_s_avg": [0.02, 0.06],
    }  # fmt: skip
    (point,) = engine_points(rollup, 3600, rollup=True)
    assert point["tpot_p90_s"] == pytest.approx((0.02 + 3 * 0.06) / 4)  # weighted by the samples
