"""The report's standing what-ifs under the pools (configured in ``PHASEFIT_ANALYZER_REPORT_WHAT_IF``)."""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.planning.standing import WhatIfRow
from analyzer.report.blocks import Block, Heading, Para, Table
from analyzer.report.style import output_rate, requests_rate, usd


def _gain(r: WhatIfRow) -> str:
    if r.output_gain is None:
        return "not evaluated"
    return f"{output_rate(r.output_gain)} ({output_rate(r.output_low)} to {output_rate(r.output_high)})"


def what_if_blocks(rows: Sequence[WhatIfRow], sharded: bool) -> list[Block]:
    if not rows:
        return []
    out: list[Block] = [Heading(3, "Standing what-ifs")]
    if sharded:
        out.append(Para("Not evaluated: a report merged from shards holds no placement to re-solve.", "note"))
        return out
    out.append(
        Table(
            ["what if", "pool", "output tokens/s gained", "requests/s gained", "cost per week", "note"],
            [
                [
                    r.asked,
                    r.pool or "-",
                    _gain(r),
                    requests_rate(r.requests_gain) if r.requests_gain is not None else "-",
                    usd(r.cost_change_per_week_usd)
                    if r.cost_change_per_week_usd is not None
                    else "price not set",
                    r.answer,
                ]
                for r in rows
            ],
            note="The best placement of each pool re-solved on the changed GPU set at this week's traffic "
            "(PHASEFIT_ANALYZER_REPORT_WHAT_IF); phasefit plan --add/--remove/--replace asks the same "
            "ad hoc.",
        )
    )
    return out
