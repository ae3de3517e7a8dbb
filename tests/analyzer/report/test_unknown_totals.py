"""A finding that estimates no loss (telemetry degraded, not serving, ...) carries null total tokens/s
beside null output and requests figures (issue 29, A; one written before the total was nullable carries 0
there): the report shows its total as unknown, never as 0, and ranks it after every sized loss."""

from __future__ import annotations

from datetime import UTC, datetime

from analyzer.findings.loss import states_loss
from analyzer.report.document import ACTION_COLUMNS, _action_rows
from analyzer.report.sections import actions_of, rank_key
from fleet.contract import Finding, FindingKind, Recommendation, Role

TS = datetime(2026, 11, 24, tzinfo=UTC)


def _degraded() -> Finding:
    return Finding(
        kind=FindingKind.TELEMETRY_DEGRADED,
        worker_id="node01/decode-2",
        pool="c/m",
        gpu_sku="H100-SXM",
        role=Role.DECODE,
        recommendation=Recommendation(action="investigate", detail="GPU lost"),
        first_seen=TS,
        last_seen=TS,
    )


def test_a_finding_without_a_loss_estimate_reads_unknown_not_0() -> None:
    degraded = _degraded()
    assert degraded.lost_tokens_per_s is None and degraded.lost_output_tokens_per_s is None  # the contract's
    assert not states_loss(degraded)
    legacy = degraded.model_copy(update={"lost_tokens_per_s": 0.0})  # before the total was nullable
    assert not states_loss(legacy)
    actions, _, appendix = actions_of([degraded], set())
    (action,) = [a for a in [*actions, *appendix] if a.subject == "node01/decode-2"][:1]
    assert action.lost_tokens_per_s is None and action.lost_low is None and action.lost_high is None
    (row,) = _action_rows([action])
    column = {name: i for i, name in enumerate(ACTION_COLUMNS)}
    assert row[column["secondary: total tok/s (prompt + output)"]] == "unknown"
    assert row[column["output tok/s to gain"]] == "unknown"


def test_a_placement_finding_keeps_its_total() -> None:
    placed = _degraded().model_copy(
        update={
            "kind": FindingKind.DECODE_ON_LOW_BANDWIDTH,
            "lost_tokens_per_s": 900.0,
            "lost_output_tokens_per_s": 90.0,
        }
    )
    assert states_loss(placed)
    assert states_loss(
        _degraded().model_copy(update={"lost_tokens_per_s": 5.0})
    )  # an older finding: total only


def test_an_unknown_total_ranks_after_every_known_one() -> None:
    unknown = _degraded()
    legacy = _degraded().model_copy(update={"worker_id": "node00/decode-1", "lost_tokens_per_s": 0.0})
    total_only = _degraded().model_copy(update={"worker_id": "node02/decode-3", "lost_tokens_per_s": 5.0})
    sized = _degraded().model_copy(
        update={"worker_id": "node03/decode-4", "lost_tokens_per_s": 900.0, "lost_output_tokens_per_s": 9.0}
    )
    ranked = sorted([unknown, legacy, total_only, sized], key=rank_key)
    assert [f.worker_id for f in ranked[:2]] == ["node03/decode-4", "node02/decode-3"]
    assert {f.worker_id for f in ranked[2:]} == {"node01/decode-2", "node00/decode-1"}
    assert rank_key(legacy)[:6] == rank_key(unknown)[:6]  # a 0 beside no output figure is unknown too
