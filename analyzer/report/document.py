"""The audit's content as a list of blocks (headings, paragraphs, tiles, tables, figures): every wording and
number decided once, then printed by :mod:`analyzer.report.html` and :mod:`analyzer.report.markdown`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from analyzer.report.blocks import Block, Figure, Heading, Para, Table
from analyzer.report.figures import Chart
from analyzer.report.model import Action, AuditReport
from analyzer.report.parts import pool_blocks, quality_blocks, tiles, week_table
from analyzer.report.payoff import payoff_blocks
from analyzer.report.standing_what_if import what_if_blocks
from analyzer.report.style import output_range, output_rate, percent, requests_rate, tokens_rate

TOP_ACTIONS = 15
POINTS_LISTED = 40


def _time(ts: datetime) -> str:
    return f"{ts:%Y-%m-%d %H:%M}"


def title(report: AuditReport) -> str:
    return (
        f"phasefit placement audit · {', '.join(report.clusters)} · ISO week {report.week} "
        f"({_time(report.since)} → {_time(report.until)} UTC)"
    )


def _action_rows(actions: Sequence[Action]) -> list[list[str]]:
    return [
        [
            str(a.rank or "-"),
            a.status,
            a.action,
            a.subject,
            f"{a.sku} · {a.role}" if a.sku else "pool-level",
            a.kind,
            a.evidence or "-",
            output_rate(a.lost_output_tokens_per_s),
            output_range(a.lost_output_low, a.lost_output_high)
            if a.lost_output_tokens_per_s is not None
            else "unknown",
            requests_rate(a.lost_requests_per_s),
            _total(a),
            percent(a.share_of_week),
            a.detail or "-",
        ]
        for a in actions
    ]


def _total(a: Action) -> str:
    """The secondary total tokens/s column: "unknown" where the finding estimates no loss (never 0)."""
    total = a.expected_gain_tokens_per_s or a.lost_tokens_per_s
    return tokens_rate(total) if total is not None else "unknown"


ACTION_COLUMNS = [
    "#",
    "status",
    "action",
    "worker / pool",
    "SKU · role",
    "kind",
    "evidence (week means)",
    "output tok/s to gain",
    "output range",
    "requests/s to gain",
    "secondary: total tok/s (prompt + output)",
    "of the week",
    "what to do",
]
ACTION_NUMERIC = {0, 7, 9, 10}


def blocks(report: AuditReport, charts: dict[str, Chart]) -> list[Block]:
    w, q = report.this_week, report.quality
    out: list[Block] = [Heading(1, title(report))]
    model = report.model_error
    out.append(
        Para(
            f"phasefit {report.version or 'dev'} · performance model calibrated "
            f"{model.calibration or '-'}, held-out p90 ratio error "
            f"{percent(model.heldout_ratio_error_p90, 1)} · prices: {report.price_source} · input "
            f"fingerprint {report.fingerprint} · telemetry coverage {percent(q.coverage, 1)} of GPU-hours",
            "note",
        )
    )
    out += [tiles(w), Para(report.verdict, "verdict")]
    fleet = "; ".join(
        f"{sku}: " + ", ".join(f"{n} {role}" for role, n in sorted(roles.items()))
        for sku, roles in sorted(report.gpus_by_sku_role.items())
    )
    new = sum(1 for a in report.actions if a.status == "new")
    out.append(
        Para(f"Workers by SKU and role: {fleet}. Actions: {new} new, {len(report.actions) - new} persisting.")
    )
    out += [Heading(2, "1. Executive summary"), week_table(w, report.last_week)]
    for name in ("lost", "gpu-hours"):
        if name in charts:
            out.append(Figure(charts[name]))
    out.append(Heading(2, "2. Actions"))
    if report.actions:
        joint = (
            w.best_tokens_per_s - w.capacity_tokens_per_s
            if w.best_tokens_per_s is not None and w.capacity_tokens_per_s is not None
            else None
        )
        out.append(
            Table(
                ACTION_COLUMNS,
                _action_rows(report.actions[:TOP_ACTIONS]),
                numeric=ACTION_NUMERIC,
                note="Ranked by output tokens/s to gain, then requests/s; unknown: not estimated, ranked "
                "after every estimated loss. All actions together, secondary, in total prompt + output "
                f"tokens: {'+' + tokens_rate(joint) if joint is not None else 'unknown'} at the latest "
                "traffic mix (the placement solver's joint optimum, not the sum of the rows: findings of "
                "one pool overlap).",
            )
        )
    else:
        out.append(Para("No action recommended this week."))
    out.append(Heading(2, "3. The fleet on the roofline"))
    if "roofline" in charts:
        out.append(Figure(charts["roofline"]))
    out.append(
        Para(
            "Each worker at its week mean. FLOP/s and intensity are estimated from counters (tensor-pipe "
            "activity × the SKU's dense peak, DRAM activity × its bandwidth; DCGM's DRAM activity tops out "
            "near 0.8), not measured per kernel: read the distance between roofs, not the third digit.",
            "note",
        )
    )
    points = sorted(report.points, key=lambda p: (not p.misplaced, p.pool, p.worker_id))[:POINTS_LISTED]
    out.append(
        Table(
            [
                "worker",
                "SKU",
                "role",
                "FLOP/byte",
                "TFLOP/s",
                "tensor",
                "DRAM",
                "of own roof",
                "bound",
                "misplaced",
            ],
            [
                [
                    p.worker_id,
                    p.sku,
                    p.role,
                    f"{p.intensity:,.0f}",
                    f"{p.flops / 1e12:,.0f}",
                    percent(p.tensor_active),
                    percent(p.dram_active),
                    percent(p.share_of_roof),
                    p.bound,
                    "yes" if p.misplaced else "",
                ]
                for p in points
            ],
            numeric={3, 4, 5, 6, 7},
            note=f"{len(report.points) - len(points)} more worker(s) not listed."
            if len(report.points) > len(points)
            else "",
        )
    )
    out += pool_blocks(report, charts)
    out += what_if_blocks(report.what_ifs, report.sharded)
    out.append(Heading(2, "5. Drift events"))
    out.append(
        Table(
            ["time (UTC)", "pool", "what changed", "magnitude", "became"],
            [
                [_time(e.at), e.pool, e.what, percent(e.magnitude), e.became or "-"]
                for e in report.drift_events
            ],
        )
        if report.drift_events
        else Para("No drift detected this week.")
    )
    out.append(Heading(2, "6. Follow-up on last week's findings"))
    out.append(
        Table(
            ["worker / pool", "kind", "state", "lost last week (output)", "lost this week (output)"],
            [
                [
                    u.subject,
                    u.kind,
                    u.state,
                    output_rate(u.lost_last_week),
                    "resolved" if u.state == "resolved" else output_rate(u.lost_this_week),
                ]
                for u in report.follow_up
            ],
        )
        if report.follow_up
        else Para("No open findings last week to follow up (or no telemetry for it).")
    )
    out += payoff_blocks(report.changes, report.accuracy)
    out.append(Heading(2, "8. Considered, not recommended"))
    out.append(
        Table(
            ["worker / pool", "kind", "why no action", "lost output range"],
            [
                [
                    a.subject,
                    a.kind,
                    a.detail or "no action improves on the current placement",
                    output_range(a.lost_output_low, a.lost_output_high)
                    if a.lost_output_tokens_per_s is not None
                    else "unknown",
                ]
                for a in report.considered
            ],
        )
        if report.considered
        else Para("Every finding this week has a recommended action.")
    )
    out += quality_blocks(report)
    out.append(Heading(2, "Appendix: all findings"))
    out.append(Table(ACTION_COLUMNS, _action_rows(report.appendix), numeric=ACTION_NUMERIC))
    return out
