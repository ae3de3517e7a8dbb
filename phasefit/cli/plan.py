"""``phasefit plan``: the concrete changes the analysis recommends, per pool, applied by nobody.

Runs the same analysis as ``phasefit analyze`` (:func:`phasefit.cli.analyze.run_store_analysis`, which also
stores the run) and prints, per pool, the replicas per SKU and role now and recommended, the workers that
change role, and the expected gain with its range (:mod:`analyzer.planning.plan`). ``--add``, ``--remove`` and
``--replace`` re-solve one pool's best placement on a hypothetical GPU set (:mod:`analyzer.planning.what_if`).
A what-if that cannot be evaluated (unknown SKU, a count that is not a positive multiple of the TP degree, a
removal of more GPUs than the pool has, several pools and no ``--pool``) exits 2 with the reason.

``--json`` prints the plan documented in docs/plan.md on stdout; tables go to stderr. Nothing is applied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from phasefit.cli.analyze import DatabaseUrlOption, FromOption, ToOption
from phasefit.cli.output import add_row, emit_json, escape, fail, human

if TYPE_CHECKING:
    from rich.console import Console

    from analyzer.planning.plan import Figure, Gain, PoolPlan
    from analyzer.planning.what_if import WhatIfResult
    from fleet.gpus import GpuCatalog

USAGE_ERROR = 2


def plan(
    from_: FromOption = None,
    to: ToOption = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON on stdout instead of tables on stderr.")
    ] = False,
    database_url: DatabaseUrlOption = None,
    add: Annotated[
        list[str] | None,
        typer.Option("--add", help="What-if: add GPUs to the pool, SKU:GPUS (e.g. H200-SXM:16). Repeatable."),
    ] = None,
    remove: Annotated[
        list[str] | None,
        typer.Option("--remove", help="What-if: remove GPUs from the pool, SKU:GPUS. Repeatable."),
    ] = None,
    replace: Annotated[
        list[str] | None,
        typer.Option(
            "--replace", help="What-if: replace GPUs, FROM_SKU:TO_SKU:GPUS (e.g. H100-SXM:H200-SXM:8)."
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option("--pool", help="The pool key a what-if applies to; required with several pools."),
    ] = None,
) -> None:
    """Print the changes the analysis recommends per pool (roles, replicas per SKU, expected gain) without
    applying anything; with --add/--remove/--replace, re-solve a pool on a hypothetical GPU set."""
    from analyzer.planning.plan import PLAN_VERSION, fleet_plan
    from analyzer.planning.what_if import WhatIfError, choose_pool, parse_changes, resolve_skus, what_if
    from phasefit.cli.analyze import parse_time, run_store_analysis

    since = parse_time(from_, option="--from") if from_ else None
    until = parse_time(to, option="--to") if to else None
    try:
        changes = parse_changes(add or (), remove or (), replace or ())
        skus = resolve_skus(changes, _gpu_catalog(database_url)) if changes else {}
    except WhatIfError as exc:
        refuse(str(exc))
    result = run_store_analysis(database_url, since, until)
    plans = fleet_plan(result.pools, result.grid.workers)
    hypothetical = None
    if changes:
        from analyzer.pipeline import params_of_pool
        from analyzer.settings import AnalyzerSettings

        try:
            chosen = choose_pool(result.pools, pool)
            params = AnalyzerSettings().params()
            # The pool's own latency targets (its TPOT sizes decode batches), as in the analysis.
            pool_params = params_of_pool(params, chosen.pool.key, chosen.targets)
            hypothetical = what_if(chosen, changes, skus, pool_params.capacity, pool_params.tolerance)
        except WhatIfError as exc:
            refuse(str(exc))
    elif pool is not None and pool not in {p.pool for p in plans}:
        refuse(f"no pool {pool!r} in the analysis; pools: {', '.join(p.pool for p in plans)}")
    if pool is not None:
        plans = [p for p in plans if p.pool == pool]
    if json_output:
        payload: dict[str, Any] = {
            "version": PLAN_VERSION,
            "applied": False,
            "from": result.summary.get("from"),
            "to": result.summary.get("to"),
            "pools": [p.as_dict() for p in plans],
            "what_if": what_if_payload(hypothetical) if hypothetical is not None else None,
        }
        emit_json(payload)
    else:
        console = human()
        print_plan(plans, console)
        if hypothetical is not None:
            print_what_if(hypothetical, console)


def gain_vs_recommended(w: WhatIfResult) -> Gain:
    """What the hypothetical GPU set adds over the recommended split of today's GPUs (what
    ``phasefit plan`` without a what-if would reach): the part of the gain the new GPUs bring, not the
    re-split."""
    from analyzer.planning.plan import Figure, gain_from_tokens

    best = w.capacity_best_now.tokens_per_s.value
    hyp = w.capacity_what_if.tokens_per_s
    return gain_from_tokens(Figure(hyp.value - best, hyp.low - best, hyp.high - best), w.isl, w.osl)


def what_if_payload(w: WhatIfResult) -> dict[str, Any]:
    """The what-if as ``--json`` prints it: :meth:`WhatIfResult.as_dict` with ``gain_vs_recommended`` (the
    gain over the recommended split of today's GPUs) next to ``gain_vs_now``."""
    payload: dict[str, Any] = {}
    for key, value in w.as_dict().items():
        payload[key] = value
        if key == "gain_vs_now":
            payload["gain_vs_recommended"] = gain_vs_recommended(w).as_dict()
    return payload


def refuse(message: str) -> NoReturn:
    """A what-if or option the command cannot evaluate: the reason on stderr, exit 2."""
    fail(message, USAGE_ERROR)
    raise AssertionError("unreachable: fail() raises typer.Exit")


def _gpu_catalog(database_url: str | None) -> GpuCatalog:
    """The GPU catalog the analysis will use (the built-in one with the operator's file merged)."""
    from fleet.catalog import CatalogError, load_catalog
    from phasefit.cli.db import load_settings

    try:
        return load_catalog(load_settings(database_url).catalog_path).gpus
    except CatalogError as exc:
        refuse(str(exc))


def _range(f: Figure | None, digits: int = 0) -> str:
    if f is None:
        return "unknown"
    return f"{f.value:+,.{digits}f} ({f.low:,.{digits}f} to {f.high:,.{digits}f})"


def _level(f: Figure, digits: int = 0) -> str:
    if f.low == f.high == f.value:
        return f"{f.value:,.{digits}f}"
    return f"{f.value:,.{digits}f} ({f.low:,.{digits}f}-{f.high:,.{digits}f})"


def print_plan(plans: list[PoolPlan], console: Console) -> None:
    """Per pool: the replicas table, the role changes and the expected gain."""
    from rich.table import Table

    from analyzer.planning.plan import GOODPUT_BASIS

    console.print("[bold]phasefit plan[/]: recommended changes; nothing is applied")
    for p in plans:
        console.print(f"\n[bold]{escape(p.pool)}[/] ({escape(str(p.status))})")
        if p.gain is None:
            console.print(f"expected gain: unknown: {p.reason}", markup=False)
        else:
            idle = " (idle capacity: the pool serves its peak)" if p.demand_limited else ""
            console.print(
                f"expected gain: output tokens/s {_range(p.gain.output_tokens_per_s)}, requests/s "
                f"{_range(p.gain.requests_per_s, 2)}; total tokens/s {_range(p.gain.tokens_per_s)}{idle}",
                markup=False,
            )
        if p.reason and p.gain is not None:
            console.print(p.reason, markup=False)
        for note in p.notes:
            if note.startswith(GOODPUT_BASIS):
                console.print(note[:1].upper() + note[1:], markup=False)
        if p.replicas:
            table = Table(title="Replicas per SKU and role", title_justify="left")
            for column in ("SKU", "TP", "role", "now", "recommended", "change"):
                table.add_column(column)
            for r in p.replicas:
                delta = r.recommended - r.current
                add_row(
                    table,
                    r.sku,
                    str(r.tp),
                    r.role,
                    str(r.current),
                    str(r.recommended),
                    f"{delta:+d}" if delta else "",
                )
            console.print(table)
        if p.changes:
            table = Table(title="Role changes", title_justify="left")
            for column in ("worker", "SKU", "from -> to", "with", "work moves to", "why"):
                table.add_column(column, overflow="fold")
            for c in p.changes:
                add_row(
                    table,
                    c.worker_id,
                    f"{c.tp} x {c.sku}",
                    f"{c.from_role} -> {c.to_role}",
                    c.counterpart_worker_id or "-",
                    c.work_moves_to_sku or "-",
                    c.reason,
                )
            console.print(table)


def print_what_if(w: WhatIfResult, console: Console) -> None:
    """The hypothetical GPU set's best split, capacity, gain and cost."""
    from rich.table import Table

    from analyzer.planning.plan import gain_from_tokens

    spec = ", ".join(f"{c.op} {c.gpus} x {c.sku}" for c in w.changes)
    console.print(f"\n[bold]What-if[/] on {escape(w.pool)}: {escape(spec)}")
    table = Table(title="Workers per SKU and role", title_justify="left")
    for column in (
        "SKU",
        "TP",
        "GPUs now",
        "GPUs what-if",
        "prefill now -> best",
        "decode now -> best",
        "source",
    ):
        table.add_column(column)
    for g in w.groups:
        add_row(
            table,
            g.sku + (" (new)" if g.new else ""),
            str(g.tp),
            str((g.prefill_now + g.decode_now) * g.tp),
            str((g.prefill_what_if + g.decode_what_if) * g.tp),
            f"{g.prefill_now} -> {g.prefill_what_if}",
            f"{g.decode_now} -> {g.decode_what_if}",
            g.capacity_source,
        )
    console.print(table)
    for label, throughput in (
        ("capacity now", w.capacity_now),
        ("capacity, recommended split of today's GPUs", w.capacity_best_now),
        ("capacity what-if", w.capacity_what_if),
    ):
        level = gain_from_tokens(throughput.tokens_per_s, w.isl, w.osl)
        console.print(
            f"{label}: output tokens/s {_level(level.output_tokens_per_s)}, requests/s "
            f"{_level(level.requests_per_s, 2)}",
            markup=False,
        )
    console.print(
        f"gain vs now: output tokens/s {_range(w.gain.output_tokens_per_s)}, requests/s "
        f"{_range(w.gain.requests_per_s, 2)} (bound by {w.bound_what_if})",
        markup=False,
    )
    over_best = gain_vs_recommended(w)
    console.print(
        f"gain vs the recommended split of today's GPUs: output tokens/s "
        f"{_range(over_best.output_tokens_per_s)}, requests/s {_range(over_best.requests_per_s, 2)}",
        markup=False,
    )

    def money(value: float | None) -> str:
        return "price not set" if value is None else f"${value:,.0f} per week"

    change = w.cost_change_per_week_usd
    console.print(
        f"cost: now {money(w.cost_now_per_week_usd)}, what-if {money(w.cost_what_if_per_week_usd)}"
        + (f" ({change:+,.0f} $/week)" if change is not None else ""),
        markup=False,
    )
    for note in w.notes:
        console.print(f"- {note}", markup=False)
