"""Fleet totals and the merge of shards: shards analysed apart give the whole fleet's summary."""

from __future__ import annotations

import pytest

from analyzer.pipeline import AnalyzerParams, analyze, input_from_samples
from analyzer.pools.selection import PoolSelection
from analyzer.results.summary import LOSS_UNITS, UNKNOWN_LOSS, LostCapacity
from analyzer.results.totals import LOSS_DIGITS, MergeError, loss_sum, merge
from fleet.catalog import load_catalog
from tests.analyzer.summary_samples import lost
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()
SPEC = [
    (f"{c}{i}", H100 if i % 2 else H200, 1, 1) for c, n in {"a": 4, "b": 2, "c": 2}.items() for i in range(n)
]
PARAMS = AnalyzerParams(clusters={node: node[0] for node, *_ in SPEC})


def test_a_loss_sum_adds_what_is_known_and_leaves_unknown_unknown() -> None:
    total = loss_sum([lost(tokens_per_s=1.25, requests_per_s=0.00012), lost(tokens_per_s=2.0), UNKNOWN_LOSS])
    assert total.tokens_per_s.value == 3.2 and total.requests_per_s.value == 0.0001  # rounded per unit
    assert total.output_tokens_per_s.value is None and total.tokens_per_s.low is None  # none knows it
    assert loss_sum([]) == UNKNOWN_LOSS
    assert set(LOSS_DIGITS) == set(LOSS_UNITS) == set(LostCapacity.model_fields)


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
