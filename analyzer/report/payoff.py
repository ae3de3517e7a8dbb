"""The report's "Did last week's changes pay off?": each change of a split, predicted against realized."""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.report.blocks import Block, Heading, Para, Table
from analyzer.report.change_record import Accuracy, PoolChange
from analyzer.report.style import output_rate, percent, tokens_rate
from analyzer.results.changes import MovedWorker


def _range(low: float | None, high: float | None, osl_share: float | None) -> str:
    if low is None or high is None or osl_share is None:
        return ""
    return f" ({output_rate(low * osl_share)} to {output_rate(high * osl_share)})"


def _moved(m: MovedWorker) -> str:
    gpus = f" ({m.from_sku}->{m.to_sku})" if m.from_sku and m.to_sku else ""
    replaced = f" (replaced by {m.new_worker_id})" if m.new_worker_id else ""
    return f"{m.worker_id} {m.from_role}->{m.to_role}{gpus}{replaced}"


def _row(c: PoolChange) -> list[str]:
    o = c.change
    moved = ", ".join(_moved(m) for m in o.moved) or "-"
    share = (
        o.predicted_output_tokens_per_s / o.predicted_tokens_per_s
        if o.predicted_output_tokens_per_s is not None and o.predicted_tokens_per_s
        else None
    )
    predicted = (
        output_rate(o.predicted_output_tokens_per_s)
        + _range(o.predicted_tokens_per_s_low, o.predicted_tokens_per_s_high, share)
        if o.predicted_output_tokens_per_s is not None
        else (
            f"{tokens_rate(o.recommended_tokens_per_s)} (prompt + output: the whole recommendation)"
            if o.recommended_tokens_per_s
            else "-"
        )
    )
    realized = (
        output_rate(o.realized_output_tokens_per_s) if o.realized_output_tokens_per_s is not None else "-"
    )
    return [
        o.at.replace("T", " ").removesuffix("Z"),
        c.pool,
        moved,
        o.followed,
        predicted,
        realized,
        o.verdict,
    ]


def payoff_blocks(changes: Sequence[PoolChange], accuracy: Accuracy) -> list[Block]:
    out: list[Block] = [Heading(2, "7. Did last week's changes pay off?")]
    if not changes:
        out.append(Para("No change of a pool's prefill/decode split since the start of last week."))
    else:
        out.append(
            Table(
                [
                    "time (UTC)",
                    "pool",
                    "workers moved",
                    "followed",
                    "predicted (output)",
                    "realized (output)",
                    "verdict",
                ],
                [_row(c) for c in changes],
                note="Predicted: the model's gain for the split adopted, at the time, with its range. "
                "Realized: the capacity the pool showed afterwards against before, both at the traffic mix "
                "before the change (a demand-limited pool serves the same tokens either way: its gain is "
                "capacity).",
            )
        )
        plain = [
            f"{c.pool}: {c.change.verdict} ({c.change.reason})"
            for c in changes
            if c.change.verdict in ("made things worse", "did not pay off", "not carried out")
        ]
        if plain:
            out.append(Para("Said plainly: " + "; ".join(plain) + ".", "verdict"))
    record = (
        f"{accuracy.scored} change(s) scored so far; median realized-versus-predicted error "
        f"{percent(accuracy.median_error, 1)}."
        if accuracy.median_error is not None
        else "No change scored yet: the model's realized-versus-predicted record starts with the first."
    )
    out.append(Para(f"The model's running record: {record}", "note"))
    return out
