"""Zero-agent test data built from the real captures in tests/fixtures/metrics/.

- dcgm-exporter expositions: the DigitalOcean H100 capture's label set (``gpu``, ``UUID``, ``pci_bus_id``,
  ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``), re-rendered per GPU with the
  profiling fields phasefit needs, and with the variants real fleets drift between: ``hostname`` (renamed
  2026-05), ``uuid`` (``-o``), Kubernetes ``pod``/``namespace``/``container``, sanitised pod labels, MIG.
- vLLM and SGLang expositions: the Dynamo captures verbatim except for the values of the series phasefit
  reads (so counters can advance between scrapes) and SGLang's ``engine_type`` (disaggregated modes). The
  vLLM exposition gets back its ``vllm:cache_config_info`` (:data:`VLLM_CACHE_CONFIG_INFO`), verbatim from
  the part of the same capture the fixture's excerpt omits.
- query_range answers: the labels Prometheus would return for those series (fixture labels plus target
  labels, no ``__name__`` after a function), with the values given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
DCGM_FIXTURE = FIXTURES / "dcgm-exporter_h100_standalone_digitalocean_docs_excerpt.prom"
VLLM_FIXTURE = FIXTURES / "vllm_v1_via_dynamo_worker_qwen3-0.6b.prom"
SGLANG_FIXTURE = FIXTURES / "sglang_via_dynamo_worker_qwen3-0.6b.prom"

H100_NAME = "NVIDIA H100 80GB HBM3"
H200_NAME = "NVIDIA H200"
H200_UUID = "GPU-5b1c3c1e-8f0a-4d2e-9a61-2d0f4f7b9c11"
H100_SPARE_UUID = "GPU-0c8e2f4a-1b3d-4e5f-8a9b-7c6d5e4f3a21"
DCGM_FIELDS = {
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "gr_engine_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "fb_used_mib": "DCGM_FI_DEV_FB_USED",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
}
_HELP = {
    "DCGM_FI_PROF_SM_ACTIVE": ("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is active."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
}


# vLLM's KV cache config, verbatim from the capture the vLLM fixture is an excerpt of (github.com/ai-dynamo/
# dynamo docs/observability/metrics_examples/vllm.log at a7b23c000e38497cc7442a98843b70a70a0f0ab6, in the
# middle block the excerpt omits). An info gauge: vllm/v1/metrics/loggers.py ``log_metrics_info
# ("cache_config", ...)`` writes CacheConfig.metrics_info() (every field as a string) as its labels, one
# series per data-parallel ``engine``, value 1. Its 5943 blocks are the 5943 the same capture's
# ``dynamo_component_kvstats_total_blocks`` reports; of 16 tokens each: 95088 tokens.
VLLM_CACHE_CONFIG_INFO = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",'
    'cpu_kvcache_space_bytes="None",cpu_offload_gb="0.0",enable_prefix_caching="False",engine="0",'
    'gpu_memory_utilization="0.24",is_attention_free="False",kv_cache_memory_bytes="None",'
    'kv_offloading_backend="None",kv_offloading_size="None",kv_sharing_fast_prefill="False",'
    'mamba_block_size="None",mamba_cache_dtype="auto",mamba_page_size_padded="None",'
    'mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="5943",num_gpu_blocks_override="None",'
    'prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4.0"} 1.0\n'
)
VLLM_KV_CAPACITY_TOKENS = 5943 * 16
SGLANG_KV_CAPACITY_TOKENS = 92962  # sglang:max_total_num_tokens in the SGLang capture
# SGLang's concurrency cap as the first SGLang releases with metrics exported it, verbatim from the example in
# sgl-project/sglang docs/references/production_metrics.md of that time (a google/gemma-2-9b-it server; its
# gauges then carried a ``name`` label). Later releases export no such gauge on /metrics (the Dynamo capture
# has none).
SGLANG_MAX_RUNNING_REQUESTS = (
    "# HELP sglang:max_running_requests Maximum running requests\n"
    "# TYPE sglang:max_running_requests gauge\n"
    'sglang:max_running_requests{name="google/gemma-2-9b-it"} 4097.0\n'
)


def cache_config_labels(**changes: str) -> dict[str, str]:
    """The labels of :data:`VLLM_CACHE_CONFIG_INFO`'s series, with ``changes``."""
    (family,) = text_string_to_metric_families(VLLM_CACHE_CONFIG_INFO)
    return {**family.samples[0].labels, **changes}


def cache_config_info(*label_sets: Mapping[str, str]) -> str:
    """``vllm:cache_config_info`` with one series per label set (none given: the capture's)."""
    lines = VLLM_CACHE_CONFIG_INFO.splitlines()[:2]
    for labels in label_sets or (cache_config_labels(),):
        lines.append(f"vllm:cache_config_info{{{_render(labels)}}} 1.0")
    return "\n".join(lines) + "\n"


def samples(path: Path, name: str) -> list[dict[str, str]]:
    """Label sets of the samples called ``name`` in a fixture exposition."""
    text = path.read_text(encoding="utf-8")
    return [
        dict(s.labels)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def dcgm_label_template() -> dict[str, str]:
    """The real capture's label set of GPU 0 (insertion order as exposed)."""
    return samples(DCGM_FIXTURE, "DCGM_FI_DEV_SM_CLOCK")[0]


@dataclass(frozen=True)
class FixtureGpu:
    index: int
    uuid: str
    model_name: str
    values: Mapping[str, float]  # keys of DCGM_FIELDS; a missing key is a field the exporter lacks
    pod: tuple[str, str, str] | None = None  # namespace, pod, container
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    mig: tuple[str, str] | None = None  # GPU_I_ID, GPU_I_PROFILE


def dcgm_gpu_labels(
    gpu: FixtureGpu, *, hostname: str, hostname_label: str = "Hostname", uuid_label: str = "UUID"
) -> dict[str, str]:
    template = dcgm_label_template()
    labels: dict[str, str] = {}
    for key, value in template.items():
        if key == "UUID":
            labels[uuid_label] = gpu.uuid
        elif key == "Hostname":
            labels[hostname_label] = hostname
        elif key == "gpu":
            labels["gpu"] = str(gpu.index)
        elif key == "device":
            labels["device"] = f"nvidia{gpu.index}"
        elif key == "pci_bus_id":
            labels["pci_bus_id"] = f"00000000:{0x09 + gpu.index:02X}:00.0"
        elif key == "modelName":
            labels["modelName"] = gpu.model_name
        else:
            labels[key] = value
    if gpu.mig is not None:
        labels["GPU_I_PROFILE"], labels["GPU_I_ID"] = gpu.mig[1], gpu.mig[0]
    if gpu.pod is not None:
        labels["namespace"], labels["pod"], labels["container"] = gpu.pod
    labels.update(gpu.pod_labels)
    return labels


def _render(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def dcgm_exposition(
    gpus: Sequence[FixtureGpu], *, hostname: str, hostname_label: str = "Hostname", uuid_label: str = "UUID"
) -> str:
    lines: list[str] = []
    for key, metric in DCGM_FIELDS.items():
        kind, text = _HELP[metric]
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
        for gpu in gpus:
            if key not in gpu.values:
                continue
            labels = dcgm_gpu_labels(
                gpu, hostname=hostname, hostname_label=hostname_label, uuid_label=uuid_label
            )
            value = gpu.values[key]
            rendered = f"{value:.6f}" if metric.startswith("DCGM_FI_PROF") else str(round(value))
            lines.append(f"{metric}{{{_render(labels)}}} {rendered}")
    return "\n".join(lines) + "\n"


def dcgm_capture(labels: Mapping[str, str]) -> str:
    """The real H100 capture verbatim (its clock fields only: no activity field), every series given
    ``labels`` besides its own (Kubernetes mapping: pod, namespace, container, pod labels)."""
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return re.sub(
        r"^(DCGM_\w+\{[^}]*)\}", rf"\1{extra}}}", DCGM_FIXTURE.read_text(encoding="utf-8"), flags=re.M
    )


def add_observations(text: str, histogram: str, value: float, count: float) -> str:
    """``count`` more observations of ``value`` in every series of ``histogram`` (buckets, _count, _sum)."""

    def bucket(match: re.Match[str]) -> str:
        le = float("inf") if match.group(2) == "+Inf" else float(match.group(2))
        return f"{match.group(1)} {float(match.group(3)) + (count if value <= le else 0.0)!r}"

    def add(amount: float) -> Callable[[re.Match[str]], str]:
        return lambda match: f"{match.group(1)} {float(match.group(2)) + amount!r}"

    name = re.escape(histogram)
    text = re.sub(rf'^({name}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}}) (\S+)$', bucket, text, flags=re.M)
    text = re.sub(rf"^({name}_count\{{[^}}]*\}}) (\S+)$", add(count), text, flags=re.M)
    return re.sub(rf"^({name}_sum\{{[^}}]*\}}) (\S+)$", add(count * value), text, flags=re.M)


def _set_values(text: str, values: Mapping[str, float]) -> str:
    for name, value in values.items():
        pattern = re.compile(rf"^({re.escape(name)}\{{[^}}]*\}}) \S+$", re.MULTILINE)
        text, count = pattern.subn(rf"\1 {float(value)!r}", text)
        if count == 0:
            raise AssertionError(f"{name} is not in the fixture")
    return text


def vllm_exposition(
    values: Mapping[str, float], *, legacy_kv_name: bool = False, cache_config: bool = True
) -> str:
    """The vLLM capture with the given series' values (keys: metric names as exposed), and with its
    ``vllm:cache_config_info`` unless ``cache_config`` is false."""
    text = _set_values(VLLM_FIXTURE.read_text(encoding="utf-8"), values)
    if cache_config:
        text += VLLM_CACHE_CONFIG_INFO
    return text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc") if legacy_kv_name else text


def sglang_exposition(values: Mapping[str, float], *, engine_type: str = "unified") -> str:
    text = _set_values(SGLANG_FIXTURE.read_text(encoding="utf-8"), values)
    return text.replace('engine_type="unified"', f'engine_type="{engine_type}"')


# --- query_range answers -------------------------------------------------------------------------------


def matrix(series: Iterable[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]) -> dict[str, Any]:
    """A /api/v1/query_range answer (values as Prometheus prints them: strings)."""
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": dict(labels), "values": [[t, _prom_float(v)] for t, v in points]}
                for labels, points in series
            ],
        },
    }


def _prom_float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def points(times: Sequence[float], value: float | Sequence[float]) -> list[tuple[float, float]]:
    values = [value] * len(times) if isinstance(value, int | float) else list(value)
    return list(zip(times, values, strict=True))
