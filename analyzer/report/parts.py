"""The report's summary parts: headline tiles, the week-over-week table, the pools section and the data
quality section, as blocks (:mod:`analyzer.report.blocks`)."""

from __future__ import annotations

from analyzer.report.blocks import Block, Figure, Heading, Para, Table, Tile, Tiles
from analyzer.report.figures import Chart
from analyzer.report.model import PRICE_NOT_SET, AuditReport, WeekFigures
from analyzer.report.style import (
    output_rate,
    percent,
    requests_rate,
    si,
    tokens_range,
    tokens_rate,
    usd,
)


def _money(value: float | None) -> str:
    return usd(value) if value is not None else PRICE_NOT_SET


def _tokens(value: float) -> str:
    return f"{si(value)} tokens"


def _opt_tokens(value: float | None) -> str:
    return "unknown" if value is None else f"{si(value)} output tokens"


def _opt_requests(value: float | None) -> str:
    return "unknown" if value is None else f"{si(value)} requests"


def _delta(now: float | None, before: float | None, fmt: str = "number") -> str:
    if now is None or before is None:
        return "-"
    diff = now - before
    if fmt == "percent":
        return f"{diff * 100:+.1f} pt"
    sign = "+" if diff >= 0 else "−"
    return f"{sign}{si(abs(diff))}"


def _money_tile(w: WeekFigures) -> Tile:
    """Money on misplaced or idle capacity: a sum only of prices that are set, never "$0" for a price that
    is not."""
    parts = (w.misplacement_cost_usd, w.idle_cost_usd)
    detail = (
        f"misplacement {_money(w.misplacement_cost_usd)}, idle for lack of demand "
        f"{_money(w.idle_cost_usd)} (run-rate at the latest traffic)"
    )
    if all(p is None for p in parts):
        return Tile(
            "Money on misplaced or idle capacity",
            PRICE_NOT_SET,
            "set hourly_price_usd per GPU model in the operator's catalog file to price the loss",
        )
    if any(p is None for p in parts):
        known = next(p for p in parts if p is not None)
        return Tile("Money on misplaced or idle capacity", f"at least {_money(known)} /week", detail)
    return Tile(
        "Money on misplaced or idle capacity", f"{_money(sum(p or 0.0 for p in parts))} /week", detail
    )


def _output_range(w: WeekFigures) -> str:
    if w.lost_output_tokens_low is None or w.lost_output_tokens_high is None:
        return "unknown"
    return tokens_range(w.lost_output_tokens_low, w.lost_output_tokens_high).replace(" tok/s", "")


def tiles(w: WeekFigures) -> Tiles:
    total = (
        f"Secondary, total prompt + output: {_tokens(w.lost_tokens)} "
        f"({tokens_range(w.lost_tokens_low, w.lost_tokens_high).replace(' tok/s', '')})"
    )
    idle = " 0 undelivered tokens: the fleet was demand-limited, so the loss is idle capacity."
    if w.lost_output_tokens is not None:
        requests = (
            f"{si(w.lost_requests)} requests; " if w.lost_requests is not None else "requests unknown; "
        )
        output_range = (
            tokens_range(w.lost_output_tokens_low, w.lost_output_tokens_high).replace(" tok/s", "")
            if w.lost_output_tokens_low is not None and w.lost_output_tokens_high is not None
            else "range unknown"
        )
        detail = (
            f"{output_range} output tokens; {requests}mean {output_rate(w.mean_lost_output_tokens_per_s)}, "
            f"{requests_rate(w.mean_lost_requests_per_s)} over {w.analysed_hours:,.0f} h analysed. {total}"
        )
        value = f"{si(w.lost_output_tokens)} output tokens"
    else:
        detail = (
            "The analyzer could not estimate output tokens or requests this week. "
            f"{total}; mean {tokens_rate(w.mean_lost_tokens_per_s)} (prompt + output) over "
            f"{w.analysed_hours:,.0f} h analysed"
        )
        value = "unknown"
    if w.demand_limited:
        first = Tile("Output capacity lost to placement", value, f"{detail}.{idle}")
    else:
        first = Tile("Output tokens lost to placement", value, detail)
    money = _money_tile(w)
    capacity = tokens_rate(w.capacity_tokens_per_s) if w.capacity_tokens_per_s is not None else "unknown"
    efficiency = Tile(
        "Placement efficiency",
        percent(w.placement_efficiency, 1) if w.capacity_tokens_per_s is not None else "unknown",
        f"current {capacity} ÷ best placement "
        + (tokens_rate(w.best_tokens_per_s) if w.best_tokens_per_s is not None else "unknown")
        + " of the same GPUs"
        + (
            f" (capacity unknown for {', '.join(w.capacity_unknown_pools)})"
            if w.capacity_unknown_pools
            else ""
        ),
    )
    return Tiles([first, money, efficiency])


def week_table(this: WeekFigures, last: WeekFigures | None) -> Table:
    def row(name: str, now: str, before: str, delta: str) -> list[str]:
        return [name, now, before, delta]

    b = last
    rows = [
        row(
            "output tokens lost to placement",
            _opt_tokens(this.lost_output_tokens),
            _opt_tokens(b.lost_output_tokens) if b else "-",
            _delta(this.lost_output_tokens, b.lost_output_tokens if b else None),
        ),
        row(
            "requests lost to placement",
            _opt_requests(this.lost_requests),
            _opt_requests(b.lost_requests) if b else "-",
            _delta(this.lost_requests, b.lost_requests if b else None),
        ),
        row(
            "output tokens lost range (low–high)",
            _output_range(this),
            _output_range(b) if b else "-",
            "",
        ),
        row(
            "total tokens lost (secondary, prompt + output)",
            _tokens(this.lost_tokens),
            _tokens(b.lost_tokens) if b else "-",
            _delta(this.lost_tokens, b.lost_tokens if b else None),
        ),
        row(
            "total lost range (secondary, low–high)",
            tokens_range(this.lost_tokens_low, this.lost_tokens_high).replace(" tok/s", ""),
            tokens_range(b.lost_tokens_low, b.lost_tokens_high).replace(" tok/s", "") if b else "-",
            "",
        ),
        row(
            "placement efficiency",
            percent(this.placement_efficiency, 1),
            percent(b.placement_efficiency, 1) if b else "-",
            _delta(this.placement_efficiency, b.placement_efficiency if b else None, "percent"),
        ),
        row(
            "misplacement $ /week",
            _money(this.misplacement_cost_usd),
            _money(b.misplacement_cost_usd) if b else "-",
            "",
        ),
        row("idle $ /week", _money(this.idle_cost_usd), _money(b.idle_cost_usd) if b else "-", ""),
        row(
            "misplaced workers",
            str(this.misplaced_workers),
            str(b.misplaced_workers) if b else "-",
            f"{this.misplaced_workers - b.misplaced_workers:+d}" if b else "-",
        ),
        row(
            "open findings",
            ", ".join(f"{n} {k}" for k, n in sorted(this.findings_by_kind.items())) or "0",
            ", ".join(f"{n} {k}" for k, n in sorted(b.findings_by_kind.items())) or "0" if b else "-",
            "",
        ),
        row(
            "worst pool ratio (now → best)",
            this.worst_ratio or "none",
            (b.worst_ratio or "none") if b else "-",
            "",
        ),
        row(
            "telemetry coverage (GPU-hours)",
            percent(this.telemetry_coverage, 1),
            percent(b.telemetry_coverage, 1) if b else "-",
            "",
        ),
    ]
    note = "" if b else "No telemetry for the previous week: nothing to compare with."
    return Table(
        ["metric", f"this week ({this.week})", f"last week ({b.week if b else '-'})", "change"], rows, note
    )


def pool_blocks(report: AuditReport, charts: dict[str, Chart]) -> list[Block]:
    out: list[Block] = [Heading(2, "4. Pools and the recommended prefill:decode ratio")]
    rows = []
    for p in report.pools:
        fleet = "; ".join(
            f"{sku} " + "/".join(f"{n}{role[0].upper()}" for role, n in sorted(r.items()))
            for sku, r in sorted(p.workers_by_sku_role.items())
        )
        flag = (
            " (< 40%: disaggregation benefit masked)"
            if p.utilisation is not None and p.utilisation < 0.4
            else ""
        )
        rows.append(
            [
                p.pool,
                p.precision or "-",
                fleet,
                f"{si(p.mean_prompt_tokens)} / {si(p.mean_output_tokens)}",
                f"{p.requests_per_s:,.1f}" if p.requests_per_s is not None else "unknown",
                p.bound or "-",
                percent(p.utilisation) + flag,
                f"{p.ratio_now or '-'} → {p.ratio_recommended or '-'}",
                "yes" if p.ratio_drift else "",
                output_rate(p.lost_output_tokens_per_s),
                p.loss_basis or "unknown",
                requests_rate(p.lost_requests_per_s),
                tokens_rate(p.lost_tokens_per_s) if p.lost_tokens_per_s is not None else "unknown",
                {True: "yes: idle capacity, not lost tokens", False: "no"}.get(p.demand_limited, "unknown")
                if p.demand_limited is not None
                else "unknown",
            ]
        )
    out.append(
        Table(
            [
                "pool",
                "precision",
                "workers (SKU P/D)",
                "mean prompt / output tokens",
                "requests/s",
                "bound by",
                "utilisation",
                "prefill:decode now → recommended",
                "ratio drift",
                "lost now (output)",
                "loss rests on",
                "lost now (requests)",
                "secondary: total tok/s lost (prompt + output)",
                "serves its demand",
            ],
            rows,
            note="Lost now: output tokens/s and requests/s the best split of the same GPUs would add at "
            "the latest traffic; unknown where not estimated. A pool that serves its demand loses idle "
            "capacity, not tokens. Loss rests on: the least direct capacity behind the figure (measured: "
            "seen saturated; calibrated: the model fitted to the pool's own telemetry; transferred: another "
            "SKU's calibration; model: the performance model alone).",
        )
    )
    per_sku = [
        [
            p.pool,
            group,
            f"{g.prefill_now}P/{g.decode_now}D",
            f"{g.prefill_best}P/{g.decode_best}D",
            si(g.prefill_tokens_per_s_per_worker),
            si(g.decode_tokens_per_s_per_worker),
        ]
        for p in report.pools
        for group, g in sorted(p.per_sku.items())
    ]
    if per_sku:
        out.append(
            Table(
                [
                    "pool",
                    "SKU group",
                    "now",
                    "recommended",
                    "prefill tok/s per worker",
                    "decode tok/s per worker",
                ],
                per_sku,
                note="Recommended: the best split of the same GPUs for the latest traffic mix.",
            )
        )
    out.extend(_target_blocks(report))
    if "ratio" in charts:
        out.append(Figure(charts["ratio"]))
    checks = [
        [p.pool, c.check, "n/a" if c.passed is None else ("pass" if c.passed else "fail"), c.detail]
        for p in report.pools
        for c in p.checks
    ]
    if checks:
        out.append(
            Table(["pool", "check", "result", "detail"], checks, note="Does disaggregation pay off here?")
        )
    return out


def _target_blocks(report: AuditReport) -> list[Block]:
    """Each pool's latency targets against what its engines measured (none: no block)."""
    names = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end to end"}
    rows = [
        [
            p.pool,
            names.get(a.metric, a.metric),
            f"{a.target_s:.3g} s",
            percent(a.share) if a.share is not None else f"unknown: {a.reason}",
            f"{a.p90_s:.3g} s" if a.p90_s is not None else "unknown",
            f"{a.pool_p90_s:.3g} s"
            if a.pool_p90_s is not None
            else (f"unknown: {a.pool_reason}" if a.pool_reason else "unknown"),
            percent(a.pool_met_share) if a.pool_met_share is not None else "unknown",
            f"{p.targets.source} ({p.targets.rule})",
        ]
        for p in report.pools
        if p.targets is not None
        for a in p.targets.attainment
    ]
    if not rows:
        return []
    return [
        Table(
            [
                "pool",
                "latency",
                "target (p90)",
                "serving time within it",
                "measured p90",
                "pool p90 (merged buckets)",
                "observations in hours within it",
                "rule",
            ],
            rows,
            note="From the engines' own histograms (each window's p90; prefill and colocated workers for "
            "TTFT, decode and colocated for TPOT and end to end). The pool p90 merges the workers' "
            "histograms bucket by bucket, as histogram_quantile over sum by (le) does, rather than averaging "
            "their p90s. With targets set, capacity and loss count goodput.",
        )
    ]


def quality_blocks(report: AuditReport) -> list[Block]:
    q = report.quality
    rows = [
        ["GPUs seen", f"{q.gpus:,}"],
        [
            "GPU-hours with telemetry",
            f"{q.gpu_hours_with_telemetry:,.0f} of {q.gpu_hours_expected:,.0f} ({percent(q.coverage, 1)})",
        ],
        ["by source", ", ".join(f"{s} {h:,.0f} h" for s, h in q.gpu_hours_by_source.items()) or "-"],
        [
            "collectors missing (node: silent hours)",
            ", ".join(f"{g.node}: {g.missing_hours} of {g.hours} h" for g in q.nodes_with_gaps) or "none",
        ],
        ["lost GPUs (Xid 79)", ", ".join(q.lost_gpus) or "none"],
        ["degraded telemetry", f"{q.degraded_gpu_hours:,.1f} GPU-hours"],
        [
            # The count is of devices: a MIG instance without a worker counts once, as an instance.
            "devices without a worker (whole GPUs and MIG instances; unattributed, never guessed)"
            if q.mig_instances
            else "GPUs without a worker (unattributed, never guessed)",
            str(q.unattributed_gpus),
        ],
        ["workers whose role is unknown", f"{q.workers_role_unknown} of {q.workers}"],
        ["how roles were learned", ", ".join(f"{s} {n}" for s, n in q.role_sources.items()) or "-"],
        [
            "physical GPUs",
            str(q.physical_gpus) if q.physical_gpus is not None else "unknown (a MIG instance names no GPU)",
        ],
        ["MIG instances", f"{q.mig_instances} on {q.mig_parent_gpus} GPU(s)" if q.mig_instances else "0"],
    ]
    return [
        Heading(2, "9. Data quality and method"),
        Table(["coverage", "value"], rows),
        Para(
            "Lost capacity, in output (generated) tokens/s and requests/s first, total (prompt + output) "
            "tokens/s as a secondary figure: what the best placement of the same GPUs (same count per SKU "
            "and TP, memory fit respected) would sustain for the observed traffic, minus what the current "
            "placement sustains, per segment of steady traffic, times its duration. Demand-limited: the "
            "traffic needed less than the current placement can serve, so the loss is idle capacity and "
            f"money, not undelivered tokens. Money is priced with {report.price_source}. Figures for a week "
            "are recomputed from the store's rollups each time the report is built.",
            "note",
        ),
    ]
