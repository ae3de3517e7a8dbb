"""Each serving engine's ``/metrics`` names per engine_sample field: the one table the collector's engine
parser (collector/engines.py) and zero-agent mode's queries (analyzer/sources/prometheus/metrics.py) are built
from.

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
End-to-end request latency is ``e2e_request_latency_seconds`` in all three (vLLM's design/v1/metrics.md,
SGLang's docs/references/production_metrics.md, Dynamo's backends/trtllm/prometheus.md for TensorRT-LLM
1.1: ``trtllm_e2e_request_latency_seconds``); the real captures here hold none, so these names were checked
against the engines' own code instead (2026-12-06): vLLM's ``tests/entrypoints/openai/test_metrics.py``
lists ``vllm:e2e_request_latency_seconds`` among the request histograms it asserts; SGLang's
``python/sglang/srt/metrics/collector.py`` creates ``sglang:e2e_request_latency_seconds``; TensorRT-LLM's
``tensorrt_llm/metrics/collector.py`` creates ``trtllm_`` + ``e2e_request_latency_seconds`` (buckets 0.3 s
to 7,680 s).
The real vLLM and SGLang captures in tests/fixtures/metrics are checked against this table.

The KV cache an engine holds (engine_sample ``kv_capacity_tokens``) is a table of its own
(:data:`KV_CAPACITY_METRICS`): its *factors* multiply, and a factor may be a label of an info gauge rather
than a sample's value.

- vLLM: ``vllm:cache_config_info``, an info gauge (value 1) whose labels are its CacheConfig
  (``vllm/v1/metrics/loggers.py`` ``log_metrics_info("cache_config", ...)``, labels from
  ``CacheConfig.metrics_info()``: every field as a string, one series per data-parallel ``engine``):
  ``num_gpu_blocks`` x ``block_size``. The scheduler keeps one block table for all the workers of an engine
  (``get_kv_cache_configs`` takes the smallest ``num_blocks`` of the TP/PP workers); a TP rank holds its
  share of the KV heads of every block, so the engine holds ``num_gpu_blocks`` x ``block_size`` tokens
  whatever its TP degree. A front end serving several data-parallel engines sums their blocks into the one
  ``num_gpu_blocks`` (``vllm/v1/engine/utils.py``: "Sum values from all engines in DP case") and writes it on
  every engine's series: the series repeat one budget and are never added. ``num_gpu_blocks="None"`` (vLLM
  V1 before #15719 was fixed) is no budget. A model with several KV cache groups (sliding window and full
  attention, Mamba hybrids) reports the smallest group's block size: the product is then approximate.
- SGLang: ``sglang:max_total_num_tokens``, the token slots of the scheduler's KV pool
  (``python/sglang/srt/metrics/collector.py``; ``ModelRunner.profile_max_num_token`` sizes a cell by the
  KV heads of one TP rank from the smallest free memory of all ranks): every rank holds its share of the
  heads for the same tokens, so one rank's value is the engine's. It is 92962 in the real capture.
- TensorRT-LLM: ``trtllm_kv_cache_max_blocks`` x ``trtllm_kv_cache_tokens_per_block`` (trtllm-serve's
  ``tensorrt_llm/metrics/collector.py``, from ``kvCacheStats`` ``maxNumBlocks`` and ``tokensPerBlock``;
  only with ``enable_iter_perf_stats``, and not in releases before these gauges: then None, as is an
  engine that reports only ``kv_cache_utilization``). With variable sliding-window attention
  ``maxNumBlocks`` adds the pools of every window: approximate there.

A factor is a whole number of at least 1; anything else (a NaN, 0, "None") is no budget, never 0 tokens.
Where ranks report, tensor/pipeline rank 0 is read, as for the other gauges.

The most requests an engine runs at once (engine_sample ``max_running_requests``) is one reported number
(:data:`MAX_RUNNING_METRICS`), read by the same rule (a whole number of at least 1, rank 0, the largest of
the first alias that has one; repeated, never added):

- SGLang: ``sglang:max_running_requests``, a gauge of the scheduler's cap that the first SGLang releases
  with metrics export (their docs/references/production_metrics.md example:
  ``sglang:max_running_requests{name="google/gemma-2-9b-it"} 4097.0``). Current releases no longer export
  it on ``/metrics`` (``/v1/loads`` has it): then None. It is not ``sglang:max_running_requests_under_SLO``,
  an SLO estimate rather than the configured cap.
- vLLM: ``--max-num-seqs`` as a ``max_num_seqs`` label of an info gauge, ``vllm:scheduler_config_info``
  first, then ``vllm:cache_config_info``. vLLM itself (V1 ``loggers.py``) exports only its CacheConfig,
  which has no such field: a stock vLLM reports None; servers that speak vLLM's metrics and add the label
  report it. A data-parallel front end's series would each carry one engine's cap, of which one is read.
- TensorRT-LLM: trtllm-serve's ``trtllm_max_num_active_requests`` (the executor's cap on active requests:
  max batch size x pipeline stages), else ``trtllm_max_batch_size_runtime``, else
  ``trtllm_max_batch_size_static``; iteration statistics, so only with ``enable_iter_perf_stats`` and
  in releases with these gauges.

A cap beyond what the contract holds (2**31 - 1) is None, never a wrong number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from fleet.contract import REQUEST_CAP_MAX
from fleet.labels import PP_RANK_LABEL, TP_RANK_LABEL
from fleet.vocabulary.units import Kind, Unit


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


class EngineField(StrEnum):
    """An engine_sample field (TTFT, TPOT and E2E: the histograms behind ``*_p50_s`` / ``*_p90_s`` /
    ``*_p99_s``)."""

    PROMPT_TOKENS = "prompt_tokens"
    GENERATION_TOKENS = "generation_tokens"
    PREEMPTIONS = "preemptions"
    REQUESTS_RUNNING = "requests_running"
    REQUESTS_WAITING = "requests_waiting"
    KV_CACHE_USAGE = "kv_cache_usage"
    TTFT = "ttft"
    TPOT = "tpot"
    E2E = "e2e"  # end-to-end request latency


FIELD_KINDS: dict[EngineField, tuple[Kind, Unit]] = {
    EngineField.PROMPT_TOKENS: (Kind.COUNTER, Unit.COUNT),
    EngineField.GENERATION_TOKENS: (Kind.COUNTER, Unit.COUNT),
    EngineField.PREEMPTIONS: (Kind.COUNTER, Unit.COUNT),
    EngineField.REQUESTS_RUNNING: (Kind.GAUGE, Unit.COUNT),
    EngineField.REQUESTS_WAITING: (Kind.GAUGE, Unit.COUNT),
    EngineField.KV_CACHE_USAGE: (Kind.GAUGE, Unit.RATIO),
    EngineField.TTFT: (Kind.HISTOGRAM, Unit.SECONDS),
    EngineField.TPOT: (Kind.HISTOGRAM, Unit.SECONDS),
    EngineField.E2E: (Kind.HISTOGRAM, Unit.SECONDS),
}
# The quantiles the data contract carries for each latency histogram (engine_sample ttft_p50_s, ...): the
# p90s are what latency targets are stated in (Dynamo's SLA planner, llm-d, AI Configurator).
LATENCY_QUANTILES: dict[EngineField, dict[str, float]] = {
    EngineField.TTFT: {"ttft_p50_s": 0.5, "ttft_p90_s": 0.9, "ttft_p99_s": 0.99},
    EngineField.TPOT: {"tpot_p50_s": 0.5, "tpot_p90_s": 0.9, "tpot_p99_s": 0.99},
    EngineField.E2E: {"e2e_p90_s": 0.9},
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
    _metric(_V, _F.E2E, ("e2e_request_latency_seconds",)),
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
    _metric(_S, _F.E2E, ("e2e_request_latency_seconds",)),
    _metric(_T, _F.PROMPT_TOKENS, ("prompt_tokens_total",)),
    _metric(_T, _F.GENERATION_TOKENS, ("generation_tokens_total",)),
    _metric(_T, _F.REQUESTS_RUNNING, ("num_requests_running", "num_active_requests")),
    _metric(_T, _F.REQUESTS_WAITING, ("num_requests_waiting", "num_queued_requests")),
    _metric(_T, _F.KV_CACHE_USAGE, ("kv_cache_utilization",)),
    _metric(_T, _F.TTFT, ("time_to_first_token_seconds",)),
    _metric(_T, _F.TPOT, ("time_per_output_token_seconds",)),
    _metric(_T, _F.E2E, ("e2e_request_latency_seconds",)),
)


def engine_metric(engine: Engine, field: EngineField) -> EngineMetric | None:
    """Where ``engine`` reports ``field``; None where it does not (TensorRT-LLM reports no preemptions)."""
    return next((m for m in ENGINE_METRICS if m.engine is engine and m.field is field), None)


def engine_metrics(engine: Engine) -> tuple[EngineMetric, ...]:
    return tuple(m for m in ENGINE_METRICS if m.engine is engine)


# --- The KV cache an engine holds ----------------------------------------------------------------------

KV_CAPACITY_FIELD = "kv_capacity_tokens"  # the engine_sample field, and zero-agent's column
Sample = tuple[str, Mapping[str, str], float]  # (metric name, labels, value) of one exposed sample


def primary_rank(labels: Mapping[str, str]) -> bool:
    """Tensor and pipeline rank 0, or a sample without ranks: SGLang reports per scheduler, and a TP group's
    gauges are read from its first rank so it is not counted once per rank."""
    return labels.get(TP_RANK_LABEL, "0") == "0" and labels.get(PP_RANK_LABEL, "0") == "0"


@dataclass(frozen=True)
class ReportedNumber:
    """A whole number an engine reports about itself (a factor of its KV budget, its concurrency cap): a
    gauge's value, or (``label`` set) one label of an info gauge, whose value is always 1. ``names``:
    aliases, preferred first."""

    names: tuple[str, ...]
    label: str | None = None

    def of(self, labels: Mapping[str, str], value: float) -> int | None:
        """This number in one sample: a whole number of at least 1, else None."""
        if self.label is not None:
            text = labels.get(self.label, "")
            number = int(text) if text.isascii() and text.isdigit() else 0
        elif math.isfinite(value) and value == math.floor(value):
            number = int(value)
        else:
            number = 0
        return number if number >= 1 else None

    def read(self, samples: Iterable[Sample]) -> int | None:
        """This number in one scrape's samples: of the first alias with a usable sample at rank 0, the largest
        (the samples repeat one figure: never added)."""
        found: dict[str, list[int]] = {}
        for name, labels, value in samples:
            if name in self.names and primary_rank(labels):
                number = self.of(labels, value)
                if number is not None:
                    found.setdefault(name, []).append(number)
        return next((max(found[n]) for n in self.names if n in found), None)


@dataclass(frozen=True)
class KvCapacityMetric:
    """Where one engine reports the KV cache it holds, in tokens: the product of ``factors``."""

    engine: Engine
    factors: tuple[ReportedNumber, ...]
    kind: Kind = Kind.GAUGE  # every factor is a gauge (vLLM's info gauge too)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for factor in self.factors for name in factor.names))

    @staticmethod
    def product(factors: Sequence[int | None]) -> int | None:
        """The budget from each factor's value; None when any is unknown."""
        if not factors or any(f is None for f in factors):
            return None
        return math.prod(f for f in factors if f is not None)

    def tokens(self, samples: Iterable[Sample]) -> int | None:
        """The budget in one scrape's samples; None when the engine does not report it."""
        listed = [s for s in samples if s[0] in self.names]
        return self.product([factor.read(listed) for factor in self.factors])


def _spelled(engine: Engine, stem: str) -> tuple[str, ...]:
    return tuple(prefix + stem for prefix in PREFIXES[engine])


KV_CAPACITY_METRICS: tuple[KvCapacityMetric, ...] = (
    KvCapacityMetric(
        _V,
        (
            ReportedNumber(_spelled(_V, "cache_config_info"), "num_gpu_blocks"),
            ReportedNumber(_spelled(_V, "cache_config_info"), "block_size"),
        ),
    ),
    KvCapacityMetric(_S, (ReportedNumber(_spelled(_S, "max_total_num_tokens")),)),
    KvCapacityMetric(
        _T,
        (
            ReportedNumber(_spelled(_T, "kv_cache_max_blocks")),
            ReportedNumber(_spelled(_T, "kv_cache_tokens_per_block")),
        ),
    ),
)


def kv_capacity_metric(engine: Engine | str) -> KvCapacityMetric | None:
    """Where ``engine`` reports its KV budget; None for a name that is no engine of the table."""
    return next((m for m in KV_CAPACITY_METRICS if m.engine == engine), None)


# --- The concurrency cap an engine reports ---------------------------------------------------------------

MAX_RUNNING_FIELD = "max_running_requests"  # the engine_sample field, and zero-agent's column


@dataclass(frozen=True)
class MaxRunningMetric:
    """Where one engine reports the most requests it runs at once: one reported number."""

    engine: Engine
    number: ReportedNumber
    kind: Kind = Kind.GAUGE  # vLLM's info gauge too

    @property
    def names(self) -> tuple[str, ...]:
        return self.number.names

    def requests(self, samples: Iterable[Sample]) -> int | None:
        """The cap in one scrape's samples; None when the engine does not report it, or reports more than
        the data contract holds (never a wrong number)."""
        cap = self.number.read(s for s in samples if s[0] in self.names)
        return cap if cap is not None and cap <= REQUEST_CAP_MAX else None


MAX_RUNNING_METRICS: tuple[MaxRunningMetric, ...] = (
    MaxRunningMetric(
        _V,
        ReportedNumber(
            (*_spelled(_V, "scheduler_config_info"), *_spelled(_V, "cache_config_info")), "max_num_seqs"
        ),
    ),
    MaxRunningMetric(_S, ReportedNumber(_spelled(_S, "max_running_requests"))),
    MaxRunningMetric(
        _T,
        ReportedNumber(
            (
                *_spelled(_T, "max_num_active_requests"),
                *_spelled(_T, "max_batch_size_runtime"),
                *_spelled(_T, "max_batch_size_static"),
            )
        ),
    ),
)


def max_running_metric(engine: Engine | str) -> MaxRunningMetric | None:
    """Where ``engine`` reports its concurrency cap; None for a name that is no engine of the table."""
    return next((m for m in MAX_RUNNING_METRICS if m.engine == engine), None)
