"""A table where every column fits the console unwrapped, else one block per row, so no column and no name
is ever dropped or cut (a terminal of any width, a CronJob's log). Cells are taken literally: they often
hold externally supplied names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from phasefit.cli.output import add_row

if TYPE_CHECKING:
    from rich.console import Console


def print_fitted(
    console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], name: str
) -> None:
    """``rows`` (cells in ``columns`` order) as a table when every cell fits the console's width unwrapped,
    else stacked: per row, its ``name`` column on a line of its own (after ``#N`` where a ``#`` column
    numbers the rows), then the other columns as ``label: value`` items packed into indented lines of the
    console's width (an item is never split; a stacked line longer than the width is left for the terminal
    to wrap, never folded or truncated)."""
    from rich.measure import Measurement
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, no_wrap=True)
    for cells in rows:
        add_row(table, *cells)
    natural = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    _print_stacked(console, title, columns, rows, name)


def _print_stacked(
    console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], name: str
) -> None:
    from rich.text import Text

    console.print(title, style="italic")
    indent = "   "
    at = columns.index(name)
    numbered = "#" in columns
    for cells in rows:
        number = f"#{cells[columns.index('#')]} " if numbered else ""
        head = Text.assemble((number, "bold"), (f"{name}: ", "dim"), (cells[at], "bold"))
        console.print(head, soft_wrap=True)  # a long name runs on whole: the terminal wraps it
        items = [
            Text.assemble((f"{label}: ", "dim"), value)
            for label, value in zip(columns, cells, strict=True)
            if label not in ("#", name)
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
