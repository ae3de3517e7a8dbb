"""Each serving engine's ``/metrics`` names per engine_sample field: the one table the collector's engine
parser (collector/engines.py) and zero-agent mode's queries (analyzer/prometheus_metrics.py) are built from.

A field is read from one or more *parts* that add up (SGLang's requests waiting: the scheduler queue plus,
under PD disaggregation, the prefill and decode prealloc queues; a request in the decode transfer queue or the
prefill inflight queue has its prefill done and is not counted); each part has *aliases*, preferred first,
of which the first the engine exposes is read. Counter names carry their ``_total`` (or a histogram's
``_sum``); histogram names are base names (``_bucket`` is appended by the reader).

Sources: vLLM V1 ``vllm/v1/metrics/loggers.py`` (``kv_cache_usage_perc``, before it ``gpu_cache_usage_perc``;
``inter_token_latency_seconds``, before it ``time_per_output_token_seconds``); SGLang
``python/sglang/srt/metrics/collector.py`` (``num_retractions`` is a histogram of retractions per finished
request, so its ``_sum`` counts retractions; older releases call the inter-token histogram
``time_per_output_token_seconds``; the ``sglang_`` spelling is reported for newer releases, unverified);
TensorRT-LLM through trtllm-serve or Dynamo, which spells its prefix ``trtllm_`` (newer) or ``trtllm:``.
The real vLLM and SGLang captures in tests/fixtures/metrics are checked against this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fleet.vocabulary.units import Kind, Unit


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


class EngineField(StrEnum):
    """An engine_sample field (TTFT and TPOT: the histograms behind ``*_p50_s`` / ``*_p99_s``)."""

    PROMPT_TOKENS = "prompt_tokens"
    GENERATION_TOKENS = "generation_tokens"
    PREEMPTIONS = "preemptions"
    REQUESTS_RUNNING = "requests_running"
    REQUESTS_WAITING = "requests_waiting"
    KV_CACHE_USAGE = "kv_cache_usage"
    TTFT = "ttft"
    TPOT = "tpot"


FIELD_KINDS: dict[EngineField, tuple[Kind, Unit]] = {
    EngineField.PROMPT_TOKENS: (Kind.COUNTER, Unit.COUNT),
    EngineField.GENERATION_TOKENS: (Kind.COUNTER, Unit.COUNT),
    EngineField.PREEMPTIONS: (Kind.COUNTER, Unit.COUNT),
    EngineField.REQUESTS_RUNNING: (Kind.GAUGE, Unit.COUNT),
    EngineField.REQUESTS_WAITING: (Kind.GAUGE, Unit.COUNT),
    EngineField.KV_CACHE_USAGE: (Kind.GAUGE, Unit.RATIO),
    EngineField.TTFT: (Kind.HISTOGRAM, Unit.SECONDS),
    EngineField.TPOT: (Kind.HISTOGRAM, Unit.SECONDS),
}
# The quantiles the data contract carries for each latency histogram (engine_sample ttft_p50_s, ...).
LATENCY_QUANTILES: dict[EngineField, dict[str, float]] = {
    EngineField.TTFT: {"ttft_p50_s": 0.5, "ttft_p99_s": 0.99},
    EngineField.TPOT: {"tpot_p50_s": 0.5, "tpot_p99_s": 0.99},
}

# Each engine's metric-name prefixes, preferred spelling first.
PREFIXES: dict[Engine, tuple[str, ...]] = {
    Engine.VLLM: ("vllm:",),
    Engine.SGLANG: ("sglang:", "sglang_"),
    Engine.TRTLLM: ("trtllm_", "trtllm:"),
}
# Dynamo workers pass the engine's metrics through and add their own, named dynamo_component_*, whose labels
# say the component (role hint) and the Dynamo namespace (deployment).
DYNAMO_COMPONENT_METRIC_PREFIX = "dynamo_component"


@dataclass(frozen=True)
class EngineMetric:
    """Where one engine reports one field."""

    engine: Engine
    field: EngineField
    parts: tuple[tuple[str, ...], ...]  # full names; the parts add up, within a part the first alias wins

    @property
    def kind(self) -> Kind:
        return FIELD_KINDS[self.field][0]

    @property
    def unit(self) -> Unit:
        return FIELD_KINDS[self.field][1]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for part in self.parts for name in part)


def _metric(engine: Engine, field: EngineField, *parts: tuple[str, ...]) -> EngineMetric:
    """``parts`` as name stems; every stem is spelled with each of the engine's prefixes, in order."""
    spelled = tuple(tuple(p + stem for stem in stems for p in PREFIXES[engine]) for stems in parts)
    return EngineMetric(engine, field, spelled)


_V, _S, _T = Engine.VLLM, Engine.SGLANG, Engine.TRTLLM
_F = EngineField
ENGINE_METRICS: tuple[EngineMetric, ...] = (
    _metric(_V, _F.PROMPT_TOKENS, ("prompt_tokens_total",)),
    _metric(_V, _F.GENERATION_TOKENS, ("generation_tokens_total",)),
    _metric(_V, _F.PREEMPTIONS, ("num_preemptions_total",)),
    _metric(_V, _F.REQUESTS_RUNNING, ("num_requests_running",)),
    _metric(_V, _F.REQUESTS_WAITING, ("num_requests_waiting",)),
    _metric(_V, _F.KV_CACHE_USAGE, ("kv_cache_usage_perc", "gpu_cache_usage_perc")),
    _metric(_V, _F.TTFT, ("time_to_first_token_seconds",)),
    _metric(_V, _F.TPOT, ("inter_token_latency_seconds", "time_per_output_token_seconds")),
    _metric(_S, _F.PROMPT_TOKENS, ("prompt_tokens_total",)),
    _metric(_S, _F.GENERATION_TOKENS, ("generation_tokens_total",)),
    _metric(_S, _F.PREEMPTIONS, ("num_retractions_sum",)),
    _metric(_S, _F.REQUESTS_RUNNING, ("num_running_reqs",)),
    _metric(
        _S,
        _F.REQUESTS_WAITING,
        ("num_queue_reqs",),
        ("num_prefill_prealloc_queue_reqs",),
        ("num_decode_prealloc_queue_reqs",),
    ),
    _metric(_S, _F.KV_CACHE_USAGE, ("token_usage",)),
    _metric(_S, _F.TTFT, ("time_to_first_token_seconds",)),
    _metric(_S, _F.TPOT, ("inter_token_latency_seconds", "time_per_output_token_seconds")),
    _metric(_T, _F.PROMPT_TOKENS, ("prompt_tokens_total",)),
    _metric(_T, _F.GENERATION_TOKENS, ("generation_tokens_total",)),
    _metric(_T, _F.REQUESTS_RUNNING, ("num_requests_running", "num_active_requests")),
    _metric(_T, _F.REQUESTS_WAITING, ("num_requests_waiting", "num_queued_requests")),
    _metric(_T, _F.KV_CACHE_USAGE, ("kv_cache_utilization",)),
    _metric(_T, _F.TTFT, ("time_to_first_token_seconds",)),
    _metric(_T, _F.TPOT, ("time_per_output_token_seconds",)),
)


def engine_metric(engine: Engine, field: EngineField) -> EngineMetric | None:
    """Where ``engine`` reports ``field``; None where it does not (TensorRT-LLM reports no preemptions)."""
    return next((m for m in ENGINE_METRICS if m.engine is engine and m.field is field), None)


def engine_metrics(engine: Engine) -> tuple[EngineMetric, ...]:
    return tuple(m for m in ENGINE_METRICS if m.engine is engine)
