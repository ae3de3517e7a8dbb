"""The Prometheus exporter: agreed names and labels, absent != 0, fresh per scrape, bounded cardinality."""

from __future__ import annotations

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collector.exporter import ExporterState, GpuView, StateHolder, WorkerView, build_registry, serve
from collector.window import REASON_GPM_UNSUPPORTED
from fleet.clock import FakeClock
from fleet.contract import GpuSample, GpuState, TelemetrySource


def gpu(index: int, **fields: object) -> GpuSample:
    base: dict[str, object] = {
        "ts": FakeClock().now(), "window_s": 10.0, "node": "node-a", "gpu_uuid": f"GPU-{index}",
        "gpu_index": index, "gpu_name": "NVIDIA H200", "source": TelemetrySource.NVML_GPM,
    }  # fmt: skip
    base.update(fields)
    return GpuSample.model_validate(base)


def scrape(holder: StateHolder, max_series: int = 2048) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(build_registry(holder, max_series)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def state(**fields: object) -> ExporterState:
    views = (
        GpuView(gpu(0, sm_active=0.5, tensor_active=0.4, dram_active=0.2, gpu_util=1.0, power_w=600.0,
                    mem_used_bytes=10), "H200-SXM", "llm/prefill-0", "prefill", "llama"),
        GpuView(gpu(1, state=GpuState.LOST), "H200-SXM"),
        GpuView(gpu(2, source=TelemetrySource.NVML_BASIC, gpu_util=0.9, state=GpuState.DEGRADED), "H200-SXM",
                reasons=frozenset({REASON_GPM_UNSUPPORTED})),
    )  # fmt: skip
    workers = (
        WorkerView(
            "llm/prefill-0", "prefill", "pod-label", "llama", "vllm", "H200-SXM", 1000.0, 20.0, 0.3, 4.0, 0.0
        ),
    )
    values: dict[str, object] = {
        "node": "node-a", "up": True, "gpus": views, "workers": workers,
        "errors": {("nvml", "GPU-2", "call_timeout"): 2, ("engine_scrape", "http://127.0.0.1:8000/metrics",
                                                             "http_401"): 1},
        "targets_up": {("engine_scrape", "http://127.0.0.1:8000/metrics"): False, ("nvml", "GPU-0"): True},
        "last_collect_unix": 1.7e9, "spool_records": 5, "spool_dropped": {"spool_full": 3, "rejected": 0},
    }  # fmt: skip
    values.update(fields)
    return ExporterState(**values)  # type: ignore[arg-type]


def test_agreed_names_and_labels() -> None:
    metrics = scrape(StateHolder(state()))
    [(labels, value)] = [m for m in metrics["phasefit_gpu_tensor_active_ratio"] if m[0]["gpu"] == "GPU-0"]
    assert labels == {"node": "node-a", "gpu": "GPU-0", "sku": "H200-SXM", "worker": "llm/prefill-0",
                      "role": "prefill", "model": "llama"}  # fmt: skip
    assert value == 0.4
    info = {m[0]["gpu"]: m[0] for m in metrics["phasefit_gpu_info"]}
    assert info["GPU-2"]["source"] == "nvml-basic" and info["GPU-0"]["gpu_name"] == "NVIDIA H200"
    for name in (
        "phasefit_gpu_sm_active_ratio", "phasefit_gpu_dram_active_ratio", "phasefit_gpu_utilization_ratio",
        "phasefit_gpu_memory_used_bytes", "phasefit_gpu_power_watts", "phasefit_gpu_lost",
        "phasefit_gpu_telemetry_degraded", "phasefit_worker_info", "phasefit_worker_prompt_tokens_total",
        "phasefit_worker_generation_tokens_total", "phasefit_worker_kv_cache_usage_ratio",
        "phasefit_worker_requests_running", "phasefit_worker_requests_waiting", "phasefit_collector_up",
        "phasefit_collector_errors_total", "phasefit_collector_last_collect_timestamp_seconds",
        "phasefit_collector_spool_records", "phasefit_collector_spool_dropped_records_total",
        "phasefit_collector_target_up",
    ):  # fmt: skip
        assert name in metrics, name
    assert all(":" not in name for name in metrics)
    worker = metrics["phasefit_worker_info"][0][0]
    assert worker == {
        "node": "node-a",
        "worker": "llm/prefill-0",
        "role": "prefill",
        "role_source": "pod-label",
        "model": "llama",
        "engine": "vllm",
        "sku": "H200-SXM",
    }
    assert metrics["phasefit_worker_prompt_tokens_total"][0][1] == 1000.0
    errors = {
        (m[0]["stage"], m[0]["target"], m[0]["reason"]): m[1]
        for m in metrics["phasefit_collector_errors_total"]
    }
    assert errors == {
        ("nvml", "GPU-2", "call_timeout"): 2.0,
        ("engine_scrape", "http://127.0.0.1:8000/metrics", "http_401"): 1.0,
    }
    up = {(m[0]["stage"], m[0]["target"]): m[1] for m in metrics["phasefit_collector_target_up"]}
    assert up == {("engine_scrape", "http://127.0.0.1:8000/metrics"): 0.0, ("nvml", "GPU-0"): 1.0}
    dropped = {m[0]["reason"]: m[1] for m in metrics["phasefit_collector_spool_dropped_records_total"]}
    assert dropped == {"spool_full": 3.0, "rejected": 0.0}


def test_missing_values_are_absent_not_zero() -> None:
    metrics = scrape(StateHolder(state()))
    assert "phasefit_gpu_graphics_engine_active_ratio" not in metrics  # no GPU has it: absent, not 0
    assert {m[0]["gpu"] for m in metrics["phasefit_gpu_tensor_active_ratio"]} == {"GPU-0"}
    assert {m[0]["gpu"] for m in metrics["phasefit_gpu_utilization_ratio"]} == {"GPU-0", "GPU-2"}
    lost = {m[0]["gpu"]: m[1] for m in metrics["phasefit_gpu_lost"]}
    assert lost == {"GPU-0": 0.0, "GPU-1": 1.0, "GPU-2": 0.0}
    degraded = {(m[0]["gpu"], m[0]["reason"]): m[1] for m in metrics["phasefit_gpu_telemetry_degraded"]}
    assert degraded[("GPU-2", "gpm_unsupported")] == 1.0 and degraded[("GPU-0", "gpm_unsupported")] == 0.0


def test_fresh_families_per_scrape() -> None:
    holder = StateHolder(state())
    registry = build_registry(holder)
    assert b"GPU-1" in generate_latest(registry)
    holder.publish(state(gpus=(), up=False))
    text = generate_latest(registry).decode()
    assert "GPU-1" not in text and "phasefit_collector_up 0.0" in text


def test_cardinality_is_bounded() -> None:
    views = tuple(GpuView(gpu(i, sm_active=0.1), "H200-SXM", worker_id="w" * 300) for i in range(50))
    metrics = scrape(StateHolder(state(gpus=views, workers=())), max_series=10)
    assert len(metrics["phasefit_gpu_sm_active_ratio"]) == 10
    assert len(metrics["phasefit_gpu_info"][0][0]["worker"]) == 128
    truncated = {(m[0]["stage"], m[0]["reason"]): m[1] for m in metrics["phasefit_collector_errors_total"]}
    assert truncated[("exporter", "truncated")] > 0


def test_served_over_http() -> None:
    holder = StateHolder(state())
    server, thread = serve(build_registry(holder), "127.0.0.1", 0)
    try:
        port = server.server_port
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0)
        assert response.status_code == 200 and "phasefit_gpu_info" in response.text
    finally:
        server.shutdown()
        thread.join(timeout=5)
