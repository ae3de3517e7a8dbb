"""One vocabulary: the collector and zero-agent mode read the same metric names, units and role words.

The engine and DCGM tables in ``fleet/vocabulary`` are checked four ways: the collector's parsers read every
name in them and nothing else; zero-agent mode queries every name in them and nothing else; the real captures
in tests/fixtures/metrics carry the names (with the kinds) the tables expect; and a role word or label means
the same role to both readers. A name added to one reader only fails here. The KV budget table (factors that
multiply, vLLM's from an info gauge's labels) and the concurrency cap table are checked the same ways, and
both readers must read the same budget and cap from the same samples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from analyzer.sources.prometheus.labels import Family
from analyzer.sources.prometheus.labels import resolve_role as zero_agent_role
from analyzer.sources.prometheus.metrics import (
    ALL_QUERIES,
    ENGINE_QUERIES,
    GPU_COLUMNS,
    GPU_QUERIES,
    KV_CAPACITY_QUERIES,
    MAX_RUNNING_QUERIES,
    MetricQuery,
    Reduce,
)
from analyzer.sources.prometheus.series import RangeSeries, TimeGrid
from analyzer.sources.prometheus.source import map_fleet
from collector.dcgm_source import ALIASES
from collector.engines import EngineParseError, EngineReading, read_engine
from collector.promtext import parse
from collector.roles import RoleEvidence
from collector.roles import resolve_role as collector_role
from fleet.contract import GpuSample, Role
from fleet.labels import ROLE_POD_LABELS, sanitise_label
from fleet.vocabulary.dcgm import (
    DCGM_FIELDS,
    DCGM_NAME_PATTERN,
    GPU_INDEX_LABEL,
    HOSTNAME_LABELS,
    MODEL_NAME_LABELS,
    UUID_LABELS,
)
from fleet.vocabulary.engines import (
    ENGINE_METRICS,
    KV_CAPACITY_FIELD,
    KV_CAPACITY_METRICS,
    LATENCY_QUANTILES,
    MAX_RUNNING_FIELD,
    MAX_RUNNING_METRICS,
    PREFIXES,
    Engine,
    EngineField,
    EngineMetric,
    KvCapacityMetric,
    MaxRunningMetric,
    engine_metric,
    kv_capacity_metric,
    max_running_metric,
)
from fleet.vocabulary.roles import ROLE_WORDS
from fleet.vocabulary.units import Kind
from tests.analyzer.prometheus_fixtures import (
    DCGM_FIXTURE,
    SGLANG_FIXTURE,
    SGLANG_KV_CAPACITY_TOKENS,
    VLLM_CACHE_CONFIG_INFO,
    VLLM_FIXTURE,
    VLLM_KV_CAPACITY_TOKENS,
)

NOW = datetime(2026, 1, 13, tzinfo=UTC)
CAPTURES = {Engine.VLLM: VLLM_FIXTURE, Engine.SGLANG: SGLANG_FIXTURE}
# The vLLM fixture is an excerpt of its capture; the capture's vllm:cache_config_info, which the excerpt
# omits, is restored verbatim (tests.analyzer.prometheus_fixtures.VLLM_CACHE_CONFIG_INFO).
RESTORED = {Engine.VLLM: VLLM_CACHE_CONFIG_INFO, Engine.SGLANG: ""}
KV_IN_CAPTURE = {Engine.VLLM: VLLM_KV_CAPACITY_TOKENS, Engine.SGLANG: SGLANG_KV_CAPACITY_TOKENS}
GRID = TimeGrid(start=1_768_264_400.0, step=60.0, n=3)
TARGET = {"job": "engine", "instance": "10.0.0.5:8000", "namespace": "llm", "pod": "engine-0"}
# Fields a real capture lacks, and why (a missing name otherwise means the table or the capture is wrong).
ABSENT = {
    (Engine.SGLANG, EngineField.PREEMPTIONS): "the capture's excerpt omits the num_retractions histogram",
    # Both excerpts keep only the TTFT and inter-token histograms: the end-to-end names are the engines'
    # documents' (fleet.vocabulary.engines).
    (Engine.VLLM, EngineField.E2E): "the capture's excerpt omits e2e_request_latency_seconds",
    (Engine.SGLANG, EngineField.E2E): "the capture's excerpt omits e2e_request_latency_seconds",
}


def exposition_of(metric: EngineMetric, name: str) -> str:
    """Minimal /metrics text with ``name`` (as ``metric``'s kind exposes it) and a token counter."""
    labels = '{model_name="m"}'
    if metric.kind is Kind.HISTOGRAM:
        body = f'{name}_bucket{{model_name="m",le="0.1"}} 3\n{name}_bucket{{model_name="m",le="+Inf"}} 4\n'
    else:
        body = f"{name}{labels} 7\n"
    token = engine_metric(metric.engine, EngineField.GENERATION_TOKENS)
    assert token is not None
    if metric.field is not EngineField.GENERATION_TOKENS:
        body += f"{token.parts[0][0]}{labels} 1\n"
    return body


def read(text: str) -> EngineReading:
    return read_engine(parse(text), "http://127.0.0.1:8000/metrics", 0.0, NOW)


def value_read(reading: EngineReading, field: EngineField) -> bool:
    """Whether the collector read anything for ``field`` (a gauge's 0 counts: it was read)."""
    logical = {EngineField.PROMPT_TOKENS: "prompt", EngineField.GENERATION_TOKENS: "generation",
               EngineField.PREEMPTIONS: "preempt"}  # fmt: skip
    if field in logical:
        return any(name == logical[field] for name, _ in reading.counters)
    if field in (EngineField.TTFT, EngineField.TPOT, EngineField.E2E):
        return bool(reading.buckets[field.value])
    attribute = {EngineField.REQUESTS_RUNNING: "running", EngineField.REQUESTS_WAITING: "waiting",
                 EngineField.KV_CACHE_USAGE: "kv_usage"}  # fmt: skip
    return getattr(reading, attribute[field]) is not None


def capture_text(engine: Engine) -> str:
    return CAPTURES[engine].read_text(encoding="utf-8") + RESTORED[engine]


def every_name() -> Iterator[tuple[EngineMetric, str]]:
    for metric in ENGINE_METRICS:
        for name in metric.names:
            yield metric, name


@pytest.mark.parametrize(("metric", "name"), list(every_name()), ids=[n for _, n in every_name()])
def test_the_collector_reads_every_name_of_the_table(metric: EngineMetric, name: str) -> None:
    reading = read(exposition_of(metric, name))
    assert reading.engine == metric.engine.value
    assert value_read(reading, metric.field), f"the collector does not read {name} as {metric.field}"


def table_lines(text: str) -> str:
    """``text`` without the samples of any name in the engine table (histograms: every sample of theirs)."""
    names = {n for m in (*ENGINE_METRICS, *KV_CAPACITY_METRICS, *MAX_RUNNING_METRICS) for n in m.names}
    kept = []
    for line in text.splitlines():
        sample = re.match(r"[^#\s{]+", line)
        base = re.sub(r"_(bucket|count|sum|created)$", "", sample.group(0)) if sample else ""
        if sample and (sample.group(0) in names or base in names):
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


@pytest.mark.parametrize("engine", list(CAPTURES))
def test_the_collector_reads_nothing_outside_the_table(engine: Engine) -> None:
    text = capture_text(engine)
    with pytest.raises(EngineParseError):  # the token counters are the table's: without them, no engine
        read(table_lines(text))
    token = engine_metric(engine, EngineField.GENERATION_TOKENS)
    assert token is not None
    kept = table_lines(text) + f'{token.parts[0][0]}{{model_name="m"}} 1\n'
    reading = read(kept)
    for field in EngineField:
        if field is not EngineField.GENERATION_TOKENS:
            assert not value_read(reading, field), f"{engine}: {field} read from a name outside the table"
    assert reading.kv_capacity_tokens is None, f"{engine}: a KV budget read from a name outside the table"
    assert reading.max_running_requests is None, f"{engine}: a cap read from a name outside the table"
    assert read(text).kv_capacity_tokens == KV_IN_CAPTURE[engine]  # and the table's names are in the capture
    assert (
        read(text).max_running_requests is None
    )  # neither capture's engine exports its cap (the table's docs)


def test_zero_agent_queries_exactly_the_table() -> None:
    expected = set()
    for metric in ENGINE_METRICS:
        family = Family(metric.engine.value)
        columns = LATENCY_QUANTILES.get(metric.field, {metric.field.value: 0.0})
        for part, aliases in enumerate(metric.parts):
            for rank, name in enumerate(aliases):
                expected |= {(family, column, name, part, rank) for column in columns}
    queried = {(q.family, q.column, q.name, q.part, q.rank) for q in ENGINE_QUERIES}
    assert queried == expected
    reduce = {Kind.COUNTER: Reduce.RATE, Kind.GAUGE: Reduce.AVG, Kind.HISTOGRAM: Reduce.QUANTILE}
    kinds = {(m.engine.value, n): m.kind for m, n in every_name()}
    assert all(q.reduce is reduce[kinds[(q.family.value, q.name)]] for q in ENGINE_QUERIES)


def capture_types(engine: Engine) -> dict[str, str]:
    """Metric name -> its TYPE in the real capture (a histogram's ``_sum`` is its histogram's)."""
    out: dict[str, str] = {}
    for family in text_string_to_metric_families(capture_text(engine)):
        for sample in family.samples:
            out.setdefault(sample.name, family.type)
        out.setdefault(family.name, family.type)
    return out


@pytest.mark.parametrize("engine", list(CAPTURES))
def test_the_real_captures_carry_every_field_with_the_tables_kind(engine: Engine) -> None:
    types = capture_types(engine)
    for field in EngineField:
        metric = engine_metric(engine, field)
        assert metric is not None
        present = [n for n in metric.names if n in types]
        if (engine, field) in ABSENT:
            assert not present, f"{engine} {field} is in the capture now: drop it from ABSENT"
            continue
        assert present, f"no name of {engine} {field} in the capture: {metric.names}"
        expected = (
            "histogram" if metric.kind is Kind.HISTOGRAM or present[0].endswith("_sum") else metric.kind
        )
        assert {types[n] for n in present} == {expected}, (field, present)


def test_the_table_spells_every_name_with_its_engines_prefixes() -> None:
    for metric, name in every_name():
        assert name.startswith(PREFIXES[metric.engine]), name
    for engine, prefixes in PREFIXES.items():
        for metric in (m for m in ENGINE_METRICS if m.engine is engine):
            for aliases in metric.parts:
                stems = {n.removeprefix(p) for n in aliases for p in prefixes if n.startswith(p)}
                assert len(aliases) == len(stems) * len(prefixes)  # each stem in every spelling
    numbers = [(kv.engine, f) for kv in KV_CAPACITY_METRICS for f in kv.factors]
    numbers += [(cap.engine, cap.number) for cap in MAX_RUNNING_METRICS]
    for engine, number in numbers:
        assert all(name.startswith(PREFIXES[engine]) for name in number.names), number
        stems = {n.removeprefix(p) for n in number.names for p in PREFIXES[engine] if n.startswith(p)}
        assert len(number.names) == len(stems) * len(PREFIXES[engine])


# --- the KV budget table ---------------------------------------------------------------------------------

FACTORS = (
    7,
    11,
    13,
)  # distinct primes: a factor missed, read twice or swapped for another changes the product


def kv_samples(metric: KvCapacityMetric, alias: str | None = None) -> dict[str, tuple[dict[str, str], float]]:
    """One sample per name the metric reads: each factor under its first alias, or under ``alias`` where it
    is one of the factor's; a label factor as a label of its info gauge (value 1), a value factor as the
    value."""
    out: dict[str, tuple[dict[str, str], float]] = {}
    for factor, number in zip(metric.factors, FACTORS[: len(metric.factors)], strict=True):
        name = alias if alias in factor.names else factor.names[0]
        labels, value = out.get(name, ({"model_name": "m"}, 1.0))
        if factor.label is not None:
            labels = {**labels, factor.label: str(number)}
        else:
            value = float(number)
        out[name] = (labels, value)
    return out


def zero_agent_budget(
    engine: Engine, samples: Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
) -> int | None:
    """The budget zero-agent mode reads from ``samples`` held over a range (as its KV queries return them)."""
    times = GRID.times()
    token = engine_metric(engine, EngineField.GENERATION_TOKENS)
    assert token is not None
    counter = next(q for q in ENGINE_QUERIES if q.name == token.parts[0][0])
    results: dict[MetricQuery, list[RangeSeries]] = {counter: [RangeSeries(TARGET, times, np.ones(GRID.n))]}
    for name, found in samples.items():
        query = next(q for q in KV_CAPACITY_QUERIES if q.name == name)  # StopIteration: a name not queried
        results[query] = [RangeSeries({**labels, **TARGET}, times, np.full(GRID.n, v)) for labels, v in found]
    (worker,) = map_fleet(results, GRID).workers
    assert worker.engine == engine.value
    return worker.kv_capacity_tokens


def rendered(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def every_kv_name() -> Iterator[tuple[KvCapacityMetric, str]]:
    for metric in KV_CAPACITY_METRICS:
        for name in metric.names:
            yield metric, name


@pytest.mark.parametrize(("metric", "name"), list(every_kv_name()), ids=[n for _, n in every_kv_name()])
def test_both_readers_read_every_kv_name_of_the_table_alike(metric: KvCapacityMetric, name: str) -> None:
    samples = kv_samples(metric, name)
    assert name in samples
    expected = math.prod(FACTORS[: len(metric.factors)])
    token = engine_metric(metric.engine, EngineField.GENERATION_TOKENS)
    assert token is not None
    text = f'{token.parts[0][0]}{{model_name="m"}} 1\n' + "".join(
        f"{n}{{{rendered(labels)}}} {value}\n" for n, (labels, value) in samples.items()
    )
    assert read(text).kv_capacity_tokens == expected, f"the collector does not read {name}"
    as_ranges = {n: [(labels, value)] for n, (labels, value) in samples.items()}
    assert zero_agent_budget(metric.engine, as_ranges) == expected, f"zero-agent does not read {name}"


def test_zero_agent_queries_exactly_the_kv_table() -> None:
    expected = {(Family(m.engine.value), name) for m in KV_CAPACITY_METRICS for name in m.names}
    assert {(q.family, q.name) for q in KV_CAPACITY_QUERIES} == expected
    assert len(KV_CAPACITY_QUERIES) == len(expected)  # one query per name, however many factors read it
    assert all(q.reduce is Reduce.LAST and q.column == KV_CAPACITY_FIELD for q in KV_CAPACITY_QUERIES)
    assert set(KV_CAPACITY_QUERIES) <= set(ALL_QUERIES)
    assert all(kv_capacity_metric(engine) is not None for engine in Engine)  # every engine says where


@pytest.mark.parametrize("engine", list(CAPTURES))
def test_the_real_captures_kv_budget_reads_alike_with_the_tables_kind(engine: Engine) -> None:
    metric = kv_capacity_metric(engine)
    assert metric is not None
    types = capture_types(engine)
    present = [n for n in metric.names if n in types]
    assert present and {types[n] for n in present} == {metric.kind.value}, present
    samples: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for family in text_string_to_metric_families(capture_text(engine)):
        for sample in family.samples:
            if sample.name in metric.names:
                samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    assert read(capture_text(engine)).kv_capacity_tokens == KV_IN_CAPTURE[engine]
    assert zero_agent_budget(engine, samples) == KV_IN_CAPTURE[engine]


# --- the concurrency cap table ---------------------------------------------------------------------------

CAP = 37  # a number nothing else in the samples holds


def every_cap_name() -> Iterator[tuple[MaxRunningMetric, str]]:
    for metric in MAX_RUNNING_METRICS:
        for name in metric.names:
            yield metric, name


def cap_sample(metric: MaxRunningMetric, name: str) -> tuple[dict[str, str], float]:
    """One sample of ``name`` holding :data:`CAP`: a label of its info gauge (value 1), else its value."""
    if metric.number.label is not None:
        return {"model_name": "m", metric.number.label: str(CAP)}, 1.0
    return {"model_name": "m"}, float(CAP)


def zero_agent_cap(
    engine: Engine, samples: Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
) -> int | None:
    """The cap zero-agent mode reads from ``samples`` held over a range, whichever query fetches a name."""
    times = GRID.times()
    token = engine_metric(engine, EngineField.GENERATION_TOKENS)
    assert token is not None
    counter = next(q for q in ENGINE_QUERIES if q.name == token.parts[0][0])
    results: dict[MetricQuery, list[RangeSeries]] = {counter: [RangeSeries(TARGET, times, np.ones(GRID.n))]}
    for name, found in samples.items():
        query = next(q for q in (*KV_CAPACITY_QUERIES, *MAX_RUNNING_QUERIES) if q.name == name)
        results[query] = [RangeSeries({**labels, **TARGET}, times, np.full(GRID.n, v)) for labels, v in found]
    (worker,) = map_fleet(results, GRID).workers
    assert worker.engine == engine.value
    return worker.max_running_requests


@pytest.mark.parametrize(("metric", "name"), list(every_cap_name()), ids=[n for _, n in every_cap_name()])
def test_both_readers_read_every_cap_name_of_the_table_alike(metric: MaxRunningMetric, name: str) -> None:
    labels, value = cap_sample(metric, name)
    token = engine_metric(metric.engine, EngineField.GENERATION_TOKENS)
    assert token is not None
    text = f'{token.parts[0][0]}{{model_name="m"}} 1\n{name}{{{rendered(labels)}}} {value}\n'
    assert read(text).max_running_requests == CAP, f"the collector does not read {name}"
    assert zero_agent_cap(metric.engine, {name: [(labels, value)]}) == CAP, f"zero-agent does not read {name}"


def test_zero_agent_queries_every_cap_name_once() -> None:
    expected = {(Family(m.engine.value), name) for m in MAX_RUNNING_METRICS for name in m.names}
    fetched = {(q.family, q.name) for q in (*KV_CAPACITY_QUERIES, *MAX_RUNNING_QUERIES)}
    assert expected <= fetched  # a name the KV table reads too (vLLM's cache_config_info) is fetched by it
    assert {(q.family, q.name) for q in MAX_RUNNING_QUERIES} == expected - {
        (q.family, q.name) for q in KV_CAPACITY_QUERIES
    }
    assert all(q.reduce is Reduce.LAST and q.column == MAX_RUNNING_FIELD for q in MAX_RUNNING_QUERIES)
    assert set(MAX_RUNNING_QUERIES) <= set(ALL_QUERIES)
    assert all(max_running_metric(engine) is not None for engine in Engine)  # every engine says where


def test_the_collectors_dcgm_names_are_the_table() -> None:
    table = {
        name.lower(): (f.field, unit.value)
        for f in DCGM_FIELDS
        if f.field in GpuSample.model_fields
        for name, unit in f.names
    }
    assert table == ALIASES


def test_zero_agent_queries_the_dcgm_table_for_its_columns() -> None:
    table = {(f.field, name, unit) for f in DCGM_FIELDS if f.field in GPU_COLUMNS for name, unit in f.names}
    queried = {(q.column, q.name, q.unit) for q in GPU_QUERIES if q.column in {f.field for f in DCGM_FIELDS}}
    assert queried == table
    assert all(DCGM_NAME_PATTERN.fullmatch(name) for f in DCGM_FIELDS for name, _ in f.names)


def test_the_real_dcgm_capture_is_listed_and_named_by_the_tables_labels() -> None:
    text = DCGM_FIXTURE.read_text(encoding="utf-8")
    series = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert series and all(DCGM_NAME_PATTERN.fullmatch(s.name) for s in series)
    for labels in (s.labels for s in series):
        assert {UUID_LABELS[0], GPU_INDEX_LABEL, MODEL_NAME_LABELS[0], HOSTNAME_LABELS[0]} <= set(labels)


@pytest.mark.parametrize("key", ROLE_POD_LABELS)
@pytest.mark.parametrize("word", sorted(ROLE_WORDS))
def test_a_role_word_means_the_same_to_both_readers(key: str, word: str) -> None:
    collected = collector_role(RoleEvidence(pod_labels={sanitise_label(key): word}))
    read_back = zero_agent_role([], [(1.0, {sanitise_label(key): word})], None)
    assert collected == read_back
    assert collected[0] is ROLE_WORDS[word]


@pytest.mark.parametrize("engine_type", ["prefill", "decode", "unified", "null", "bogus"])
def test_sglang_engine_type_means_the_same_to_both_readers(engine_type: str) -> None:
    collected = collector_role(RoleEvidence(engine_types=frozenset({engine_type})))
    read_back = zero_agent_role([(1.0, Family.SGLANG, {"engine_type": engine_type})], [], None)
    assert collected == read_back


@pytest.mark.parametrize("component", ["prefill", "VllmDecodeWorker", "backend"])
def test_dynamo_component_names_mean_the_same_to_both_readers(component: str) -> None:
    collected = collector_role(RoleEvidence(dynamo_components=frozenset({component})))
    read_back = zero_agent_role([(1.0, Family.DYNAMO, {"dynamo_component": component})], [], None)
    assert collected == read_back
    assert (collected[0] is Role.UNKNOWN) == (component == "backend")
