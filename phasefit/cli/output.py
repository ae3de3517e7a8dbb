"""Where the CLI writes: machine output (JSON) on stdout, human output (rich) on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

LOG_WIDTH = 160  # when stderr is a file or a pipe (CI logs, `2>file`), rich would otherwise wrap at 80


def human() -> Console:
    """A rich console on stderr, so stdout stays clean for ``--json`` and pipes."""
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=True, highlight=False, width=LOG_WIDTH)
    return console


def emit_json(payload: Any) -> None:
    """Print one JSON document on stdout."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> None:
    """Say what went wrong on stderr and exit non-zero (raises typer.Exit)."""
    import typer

    human().print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)
