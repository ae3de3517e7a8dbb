"""Analysing part of a fleet: named pools, shards that split the pools between jobs, several processes."""

from __future__ import annotations

import pytest

from analyzer.pipeline import AnalysisInput, AnalyzerParams, analyze, input_from_samples
from analyzer.pools.pool import build_pools
from analyzer.pools.selection import PoolSelection, SelectionError, gpus_of, select, shards
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()
# Five pools of different sizes: nodes are told apart by cluster (node -> cluster), as an operator maps them.
SIZES = {"a": 4, "b": 2, "c": 1, "d": 1, "e": 2}
SPEC = [(f"{c}{i}", H100 if i % 2 else H200, 1, 1) for c, n in SIZES.items() for i in range(n)]
CLUSTERS = {node: node[0] for node, *_ in SPEC}
PARAMS = AnalyzerParams(clusters=CLUSTERS)


@pytest.fixture(scope="module")
def data() -> AnalysisInput:
    gpu, engine = Fleet(workers(SPEC), hours=8).columns()
    return input_from_samples(gpu, engine)


def _pools(data: AnalysisInput) -> list[str]:
    rows = {w.worker_id: i for i, w in enumerate(data.inventory.workers)}
    return [p.key for p in build_pools(data.inventory, rows, CATALOG, CLUSTERS)]


def test_shards_cover_every_pool_once_and_balance_gpus(data: AnalysisInput) -> None:
    rows = {w.worker_id: i for i, w in enumerate(data.inventory.workers)}
    pools = build_pools(data.inventory, rows, CATALOG, CLUSTERS)
    assigned = shards(pools, 2)
    assert set(assigned) == {p.key for p in pools} and set(assigned.values()) == {0, 1}
    load = [sum(gpus_of(p) for p in pools if assigned[p.key] == i) for i in range(2)]
    assert abs(load[0] - load[1]) <= max(gpus_of(p) for p in pools)
    covered = [
        w.worker_id
        for i in range(3)
        for w in select(data.inventory, CATALOG, CLUSTERS, PoolSelection(shard=(i, 3))).workers
    ]
    assert sorted(covered) == sorted(w.worker_id for w in data.inventory.workers)


def test_a_named_pool_is_analysed_alone_and_says_so(data: AnalysisInput) -> None:
    whole = analyze(data, CATALOG, PARAMS)
    key = next(k for k in _pools(data) if k.startswith("b/"))
    part = analyze(data, CATALOG, PARAMS, selection=PoolSelection.parse([key]))
    assert [p.pool for p in part.typed_summary.pools] == [key]
    assert {w.pool for w in part.typed_summary.workers} == {key}
    assert any(f"covers pools {key}" in w for w in part.typed_summary.warnings)
    (alone,) = part.typed_summary.pools
    (same,) = [p for p in whole.typed_summary.pools if p.pool == key]
    assert alone.capacity_tokens_per_s == same.capacity_tokens_per_s and alone.gpus == same.gpus


def test_an_unknown_pool_or_a_bad_shard_is_refused_with_what_exists(data: AnalysisInput) -> None:
    with pytest.raises(SelectionError, match="no pool x/llama in the range; pools: a/"):
        analyze(data, CATALOG, PARAMS, selection=PoolSelection.parse(["x/llama"]))
    for shard in ("2/2", "1", "-1/3", "a/b"):
        with pytest.raises(SelectionError, match="is not INDEX/COUNT"):
            PoolSelection.parse(shard=shard)


def test_several_processes_give_the_serial_result(data: AnalysisInput) -> None:
    serial = analyze(data, CATALOG, PARAMS)
    parallel = analyze(data, CATALOG, PARAMS, processes=2)
    assert parallel.summary == serial.summary
    assert [f.model_dump() for f in parallel.findings] == [f.model_dump() for f in serial.findings]


def test_a_shard_without_pools_is_an_empty_analysis_not_a_crash(data: AnalysisInput) -> None:
    result = analyze(data, CATALOG, PARAMS, selection=PoolSelection(shard=(7, 8)))
    assert result.typed_summary.pools == [] and result.findings == []
    assert result.typed_summary.fleet.workers == 0 and result.typed_summary.fleet.gpus == 0
