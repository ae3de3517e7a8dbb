"""The report's "Did last week's changes pay off?": rows, plain verdicts and the running record."""

from __future__ import annotations

from analyzer.report.blocks import Para, Table
from analyzer.report.change_record import Accuracy, PoolChange, running_accuracy, scored_records
from analyzer.report.payoff import payoff_blocks
from analyzer.results.changes import ChangeOutcome, MovedWorker

MOVED = [MovedWorker(worker_id="node00/decode-1", from_role="decode", to_role="prefill")]


def _change(verdict: str, ratio: float | None, at: str = "2026-11-20T06:00:00Z") -> ChangeOutcome:
    return ChangeOutcome(
        at=at,
        moved=MOVED,
        followed="as recommended",
        verdict=verdict,  # type: ignore[arg-type]
        reason="predicted +1,000 tokens/s",
        predicted_tokens_per_s=1000.0,
        predicted_tokens_per_s_low=800.0,
        predicted_tokens_per_s_high=1200.0,
        predicted_output_tokens_per_s=100.0,
        realized_output_tokens_per_s=None if ratio is None else 100.0 * ratio,
        realized_tokens_per_s=None if ratio is None else 1000.0 * ratio,
        hours_after=48.0,
        realized_to_predicted=ratio,
    )


def test_the_running_record_counts_each_change_once_across_reports() -> None:
    now = [PoolChange("east/llama", _change("paid off as predicted", 0.9))]
    stored = [
        {"changes_scored": scored_records(now)},  # the same change, stored by an earlier run of this week
        {
            "changes_scored": [
                {"pool": "east/llama", "at": "2026-11-13T00:00:00Z", "realized_to_predicted": 1.3}
            ]
        },
        {"unrelated": 1},
    ]
    record = running_accuracy(now, stored)
    assert record.scored == 2 and record.median_error is not None
    assert abs(record.median_error - 0.2) < 1e-9  # median of 0.1 and 0.3


def test_unscored_changes_are_not_in_the_record() -> None:
    changes = [PoolChange("east/llama", _change("too early to tell", None))]
    assert scored_records(changes) == [] and running_accuracy(changes, []) == Accuracy(0, None)


def test_a_change_that_made_things_worse_is_said_plainly() -> None:
    changes = [
        PoolChange("east/llama", _change("paid off as predicted", 1.05)),
        PoolChange("west/qwen", _change("made things worse", -0.5, at="2026-11-21T00:00:00Z")),
    ]
    blocks = payoff_blocks(changes, running_accuracy(changes, []))
    (table,) = [b for b in blocks if isinstance(b, Table)]
    assert [row[1] for row in table.rows] == ["east/llama", "west/qwen"]
    assert (
        table.rows[0][-1] == "paid off as predicted" and "node00/decode-1 decode->prefill" in table.rows[0][2]
    )
    plain = [b.text for b in blocks if isinstance(b, Para) and b.text.startswith("Said plainly")]
    assert plain and "west/qwen: made things worse" in plain[0] and "east/llama" not in plain[0]
    assert "2 change(s) scored so far" in blocks[-1].text  # type: ignore[attr-defined]


def test_no_change_is_said_too() -> None:
    blocks = payoff_blocks([], Accuracy(0, None))
    texts = [b.text for b in blocks if isinstance(b, Para)]
    assert any("No change of a pool's prefill/decode split" in t for t in texts)
    assert any("No change scored yet" in t for t in texts)


def test_a_standing_recommendation_shows_its_gain_in_total_tokens_and_a_gpu_move_its_models() -> None:
    standing = ChangeOutcome(
        at="2026-11-20T06:00:00Z",
        moved=[],
        followed="not carried out",
        verdict="not carried out",
        reason="recommended for 31.0 h and not carried out",
        recommended_tokens_per_s=18_500.0,
        hours_after=31.0,
    )
    moved = MovedWorker(
        worker_id="w", from_role="decode", to_role="decode", from_sku="H100-SXM", to_sku="H200-SXM"
    )
    swap = _change("paid off as predicted", 1.0).model_copy(update={"moved": [moved]})
    (table,) = [
        b
        for b in payoff_blocks([PoolChange("p", standing), PoolChange("p", swap)], Accuracy(0, None))
        if isinstance(b, Table)
    ]
    assert "output tok/s" not in table.rows[0][4] and "prompt + output" in table.rows[0][4]
    assert table.rows[1][2] == "w decode->decode (H100-SXM->H200-SXM)"


def test_a_replaced_worker_names_its_replacement() -> None:
    replaced = MovedWorker(
        worker_id="chat-decode-7f9-abcde",
        from_role="decode",
        to_role="prefill",
        new_worker_id="chat-prefill-1c2-xyz12",
    )
    change = _change("paid off as predicted", 1.0).model_copy(update={"moved": [replaced]})
    blocks = payoff_blocks([PoolChange("east/llama", change)], Accuracy(0, None))
    (table,) = [b for b in blocks if isinstance(b, Table)]
    assert "chat-decode-7f9-abcde decode->prefill (replaced by chat-prefill-1c2-xyz12)" in table.rows[0]


def test_a_stored_replaced_worker_names_its_replacement() -> None:
    from fleet.store.stored_summary import StoredMoved

    stored = StoredMoved.model_validate(
        {"worker_id": "a", "from_role": "prefill", "to_role": "decode", "new_worker_id": "b"}
    )
    assert stored.describe() == "a prefill->decode (replaced by b)"
    assert (
        StoredMoved.model_validate({"worker_id": "a", "from_role": "x", "to_role": "y"}).describe()
        == "a x->y"
    )
