"""What ``phasefit analyze`` prints for people: the fleet, its pools and the findings (rich, on stderr).

Unknown is never shown as zero: a capacity the analyzer could not estimate reads "unknown", a cost without
a catalog price "price not set", and "No findings" is said only when every worker could be judged. Lost
capacity reads in output tokens/s and requests/s first; total (prompt + output) tokens/s is labelled as the
secondary figure. Every name is literal text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from phasefit.cli.findings_table import figure_range, print_findings, rate
from phasefit.cli.fitted_table import print_fitted
from phasefit.cli.output import escape

if TYPE_CHECKING:
    from rich.console import Console

    from analyzer.pipeline import AnalysisResult
    from analyzer.results.summary import FleetTotals, LatencyTargets, Loss, Summary, TargetAttainment


def _tokens(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f}"


def _per_s(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f} tokens/s"


def _lost(loss: Loss, digits: int = 0) -> str:
    """A loss of the summary (fleet, pool) and its range."""
    return figure_range(loss.value, loss.low, loss.high, digits)


def _money(value: float | None, price: str) -> str:
    if value is not None:
        return f"${value:,.0f} per week"
    return "price not set" if price in ("price not set", "catalog") else f"cost unknown ({price})"


def _reasons(fleet: FleetTotals) -> str:
    return "; ".join(f"{reason} ({n})" for reason, n in fleet.unjudged_reasons.items())


def judged_sentence(fleet: FleetTotals) -> str:
    """What to say when there are no findings: "No findings" only when every worker was judged."""
    unjudged = fleet.unjudged_workers
    if not unjudged:
        return "No findings: every worker sits on hardware its bottleneck needs."
    judged = fleet.judged_workers
    return f"No findings among {judged} judged workers; {unjudged} could not be judged: {_reasons(fleet)}"


def unjudged_sentence(fleet: FleetTotals) -> str:
    """Under the findings: how many workers nobody could judge, and why."""
    return f"{fleet.unjudged_workers} of {fleet.workers} workers could not be judged: {_reasons(fleet)}"


def judged_phrase(fleet: FleetTotals) -> str:
    """ "9 judged: 7 on profiling, 2 on utilisation only" (the evidence behind the verdicts)."""
    judged = fleet.judged_workers
    by_evidence = fleet.judged_by_evidence
    if not by_evidence or list(by_evidence) == ["profiling"]:
        return f"{judged} judged"
    named = {"utilisation": "utilisation only"}
    parts = (f"{n} on {named.get(how, how)}" for how, n in by_evidence.items())
    return f"{judged} judged: " + ", ".join(parts)


def devices_phrase(fleet: FleetTotals) -> str:
    """Whole GPUs and MIG instances counted apart, and the physical GPUs behind them (or why unknown)."""
    instances = fleet.mig_instances
    if not instances:
        return f"{fleet.gpus} GPUs"
    whole, parents = fleet.whole_gpus, fleet.mig_parent_gpus
    physical = fleet.physical_gpus
    physical_text = (
        f"{physical} physical GPUs"
        if physical is not None
        else f"physical GPUs unknown ({fleet.physical_gpus_reason or 'not reported'})"
    )
    return f"{physical_text}: {whole} whole GPUs and {instances} MIG instances on {parents} GPU(s)"


def _unattributed(devices: int, mig_instances: int) -> str:
    """The devices no worker was attributed to, named for what they are (MIG instances count one each)."""
    if mig_instances:
        return f"{devices} unattributed device(s): whole GPUs or MIG instances"
    return f"{devices} unattributed GPU(s)"


def targets_phrase(targets: LatencyTargets) -> str | None:
    """A pool's latency targets and their rule, e.g. "latency targets: TPOT p90 0.05 s (settings,
    PHASEFIT_ANALYZER_TARGETS[0])"; None where it has none."""
    figures = (("TTFT", targets.ttft_p90_s), ("TPOT", targets.tpot_p90_s), ("end-to-end", targets.e2e_p90_s))
    parts = [f"{name} p90 {value:g} s" for name, value in figures if value is not None]
    if not parts:
        return None
    measured = [_attained(a) for a in targets.attainment]
    met = f"; measured: {', '.join(measured)}" if measured else ""
    return f"latency targets: {', '.join(parts)} ({targets.source}, {targets.rule}){met}"


def _attained(a: TargetAttainment) -> str:
    """E.g. "TPOT p90 met 62% of serving time (p90 0.061 s)", or "TTFT unknown (why)"."""
    name = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}[a.metric]
    if a.share is None:
        return f"{name} unknown ({a.reason})"
    return f"{name} p90 met {a.share:.0%} of serving time (p90 {a.p90_s:.3g} s)"


def target_notes(warnings: Sequence[str]) -> list[str]:
    """What the analysis said once about latency targets (none set, none matching, some only reported)."""
    from analyzer.pools.targets import NO_TARGETS_NOTE, NONE_MATCH_NOTE, UNAPPLIED_NOTE

    said = {NO_TARGETS_NOTE, NONE_MATCH_NOTE, UNAPPLIED_NOTE}
    return [w[:1].upper() + w[1:] for w in warnings if w in said]


def print_result(result: AnalysisResult, console: Console) -> None:
    """The fleet summary, the pools (with their notes) and the findings as rich tables."""

    summary = result.typed_summary
    fleet = summary.fleet
    console.print(
        f"[bold]phasefit analyze[/] {escape(f'{summary.from_} -> {summary.to}')}: {fleet.pools} pool(s), "
        f"{fleet.workers} workers ({escape(judged_phrase(fleet))}), {escape(devices_phrase(fleet))} "
        f"({_unattributed(fleet.unattributed_gpus, fleet.mig_instances)})"
    )
    loss = "idle capacity (the fleet served its demand)" if fleet.demand_limited else "undelivered"
    lost, mean = fleet.lost, fleet.lost_mean
    if lost.output_tokens_per_s.value is None and lost.tokens_per_s.value is None:
        console.print("Lost capacity: unknown (no pool's placement could be analysed)")
    else:
        console.print(
            f"Lost output tokens/s now: [bold]{escape(_lost(lost.output_tokens_per_s))}[/], "
            + escape(
                f"requests/s {_lost(lost.requests_per_s, 2)}; mean over the range "
                f"{_lost(mean.output_tokens_per_s)} output tokens/s - {loss}"
            )
        )
        console.print(
            f"(secondary) lost total tokens/s, prompt + output: {_lost(lost.tokens_per_s)}; "
            f"mean {_lost(mean.tokens_per_s)}",
            markup=False,
        )
    unknown_lost = fleet.lost_unknown_pools
    if unknown_lost and (lost.tokens_per_s.value is not None):
        console.print(
            f"Lost capacity unknown for {len(unknown_lost)} pool(s): {', '.join(unknown_lost)}", markup=False
        )
    capacity_note = ""
    if fleet.capacity_tokens_per_s is None and fleet.capacity_unknown_pools:
        capacity_note = f" (unknown for {', '.join(fleet.capacity_unknown_pools)})"
    console.print(
        f"Capacity now {_per_s(fleet.capacity_tokens_per_s)}{capacity_note}, best plan "
        f"{_per_s(fleet.best_tokens_per_s)}, demand {_per_s(fleet.demand_tokens_per_s)}; "
        f"misplacement {_money(fleet.misplacement_cost_per_week_usd, fleet.price)}",
        markup=False,
    )
    for line in target_notes(summary.warnings):
        console.print(line, markup=False)
    rows, notes = _pool_rows(summary)
    print_fitted(console, "Pools", POOL_COLUMNS, rows, "pool")
    if notes:
        console.print("Pool notes", style="bold")
        for line in notes:
            console.print(f"- {line}", markup=False)
    advice: list[str] = []
    for number, f in enumerate(result.findings, start=1):
        rec = f.recommendation
        if rec:
            advice.append(f"#{number} {rec.action}: {rec.detail}")
    if result.findings:
        print_findings(result.findings, console)
        if advice:
            console.print("Recommendations", style="bold")
            for line in advice:
                console.print(line, markup=False)
        if fleet.unjudged_workers:
            console.print(unjudged_sentence(fleet), markup=False)
    else:
        console.print(judged_sentence(fleet), markup=False)


POOL_COLUMNS = (
    "pool",
    "serving",
    "GPUs by SKU x role",
    "prompt/output",
    "capacity tok/s",
    "utilisation",
    "bound",
    "P:D now -> recommended",
    "lost output tok/s (range)",
    "lost req/s",
    "total tok/s (secondary)",
    "drift",
)


def _pool_rows(summary: Summary) -> tuple[list[tuple[str, ...]], list[str]]:
    """Each pool's cells in :data:`POOL_COLUMNS` order, and the notes printed under the table."""
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for row in summary.pools:
        traffic = row.traffic
        mix = (
            f"{traffic.mean_prompt_tokens:,.0f}/{traffic.mean_output_tokens:,.0f}"
            if traffic.mean_prompt_tokens is not None and traffic.mean_output_tokens is not None
            else "unknown"
        )
        by_sku = "; ".join(
            f"{sku} " + ",".join(f"{n} {role}" for role, n in roles.items())
            for sku, roles in row.workers_by_sku_role.items()
        )
        utilisation = f"{row.utilisation:.0%}" if row.utilisation is not None else "unknown"
        rows.append((
            row.pool,
            row.serving,
            by_sku,
            mix,
            _tokens(row.capacity_tokens_per_s),
            utilisation,
            row.bound or "-",
            f"{row.prefill_decode_now or '-'} -> {row.prefill_decode_recommended or '-'}",
            _lost(row.lost.output_tokens_per_s),
            rate(row.lost.requests_per_s.value, 2),
            rate(row.lost.tokens_per_s.value),
            "yes" if row.ratio_drift else "no",
        ))  # fmt: skip
        notes += [f"{row.pool}: {note}" for note in row.notes]
        if row.loss_range_to_zero:  # why its loss's low end is 0: a move held back, an uncertain capacity
            notes.append(f"{row.pool}: {row.loss_range_to_zero}")
        targets = targets_phrase(row.targets)
        if targets:
            notes.append(f"{row.pool}: {targets}")
        if row.capacity_reason:
            notes.append(f"{row.pool}: capacity unknown: {row.capacity_reason}")
    return rows, notes
