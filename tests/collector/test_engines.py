"""Engine /metrics -> readings and window deltas, on the real vLLM and SGLang captures and variants."""

from __future__ import annotations

import math
import re

import httpx
import pytest

from collector.engines import EngineParseError, EngineScraper, quantile, read_engine, window_delta
from collector.promtext import parse
from fleet import histograms
from fleet.clock import FakeClock
from tests.analyzer.prometheus_fixtures import (
    SGLANG_KV_CAPACITY_TOKENS,
    SGLANG_MAX_RUNNING_REQUESTS,
    VLLM_CACHE_CONFIG_INFO,
    VLLM_KV_CAPACITY_TOKENS,
    cache_config_info,
    cache_config_labels,
)
from tests.collector.conftest import SGLANG_FIXTURE, VLLM_FIXTURE, fixture_text


def set_value(text: str, name: str, value: float, labels: str | None = None) -> str:
    """Replace the value of each sample of ``name`` (optionally only those whose labels hold ``labels``)."""
    pattern = re.compile(rf"^({re.escape(name)}(\{{[^}}]*\}})?) \S+$", re.M)

    def swap(match: re.Match[str]) -> str:
        if labels is not None and labels not in (match.group(2) or ""):
            return match.group(0)
        return f"{match.group(1)} {value}"

    return pattern.sub(swap, text)


def add_to_buckets(text: str, name: str, above: float, count: float) -> str:
    """Add ``count`` observations of a value just above ``above`` to a histogram."""

    def bump(match: re.Match[str]) -> str:
        le = math.inf if match.group(2) == "+Inf" else float(match.group(2))
        return f"{match.group(1)} {float(match.group(3)) + (count if le > above else 0.0)}"

    text = re.sub(
        rf'^({re.escape(name)}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}}) (\S+)$', bump, text, flags=re.M
    )
    return re.sub(
        rf"^({re.escape(name)}_count\{{[^}}]*\}}) (\S+)$",
        lambda m: f"{m.group(1)} {float(m.group(2)) + count}",
        text,
        flags=re.M,
    )


def reading(text: str, at: float, clock: FakeClock | None = None):  # type: ignore[no-untyped-def]
    return read_engine(parse(text), "http://127.0.0.1:8000/metrics", at, (clock or FakeClock()).now())


def test_vllm_real_capture() -> None:
    r = reading(fixture_text(VLLM_FIXTURE), 0.0)
    assert r.engine == "vllm" and r.model == "Qwen/Qwen3-0.6B"
    assert r.running == 0.0 and r.waiting == 0.0 and r.kv_usage == 0.0
    assert r.dynamo_components == frozenset({"backend"}) and r.engine_types == frozenset()
    assert sum(v for k, v in r.counters.items() if k[0] == "generation") == 600
    assert sum(v for k, v in r.counters.items() if k[0] == "prompt") == 66
    assert r.buckets["ttft"] and r.buckets["tpot"]
    # Nothing in it names a TP degree or the engine's GPUs: unknown, not 1.
    assert r.tp_ranks is None and r.identity.gpu_uuids == frozenset() and r.identity.pids == frozenset()


def test_sglang_real_capture() -> None:
    r = reading(fixture_text(SGLANG_FIXTURE), 0.0)
    assert r.engine == "sglang" and r.model == "Qwen/Qwen3-0.6B"
    assert r.engine_types == frozenset({"unified"})
    assert r.kv_usage == 0.0 and r.running == 0.0 and r.waiting == 0.0
    assert sum(v for k, v in r.counters.items() if k[0] == "prompt") == 33
    # Its scheduler's PID (its own PID namespace) is evidence for the engine-labels join.
    assert r.identity.pids == frozenset({697544}) and r.tp_ranks == 1


def test_vllm_window_counts_and_latency_quantiles() -> None:
    base = fixture_text(VLLM_FIXTURE)
    later = set_value(base, "vllm:prompt_tokens_total", 1066.0)
    later = set_value(later, "vllm:generation_tokens_total", 2600.0)
    later = set_value(later, "vllm:kv_cache_usage_perc", 0.42)
    later = set_value(later, "vllm:num_requests_running", 12.0)
    later = set_value(later, "vllm:num_preemptions_total", 3.0)
    later = add_to_buckets(later, "vllm:time_to_first_token_seconds", 0.25, 10.0)  # ten in (0.25, 0.5]
    delta = window_delta(reading(base, 100.0), reading(later, 110.0))
    assert delta.window_s == pytest.approx(10.0)
    assert delta.prompt_tokens == 1000 and delta.generation_tokens == 2000 and delta.preemptions == 3
    assert not delta.restarted
    assert delta.reading.kv_usage == 0.42 and delta.reading.running == 12.0
    assert delta.ttft_p50_s is not None and 0.25 < delta.ttft_p50_s <= 0.5
    assert delta.tpot_p50_s is None  # no inter-token observations in this window


def test_p90s_and_the_end_to_end_latency_come_from_the_windows_histograms() -> None:
    """histogram_quantile over the window's increments: 90 observations in (0.25, 0.5] and 10 in (0.5, 1]
    put the p90 at the top of the first bucket; an engine that exposes no end-to-end histogram has none."""

    def e2e(*counts: int) -> str:
        rows = (
            f'vllm:e2e_request_latency_seconds_bucket{{le="{le}",model_name="Qwen/Qwen3-0.6B"}} {n}\n'
            for le, n in zip(("1.0", "2.0", "4.0", "+Inf"), counts, strict=True)
        )
        return "# TYPE vllm:e2e_request_latency_seconds histogram\n" + "".join(rows)

    base = fixture_text(VLLM_FIXTURE)
    later = add_to_buckets(base, "vllm:time_to_first_token_seconds", 0.25, 90.0)
    later = add_to_buckets(later, "vllm:time_to_first_token_seconds", 0.5, 10.0)
    before = base + e2e(0, 0, 0, 0)
    after = later + e2e(0, 50, 100, 100)  # 50 in (1, 2], 50 in (2, 4]
    delta = window_delta(reading(before, 0.0), reading(after, 10.0))
    assert delta.ttft_p90_s is not None and delta.ttft_p50_s is not None
    assert 0.25 < delta.ttft_p50_s < delta.ttft_p90_s <= 0.5 + 1e-9
    assert delta.ttft_p99_s is not None and 0.5 < delta.ttft_p99_s <= 1.0
    assert delta.e2e_p90_s == pytest.approx(2.0 + 2.0 * (90 - 50) / 50)  # linear within (2, 4]
    assert delta.tpot_p90_s is None  # no inter-token observations in this window
    assert window_delta(reading(base, 0.0), reading(later, 10.0)).e2e_p90_s is None
    assert set(delta.latencies()) == {
        "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "e2e_p90_s",
        "ttft_histogram", "tpot_histogram", "e2e_histogram",
    }  # fmt: skip


def test_the_windows_histogram_increments_travel_with_the_sample_and_give_the_same_p90() -> None:
    """The contract carries the window's bucket increments as the engine buckets them; re-binned onto the
    shared grid they give the collector's own p90; a family the engine does not export is None, and one it
    exports with nothing observed in the window is an empty histogram (a measured nothing, not unknown)."""
    base = fixture_text(VLLM_FIXTURE)
    later = add_to_buckets(base, "vllm:time_to_first_token_seconds", 0.25, 90.0)
    later = add_to_buckets(later, "vllm:time_to_first_token_seconds", 0.5, 10.0)
    delta = window_delta(reading(base, 0.0), reading(later, 10.0))
    ttft = delta.histograms["ttft"]
    assert ttft is not None and ttft.count == 100.0
    assert 0.25 in ttft.le and ttft.counts[ttft.le.index(0.25)] == 0.0
    assert ttft.counts[ttft.le.index(0.5)] == 90.0 and ttft.counts[-1] == 100.0
    rebinned = histograms.rebin(ttft.le, ttft.counts, ttft.count)
    assert histograms.quantile(0.9, rebinned) == pytest.approx(delta.ttft_p90_s)
    assert histograms.quantile(0.99, rebinned) == pytest.approx(delta.ttft_p99_s)
    tpot = delta.histograms["tpot"]
    assert tpot is not None and tpot.count == 0.0  # exported, nothing observed in the window
    assert delta.histograms["e2e"] is None  # the fixture's engine exports no end-to-end histogram
    assert delta.latencies()["ttft_histogram"] is ttft


def test_counter_reset_counts_what_the_restarted_engine_did() -> None:
    base = fixture_text(VLLM_FIXTURE)
    restarted = set_value(base, "vllm:prompt_tokens_total", 40.0)
    restarted = set_value(restarted, "vllm:generation_tokens_total", 700.0)  # grew, but _created changed
    restarted = set_value(restarted, "vllm:generation_tokens_created", 1.9e9)
    delta = window_delta(reading(base, 0.0), reading(restarted, 10.0))
    assert delta.restarted
    assert delta.prompt_tokens == 40 and delta.generation_tokens == 700


def test_renamed_kv_cache_metric_is_accepted() -> None:
    old = fixture_text(VLLM_FIXTURE).replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    old = set_value(old, "vllm:gpu_cache_usage_perc", 0.8)
    assert reading(old, 0.0).kv_usage == 0.8


def test_sglang_disaggregated_engine_type_and_pd_queues() -> None:
    text = fixture_text(SGLANG_FIXTURE).replace('engine_type="unified"', 'engine_type="decode"')
    text = set_value(text, "sglang:num_queue_reqs", 2.0)
    text = set_value(text, "sglang:num_decode_prealloc_queue_reqs", 3.0)
    text = set_value(text, "sglang:token_usage", 0.9)
    r = reading(text, 0.0)
    assert r.engine_types == frozenset({"decode"}) and r.waiting == 5.0 and r.kv_usage == 0.9


def test_sglang_counts_tensor_parallel_rank_zero_only() -> None:
    text = fixture_text(SGLANG_FIXTURE)
    rank1 = "\n".join(
        line.replace('tp_rank="0"', 'tp_rank="1"')
        for line in text.splitlines()
        if "sglang:num_running_reqs{" in line
    )
    text = set_value(text, "sglang:num_running_reqs", 7.0) + rank1.replace(" 0.0", " 7.0") + "\n"
    r = reading(text, 0.0)
    assert r.running == 7.0 and r.tp_ranks == 2


def test_tensorrt_llm_metrics() -> None:
    text = (
        "# TYPE trtllm_prompt_tokens_total counter\n"
        'trtllm_prompt_tokens_total{model_name="llama",engine_type="trtllm"} 100\n'
        'trtllm_generation_tokens_total{model_name="llama",engine_type="trtllm"} 50\n'
        'trtllm_kv_cache_utilization{model_name="llama",engine_type="trtllm"} 0.25\n'
        'trtllm_num_requests_running{model_name="llama"} 4\n'
    )
    r = reading(text, 0.0)
    assert r.engine == "trtllm" and r.model == "llama" and r.kv_usage == 0.25 and r.running == 4
    assert r.engine_types == frozenset()  # engine_type="trtllm" is a backend tag, not a role


def test_sglang_kv_budget_is_one_ranks_max_total_num_tokens() -> None:
    text = fixture_text(SGLANG_FIXTURE)
    assert reading(text, 0.0).kv_capacity_tokens == SGLANG_KV_CAPACITY_TOKENS == 92962
    # Every TP rank holds its share of the KV heads for the same token slots: one rank's value, not a sum.
    total = next(line for line in text.splitlines() if line.startswith("sglang:max_total_num_tokens{"))
    ranks = "\n".join(total.replace('tp_rank="0"', f'tp_rank="{r}"') for r in (1, 2, 3))
    assert reading(text + ranks + "\n", 0.0).kv_capacity_tokens == 92962
    # Without the gauge the budget is unknown, never 0 tokens.
    assert reading(text.replace(total, ""), 0.0).kv_capacity_tokens is None


def test_vllm_kv_budget_is_blocks_times_block_size_from_cache_config_info() -> None:
    capture = fixture_text(VLLM_FIXTURE)
    assert reading(capture, 0.0).kv_capacity_tokens is None  # the fixture's excerpt omits the info gauge
    r = reading(capture + VLLM_CACHE_CONFIG_INFO, 0.0)
    assert r.kv_capacity_tokens == VLLM_KV_CAPACITY_TOKENS == 5943 * 16
    assert r.model == "Qwen/Qwen3-0.6B" and r.running == 0.0  # the info gauge changes nothing else
    # Data-parallel engines each repeat the front end's summed budget: read once, not added.
    two = cache_config_info(cache_config_labels(engine="0"), cache_config_labels(engine="1"))
    assert reading(capture + two, 0.0).kv_capacity_tokens == 95088
    # vLLM V1 before #15719 was fixed exposed num_gpu_blocks="None": no budget.
    unset = cache_config_info(cache_config_labels(num_gpu_blocks="None"))
    assert reading(capture + unset, 0.0).kv_capacity_tokens is None
    no_block_size = {k: v for k, v in cache_config_labels().items() if k != "block_size"}
    assert reading(capture + cache_config_info(no_block_size), 0.0).kv_capacity_tokens is None


def test_tensorrt_llm_kv_budget_is_max_blocks_times_tokens_per_block() -> None:
    base = 'trtllm_generation_tokens_total{model_name="llama"} 50\n'
    utilisation = base + 'trtllm_kv_cache_utilization{model_name="llama"} 0.25\n'
    assert reading(utilisation, 0.0).kv_capacity_tokens is None  # utilisation alone says no size
    blocks = 'trtllm_kv_cache_max_blocks{model_name="llama"} 3000\n'
    per_block = 'trtllm_kv_cache_tokens_per_block{model_name="llama"} 32\n'
    assert reading(utilisation + blocks + per_block, 0.0).kv_capacity_tokens == 96000
    assert reading(utilisation + blocks, 0.0).kv_capacity_tokens is None
    colon = (
        "trtllm:generation_tokens_total 5\ntrtllm:kv_cache_max_blocks 10\n"
        "trtllm:kv_cache_tokens_per_block 64\n"
    )
    assert reading(colon, 0.0).kv_capacity_tokens == 640


def test_sglang_concurrency_cap_is_its_max_running_requests_gauge() -> None:
    text = fixture_text(SGLANG_FIXTURE)
    assert reading(text, 0.0).max_running_requests is None  # current releases export no such gauge
    r = reading(text + SGLANG_MAX_RUNNING_REQUESTS, 0.0)
    assert r.max_running_requests == 4097
    assert (r.kv_capacity_tokens, r.running, r.model) == (92962, 0.0, "Qwen/Qwen3-0.6B")  # nothing else moves
    # Each scheduler reports the one cap: rank 0's is read, never a sum over ranks.
    ranks = "".join(
        f'sglang:max_running_requests{{model_name="Qwen/Qwen3-0.6B",pp_rank="0",tp_rank="{rank}"}} '
        f"{256.0 if rank == 0 else 999.0}\n"
        for rank in range(4)
    )
    assert reading(text + ranks, 0.0).max_running_requests == 256
    # The SLO estimate is not the cap.
    slo = 'sglang:max_running_requests_under_SLO{model_name="Qwen/Qwen3-0.6B",tp_rank="0"} 64.0\n'
    assert reading(text + slo, 0.0).max_running_requests is None


@pytest.mark.parametrize(
    ("value", "cap"),
    [("0.0", None), ("-3.0", None), ("12.5", None), ("NaN", None), ("+Inf", None), ("1.0", 1),
     (f"{2**31 - 1}.0", 2**31 - 1), (f"{2**31}.0", None)],
)  # fmt: skip
def test_a_cap_that_is_no_whole_count_the_contract_holds_is_unknown(value: str, cap: int | None) -> None:
    text = fixture_text(SGLANG_FIXTURE) + SGLANG_MAX_RUNNING_REQUESTS.replace("4097.0", value)
    assert reading(text, 0.0).max_running_requests == cap


def test_vllm_concurrency_cap_is_a_max_num_seqs_label_where_an_info_gauge_carries_one() -> None:
    capture = fixture_text(VLLM_FIXTURE)
    # vLLM's own cache_config_info has no max_num_seqs (it is the scheduler's): stock vLLM reports none.
    assert reading(capture + VLLM_CACHE_CONFIG_INFO, 0.0).max_running_requests is None
    labelled = cache_config_info(cache_config_labels(max_num_seqs="256"))
    r = reading(capture + labelled, 0.0)
    assert (r.max_running_requests, r.kv_capacity_tokens) == (256, VLLM_KV_CAPACITY_TOKENS)
    scheduler = (
        "# TYPE vllm:scheduler_config_info gauge\n"
        'vllm:scheduler_config_info{engine="0",max_num_batched_tokens="8192",max_num_seqs="128"} 1.0\n'
    )
    assert reading(capture + labelled + scheduler, 0.0).max_running_requests == 128  # the scheduler's first
    assert reading(capture + VLLM_CACHE_CONFIG_INFO + scheduler, 0.0).max_running_requests == 128
    for bad in ("None", "0", "", "256.0", "-1"):
        unusable = cache_config_info(cache_config_labels(max_num_seqs=bad))
        assert reading(capture + unusable, 0.0).max_running_requests is None, bad


def test_tensorrt_llm_concurrency_cap_is_max_num_active_requests_else_its_max_batch_size() -> None:
    labels = '{engine_type="trtllm",model_name="llama"}'
    base = f"trtllm_generation_tokens_total{labels} 50\ntrtllm_num_requests_running{labels} 4\n"
    assert reading(base, 0.0).max_running_requests is None  # without enable_iter_perf_stats: none
    static = f"trtllm_max_batch_size_static{labels} 2048.0\n"
    runtime = f"trtllm_max_batch_size_runtime{labels} 512.0\n"
    active = f"trtllm_max_num_active_requests{labels} 1024.0\n"
    assert reading(base + static, 0.0).max_running_requests == 2048
    assert reading(base + static + runtime, 0.0).max_running_requests == 512
    assert reading(base + static + runtime + active, 0.0).max_running_requests == 1024
    colon = "trtllm:generation_tokens_total 5\ntrtllm:max_num_active_requests 64\n"
    assert reading(colon, 0.0).max_running_requests == 64


def test_exposition_without_token_counters_is_refused() -> None:
    with pytest.raises(EngineParseError):
        reading("process_cpu_seconds_total 12\n", 0.0)


def test_quantile_interpolates_like_histogram_quantile() -> None:
    buckets = {0.1: 0.0, 0.5: 50.0, 1.0: 100.0, math.inf: 100.0}
    assert quantile(0.5, buckets) == pytest.approx(0.5)
    assert quantile(0.25, buckets) == pytest.approx(0.3)
    assert quantile(0.99, {1.0: 0.0, math.inf: 10.0}) == 1.0
    assert quantile(0.5, {1.0: 0.0, math.inf: 0.0}) is None


def test_scraper_endpoint_down_or_garbage_counts_errors_and_keeps_counts(clock: FakeClock) -> None:
    base = fixture_text(VLLM_FIXTURE)
    responses = [
        httpx.Response(200, text=base),
        httpx.Response(200, text="<html>upstream connect error</html>"),
        None,  # connection refused
        httpx.Response(200, text=set_value(base, "vllm:generation_tokens_total", 900.0)),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        response = responses.pop(0)
        if response is None:
            raise httpx.ConnectError("connection refused", request=request)
        return response

    client = httpx.Client(transport=httpx.MockTransport(handler))
    scraper = EngineScraper(["http://127.0.0.1:8000/metrics"], client, clock)
    assert not scraper.start()
    clock.advance(10.0)
    deltas, errors = scraper.collect()
    assert deltas == [] and errors["engine_scrape"] == 1
    clock.advance(10.0)
    deltas, errors = scraper.collect()
    assert deltas == [] and errors["engine_scrape"] == 1
    clock.advance(10.0)
    deltas, errors = scraper.collect()
    assert not errors
    [delta] = deltas
    assert delta.generation_tokens == 300 and delta.window_s == pytest.approx(30.0)  # the gap is covered


def test_sglang_retractions_are_its_preemptions() -> None:
    """num_retractions is a histogram of retractions per finished request: its _sum counts retractions."""
    histogram = (
        "# TYPE sglang:num_retractions histogram\n"
        'sglang:num_retractions_bucket{{le="0.0",model_name="Qwen/Qwen3-0.6B"}} 10.0\n'
        'sglang:num_retractions_bucket{{le="+Inf",model_name="Qwen/Qwen3-0.6B"}} 12.0\n'
        'sglang:num_retractions_sum{{model_name="Qwen/Qwen3-0.6B"}} {total}\n'
        'sglang:num_retractions_created{{model_name="Qwen/Qwen3-0.6B"}} 1.7e9\n'
    )
    base = fixture_text(SGLANG_FIXTURE)
    delta = window_delta(
        reading(base + histogram.format(total=3.0), 0.0), reading(base + histogram.format(total=8.0), 10.0)
    )
    assert delta.preemptions == 5
    assert window_delta(reading(base, 0.0), reading(base, 10.0)).preemptions is None  # not exposed: unknown


def test_older_sglang_time_per_output_token_histogram_is_its_tpot() -> None:
    base = fixture_text(SGLANG_FIXTURE).replace(
        "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"
    )
    later = add_to_buckets(base, "sglang:time_per_output_token_seconds", 0.01, 50.0)
    delta = window_delta(reading(base, 0.0), reading(later, 10.0))
    assert delta.tpot_p50_s is not None and delta.tpot_p50_s > 0.01


def test_tensorrt_llm_colon_spelling_and_aliases_read_once() -> None:
    text = (
        'trtllm:generation_tokens_total{model_name="llama"} 50\n'
        'trtllm:num_requests_running{model_name="llama"} 4\n'
        'trtllm:num_active_requests{model_name="llama"} 4\n'  # an alias of the same gauge: not added
    )
    r = reading(text, 0.0)
    assert r.engine == "trtllm" and r.running == 4
    assert sum(v for k, v in r.counters.items() if k[0] == "generation") == 50
