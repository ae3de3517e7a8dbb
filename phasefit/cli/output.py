"""Where the CLI writes: machine output (JSON) on stdout, human output (rich) on stderr.

Names (workers, pods, pools, clusters, models, labels, paths, URLs) come from outside: they reach rich
as ``Text`` objects or escaped markup, never as markup strings, so ``[/bold]c`` prints as itself
instead of raising ``MarkupError`` and ``[link=...]`` never becomes a terminal hyperlink.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:
    from rich.table import Table

LOG_WIDTH = 160  # when stderr is a file or a pipe (CI logs, `2>file`), rich would otherwise wrap at 80

__all__ = ["LOG_WIDTH", "add_row", "emit_json", "escape", "fail", "human", "plain"]


def human() -> Console:
    """A rich console on stderr, so stdout stays clean for ``--json`` and pipes."""
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=True, highlight=False, width=LOG_WIDTH)
    return console


def plain(value: object, style: str = "") -> Text:
    """``value`` as literal text for rich: brackets in it are characters, never markup."""
    return Text(str(value), style=style)


def add_row(table: Table, *cells: object) -> None:
    """``table.add_row`` with every cell taken literally (cells often hold externally supplied names)."""
    table.add_row(*(cell if isinstance(cell, Text) else plain(cell) for cell in cells))


def emit_json(payload: Any) -> None:
    """Print one JSON document on stdout."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> None:
    """Say what went wrong on stderr and exit non-zero (raises typer.Exit); ``message`` is literal text."""
    import typer

    human().print(Text.assemble(("error:", "bold red"), " ", message))
    raise typer.Exit(code)
