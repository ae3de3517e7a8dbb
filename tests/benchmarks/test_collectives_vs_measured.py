"""benchmarks/collectives_vs_measured.py: the table parses, each call is priced by the model's own
function, and the summary covers every implementation in the committed table."""

from __future__ import annotations

import pytest

from analyzer.model.collectives import Link, allreduce_seconds
from benchmarks.collectives_vs_measured import (
    DEFAULT_TABLE,
    Call,
    load_calls,
    predict,
    previous_model,
    report,
)


def test_the_committed_table_holds_every_implementation_on_both_skus() -> None:
    calls = load_calls(DEFAULT_TABLE)
    kinds = {(c.implementation, c.sku) for c in calls}
    for name in ("trtllm", "vllm_graph", "sglang_graph", "nccl"):
        assert {(name, "H100-SXM"), (name, "H200-SXM")} <= kinds
    assert all(c.latency_s > 0 and c.gpus in (2, 4, 8) for c in calls)


def test_an_allreduce_is_priced_by_the_models_function() -> None:
    link = Link(300e9, 20e-6)
    call = Call("trtllm", "H100-SXM", "all_reduce", 8, 1 << 20, 2, 30e-6)
    assert predict(call, link) == pytest.approx(allreduce_seconds(8, float(2 << 20), link))
    assert call.band == "decode"
    assert Call("nccl", "H100-SXM", "all_reduce", 8, 1 << 26, 2, 1e-3).band == "prefill"


def test_the_baseline_is_the_ring_with_a_latency_per_hop() -> None:
    call = Call("nccl", "H100-SXM", "all_reduce", 8, 128, 2, 5e-6)
    # 14 hops of 15.07 us dominate a 256-byte message.
    assert previous_model(call, 900e9) == pytest.approx(14 * 15.0704e-6, rel=0.01)


def test_the_report_has_a_row_per_group_with_both_models() -> None:
    lines = report(load_calls(DEFAULT_TABLE))
    assert lines[0].startswith("| op | implementation | GPUs | band |")
    assert any(line.startswith("| all_reduce | all | all | decode |") for line in lines)
    assert all(line.count("|") == 12 for line in lines)
