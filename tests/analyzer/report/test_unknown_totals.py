"""A finding that estimates no loss (telemetry degraded, not serving, ...) carries 0 total tokens/s beside
null output and requests figures (issue 29, A): the report shows its total as unknown, never as 0."""

from __future__ import annotations

from datetime import UTC, datetime

from analyzer.findings.loss import states_loss
from analyzer.report.document import ACTION_COLUMNS, _action_rows
from analyzer.report.sections import actions_of
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
    assert degraded.lost_tokens_per_s == 0.0 and degraded.lost_output_tokens_per_s is None  # the contract's 0
    assert not states_loss(degraded)
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
