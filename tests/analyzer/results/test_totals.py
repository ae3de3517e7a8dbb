"""Fleet totals and the merge of shards: shards analysed apart give the whole fleet's summary."""

from __future__ import annotations

import pytest

from analyzer.pipeline import AnalyzerParams, analyze, input_from_samples
from analyzer.pools.selection import PoolSelection
from analyzer.results.summary import FleetTotals
from analyzer.results.totals import LOST_FIELDS, LOST_MEAN_FIELDS, MergeError, merge
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()
SPEC = [
    (f"{c}{i}", H100 if i % 2 else H200, 1, 1) for c, n in {"a": 4, "b": 2, "c": 2}.items() for i in range(n)
]
PARAMS = AnalyzerParams(clusters={node: node[0] for node, *_ in SPEC})


def test_the_lost_fields_are_the_fleet_totals_fields() -> None:
    assert set(LOST_FIELDS) | set(LOST_MEAN_FIELDS) <= set(FleetTotals.model_fields)


def test_shards_merged_give_the_whole_fleets_summary() -> None:
    gpu, engine = Fleet(workers(SPEC), hours=8).columns()
    data = input_from_samples(gpu, engine)
    whole = analyze(data, CATALOG, PARAMS).typed_summary
    parts = [
        analyze(data, CATALOG, PARAMS, selection=PoolSelection(shard=(i, 2))).typed_summary for i in range(2)
    ]
    merged = merge(parts)
    assert merged.fleet == whole.fleet and merged.model == whole.model
    assert merged.pools == sorted(whole.pools, key=lambda p: p.pool)
    assert sorted(merged.workers, key=lambda w: w.worker_id) == sorted(
        whole.workers, key=lambda w: w.worker_id
    )
    assert merged.warnings[-1] == "merged from 2 shard(s) analysed apart"
    assert not any(w.startswith("this analysis covers") for w in merged.warnings)
    with pytest.raises(MergeError, match="pools analysed in more than one shard"):
        merge([parts[0], parts[0]])
    with pytest.raises(MergeError, match="nothing to merge"):
        merge([])
