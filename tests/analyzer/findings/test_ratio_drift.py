"""The pool-level finding carries a recommended move whose workers cannot be judged."""

from __future__ import annotations

from pathlib import Path

from analyzer.findings.ratio_drift import move_text
from analyzer.pipeline import analyze, input_from_samples
from fleet.catalog import load_catalog
from fleet.contract import FindingKind, Severity
from fleetsim.examine import simulate

CATALOG = load_catalog()

# An overloaded Llama 3.1 70B pool decoding on H100s beside H200s that prefill, on SGLang, read through a
# dcgm-exporter without profiling fields: no worker's bottleneck is measured.
UNPROFILED_SWAP = """\
name: unprofiled-swap
description: three H100 decode workers and four H200 prefill workers, overloaded, no profiling fields
intent: the H100 decode workers are misplaced; none can be judged on utilisation counters alone
naming: fqdn
telemetry: basic
window_s: 300
days: 1
pools:
  - name: chat-70b
    cluster: dc-north
    model: meta-llama/Llama-3.1-70B-Instruct
    precision: fp8
    tp: 2
    engine: sglang
    max_batch: 192
    traffic: {rate_rps: 140, code_share: 0.3}
nodes:
  - {count: 1, sku: H100-SXM, pool: chat-70b, workers: {prefill: 1, decode: 3}}
  - {count: 1, sku: H200-SXM, pool: chat-70b, workers: {prefill: 4}}
"""


def test_a_move_of_workers_nobody_can_judge_is_reported_at_the_pool(tmp_path: Path) -> None:
    path = tmp_path / "unprofiled-swap.yaml"
    path.write_text(UNPROFILED_SWAP)
    run = simulate(str(path), CATALOG, days=1.0, window_s=300.0, seed=0)
    truth = {(w["sku"], w["role"], w["recommended_role"]) for w in run.truth["misplaced_workers"]}
    assert ("H100-SXM", "decode", "prefill") in truth and run.truth["segments"][0]["demand_limited"] is False
    result = analyze(input_from_samples(run.gpu_columns, run.engine_columns), CATALOG)
    kinds = {f.kind for f in result.findings}
    assert FindingKind.DECODE_ON_LOW_BANDWIDTH not in kinds  # no measured bottleneck: no worker verdict
    (pool,) = [f for f in result.findings if f.kind is FindingKind.POOL_RATIO_DRIFT]
    moves = str(pool.evidence["moves_without_worker_verdict"])
    assert moves.count("decode-") == 3 and "->prefill" in moves and "not measured" in moves
    assert pool.severity is Severity.CRITICAL  # supply-limited, from its queues
    assert pool.lost_output_tokens_per_s is not None and pool.lost_output_tokens_per_s > 0
    whole = result.summary["pools"][0]["lost"]["output_tokens_per_s"]["value"]
    assert round(pool.lost_output_tokens_per_s, 1) == whole  # the whole pool's loss: every move is carried


def test_a_swap_that_keeps_the_split_says_so_instead_of_from_4_4_to_4_4() -> None:
    swap = move_text("4:4", "4:4", "h100-decode-1->prefill, h200-prefill-1->decode", ": +900 output tokens/s")
    assert swap.startswith("keep the pool's 4:4 prefill:decode split and swap these workers' roles")
    assert "from 4:4 to 4:4" not in swap and swap.endswith("->decode): +900 output tokens/s")
    rebalance = move_text("5:3", "3:5", "a->decode, b->decode", "")
    assert rebalance == "move the pool from 5:3 to 3:5 prefill:decode workers (a->decode, b->decode)"
    assert len(move_text("1:1", "2:0", "x" * 3000, "")) == 2000  # the contract's bound on a detail
