"""The findings of ``phasefit analyze``: a table where every column fits the console unwrapped, else one
block per finding, so no column and no worker name is ever dropped or cut (a terminal of any width, a log).
An unknown figure reads "-", never 0."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phasefit.cli.output import add_row

if TYPE_CHECKING:
    from rich.console import Console

    from fleet.contract import Finding


def rate(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def figure_range(value: float | None, low: float | None, high: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f} ({rate(low, digits)}-{rate(high, digits)})"


# The findings' columns, in order: the header and the figure of one finding.
FINDING_COLUMNS = (
    "#",
    "severity",
    "kind",
    "worker / pool",
    "SKU",
    "role",
    "bottleneck",
    "lost output tok/s (range)",
    "lost req/s",
    "total tok/s",
    "since (UTC)",
    "status",
)


def finding_cells(number: int, f: Finding) -> tuple[str, ...]:
    """One finding's cells, in :data:`FINDING_COLUMNS` order (an unknown figure reads "-", never 0; the
    total tokens/s of a finding that estimates no loss reads "unknown")."""
    from analyzer.findings.loss import states_loss

    total = f.lost_tokens_per_s if states_loss(f) else None
    return (
        str(number),
        f.severity.value,
        f.kind.value,
        f.worker_id or f.pool or "fleet",
        f.gpu_sku or "-",
        f.role.value,
        f.bottleneck.value,
        figure_range(
            f.lost_output_tokens_per_s, f.lost_output_tokens_per_s_low, f.lost_output_tokens_per_s_high
        ),
        rate(f.lost_requests_per_s, 2),
        "unknown" if total is None else rate(total),
        f.first_seen.strftime("%m-%d %H:%M"),
        f.status.value,
    )


def print_findings(findings: list[Finding], console: Console) -> None:
    """The findings as a table when every cell fits the console's width unwrapped, else stacked: one block
    per finding, its worker on a line of its own. Either way no column is dropped or cut and every name
    prints whole (a stacked line longer than the width is left for the terminal to wrap, never folded or
    truncated), in a terminal of any width as in a log."""
    from rich.measure import Measurement
    from rich.table import Table

    rows = [finding_cells(number, f) for number, f in enumerate(findings, start=1)]
    table = Table(title="Findings", title_justify="left")
    for column in FINDING_COLUMNS:
        table.add_column(column, no_wrap=True)
    for cells in rows:
        add_row(table, *cells)
    natural = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    _print_stacked(rows, console)


def _print_stacked(rows: list[tuple[str, ...]], console: Console) -> None:
    """Narrow consoles: ``#N worker / pool: NAME`` on a line of its own, then the other columns as
    ``label: value`` items packed into indented lines of the console's width (an item is never split)."""
    from rich.text import Text

    console.print("Findings", style="italic")
    indent = "   "
    for cells in rows:
        number, name = cells[0], cells[FINDING_COLUMNS.index("worker / pool")]
        head = Text.assemble((f"#{number} ", "bold"), ("worker / pool: ", "dim"), (name, "bold"))
        console.print(
            head, soft_wrap=True
        )  # a long name runs on whole: the terminal wraps it, rich never cuts
        items = [
            Text.assemble((f"{label}: ", "dim"), value)
            for label, value in zip(FINDING_COLUMNS, cells, strict=True)
            if label not in ("#", "worker / pool")
        ]
        line = Text(indent)
        for item in items:
            if len(line) > len(indent) and line.cell_len + 2 + item.cell_len > console.width:
                console.print(line, soft_wrap=True)
                line = Text(indent)
            if len(line) > len(indent):
                line.append("; ")
            line.append_text(item)
        console.print(line, soft_wrap=True)
